"""Per-shard work of the generate flow: the prompt contexts of retrieved rows and the selected reasoner over a
shard of questions. Plain functions, no Prefect, no file output (the retrieve flow's is ``kgrag.retrieval.run``)."""

from __future__ import annotations

import hashlib
import json
import time
from typing import Sequence

import numpy as np

from kgrag import schema as S
from kgrag.index.embed import EmbeddingIndex
from kgrag.llm.prompts import context_text
from kgrag.kg.kgview import KGView
from kgrag.reasoning.params import GenerateParams, ReasonParams
from kgrag.reasoning.reasoners import Sampling
from kgrag.types import Question


def contexts_for(rows: Sequence[dict], *, kg: KGView, params: GenerateParams) -> list[str]:
    """Prompt context of each retrieved row: the first ``max_context_triples`` triples, textualized."""
    out = []
    for r in rows:
        named = kg.named_triples(
            np.asarray(r[S.TRIPLE_HEADS], dtype=np.int64),
            np.asarray(r[S.TRIPLE_RELATIONS], dtype=np.int64),
            np.asarray(r[S.TRIPLE_TAILS], dtype=np.int64),
        )
        out.append(context_text(named, form=params.context, max_triples=params.max_context_triples))
    return out


def proposed_ends(trace: str | dict | None) -> list[int]:
    """The answer entity ids a retrieved row's trace proposes (``ends``: relpath's sequence ends); [] if none."""
    if not trace:
        return []
    t = json.loads(trace) if isinstance(trace, str) else trace
    return [int(x) for x in (t.get("ends") or [])] if isinstance(t, dict) else []


def proposals_for(rows: Sequence[dict], *, kg: KGView) -> list[tuple[str, ...]]:
    """Names of the answer entities each retrieved row proposes (:func:`proposed_ends`), in its order."""
    out = []
    for r in rows:
        ids = proposed_ends(r.get(S.TRACE))
        out.append(tuple(kg.names(np.asarray(ids, dtype=np.int64))) if ids else ())
    return out


def baselines(*, question: Question, context: str, proposed: Sequence[str], kg: KGView | None, reason: ReasonParams,
              seed: int) -> tuple[str, str]:
    """The no-LLM baselines of one question: (first candidate, seeded random candidate) of the candidates the
    ``rank`` reasoner would score with the experiment's ``reason.rank`` params (the same contexts and candidate
    rule, no LLM); "" where there is none. The random pick is a hash of ``seed`` and the question id, so it does
    not depend on the shard or the order of questions."""
    from kgrag.llm.constrain import answer_candidates

    rp = reason.module_params("rank")
    names = answer_candidates(question=question, context=context, proposed=proposed, kg=kg,
                              candidates=rp.candidates, distance=rp.distance)
    if not names:
        return "", ""
    h = int.from_bytes(hashlib.sha256(f"{seed}:{question.question_id}".encode()).digest()[:8], "big")
    return names[0], names[h % len(names)]


def reason_rows(
    *, questions: Sequence[Question], contexts: Sequence[str], client, reason: ReasonParams, sampling: Sampling,
    kg: KGView | None = None, index: EmbeddingIndex | None = None, proposed: Sequence[tuple[str, ...]] | None = None,
) -> list[dict]:
    """Generations rows of a shard: the selected reasoner on every question, all advanced together (one
    backend batch per step), with the no-LLM baselines (:func:`baselines`) beside each answer. ``proposed``:
    each question's retriever-proposed answer names (:func:`proposals_for`)."""
    from kgrag.reasoning.reasoners import REASONERS, ReasonInput, rows_of, run_batched

    entry = REASONERS.get(reason.method)
    params = reason.module_params()
    proposed = list(proposed) if proposed is not None else [()] * len(questions)
    jobs = [entry.impl(inp=ReasonInput(question=q, context=c, kg=kg, index=index, sampling=sampling,
                                     constrain_answer=reason.constrain_answer, proposed=p), params=params)
            for q, c, p in zip(questions, contexts, proposed)]
    t0, own_ms = time.perf_counter(), []
    results = run_batched(jobs=jobs, client=client, max_batch=reason.max_batch, own_ms=own_ms)
    per_q_ms = (time.perf_counter() - t0) * 1000 / max(len(questions), 1)
    rows = rows_of(question_ids=[q.question_id for q in questions], results=results, reasoner=reason.method,
                   separator=sampling.separator, seed=sampling.seed, per_q_ms=per_q_ms, own_ms=own_ms)
    for row, q, c, p in zip(rows, questions, contexts, proposed):
        row[S.BASELINE_FIRST], row[S.BASELINE_RANDOM] = baselines(question=q, context=c, proposed=p, kg=kg,
                                                                  reason=reason, seed=sampling.seed)
    return rows


def sampling_of(params) -> Sampling:
    """The reasoners' sampling settings of a ``Params``: the ``generate`` section's, with
    ``evaluate.answer_separator``; no worked example for the tuned model (``generate.model: tuned``)."""
    g = params.generate
    # the tuned model was trained without a worked example: its prompts have none (shorter, faster)
    return Sampling(temperature=g.temperature, top_p=g.top_p, max_tokens=g.max_tokens, seed=g.seed,
                    few_shot=g.few_shot and g.model != "tuned", separator=params.evaluate.answer_separator)


def answer_rows(exp, questions: Sequence[Question], retrieved: Sequence[dict]) -> list[dict]:
    """Generations rows of a shard with the parts of an experiment (``kgrag.experiment.Experiment``): each
    question's prompt context and proposals from its retrieved row (triple columns and trace of
    ``schema.RETRIEVED``), then :func:`reason_rows` with its LLM client, ``reason`` section, KG and index."""
    return reason_rows(questions=questions, contexts=contexts_for(retrieved, kg=exp.kg, params=exp.params.generate),
                       client=exp.client, reason=exp.params.reason, sampling=sampling_of(exp.params), kg=exp.kg,
                       index=exp.index, proposed=proposals_for(retrieved, kg=exp.kg))


def reason_job(exp, question: Question, context: str, proposed: Sequence[str] = ()):
    """The experiment's reasoner (``reason.method``) on one question: its generator, to drive with
    ``kgrag.reasoning.reasoners.run_one`` and the experiment's client."""
    from kgrag.reasoning.reasoners import REASONERS, ReasonInput

    r = exp.params.reason
    inp = ReasonInput(question=question, context=context, kg=exp.kg, index=exp.index, sampling=sampling_of(exp.params),
                      constrain_answer=r.constrain_answer, proposed=tuple(proposed))
    return REASONERS.get(r.method).impl(inp=inp, params=r.module_params())
