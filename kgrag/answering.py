"""Per-shard work of the generate flow: the prompt contexts of retrieved rows and the selected reasoner over a
shard of questions. Plain functions, no Prefect, no file output (the retrieve flow's is ``kgrag.runner``)."""

from __future__ import annotations

import time
from typing import Sequence

import numpy as np

from kgrag import schema as S
from kgrag.embed import EmbeddingIndex
from kgrag.generate import context_text
from kgrag.kgview import KGView
from kgrag.params import GenerateParams, ReasonParams
from kgrag.reasoners import Sampling
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


def reason_rows(
    *, questions: Sequence[Question], contexts: Sequence[str], client, reason: ReasonParams, sampling: Sampling,
    kg: KGView | None = None, index: EmbeddingIndex | None = None,
) -> list[dict]:
    """Generations rows of a shard: the selected reasoner on every question, all advanced together (one
    backend batch per step)."""
    from kgrag.reasoners import REASONERS, ReasonInput, rows_of, run_batched

    entry = REASONERS.get(reason.method)
    params = reason.module_params()
    jobs = [entry.impl(inp=ReasonInput(question=q, context=c, kg=kg, index=index, sampling=sampling,
                                     constrain_answer=reason.constrain_answer), params=params)
            for q, c in zip(questions, contexts)]
    t0 = time.perf_counter()
    results = run_batched(jobs=jobs, client=client, max_batch=reason.max_batch)
    per_q_ms = (time.perf_counter() - t0) * 1000 / max(len(questions), 1)
    return rows_of(question_ids=[q.question_id for q in questions], results=results, reasoner=reason.method,
                   separator=sampling.separator, seed=sampling.seed, per_q_ms=per_q_ms)
