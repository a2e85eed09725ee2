"""Benchmark: the ``answer`` reasoner with and without constrained decoding (``reason.constrain_answer``).

On N real MetaQA questions (a seeded sample of the pipeline's questions) with their retrieved contexts
(the default retriever's), read from the committed pipeline outputs ``data/retrieve/retrieved.parquet`` and
``data/validated/kg.duckdb`` (read-only; nothing in ``data/`` or ``reports/`` but the JSON below is
written), the real SmolLM2 (llamacpp backend, ``generate`` settings of ``params.yaml``) answers each
question twice: free, and constrained by grammar to entity names of the context (one or a `` | `` list).
No LLM call cache: every call is made. Writes ``reports/bench/constrain.json`` (Hit@1 of both, and more).

Needs the ``retrieve`` stage outputs (``dvc repro retrieve``).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time

import numpy as np

from bench.common import machine, write_result

from kgrag import io, schema as S
from kgrag.llm.constrain import context_entities
from kgrag.kg.duckdb_io import read_tables
from kgrag.evaluation.evaluate import answer_scores, normalize, rouge_l
from kgrag.llm.prompts import parse_answers
from kgrag.llm.clients import backend_params, client_for
from kgrag.experiment import Experiment, Files
from kgrag.params import load
from kgrag.reasoning.reasoners import ReasonInput, run_batched
from kgrag.reasoning.reasoners.answer import answer
from kgrag.registry import NoParams
from kgrag.reasoning.generate import contexts_for, sampling_of
from kgrag.kg.store import questions_from_table


def main() -> None:
    """Run the benchmark."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--questions", type=int, default=40, help="questions (seeded sample of the pipeline's)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0, help="llama.cpp threads (0 = generate.llamacpp.n_threads); "
                    "1 is far faster on an oversubscribed machine (llama.cpp threads spin-wait)")
    ap.add_argument("--out", default="reports/bench/constrain.json")
    args = ap.parse_args()
    params = load("params.yaml")
    g = params.generate
    exp = Experiment(params, dataclasses.replace(Files.of(), cache=None))  # no LLM call cache: every call is made
    kg = exp.kg
    qs = {q.question_id: q for q in questions_from_table(read_tables(exp.files.db, ("questions",))["questions"])}
    retrieved = [r for r in io.read_parquet(io.RETRIEVE / "retrieved.parquet").to_pylist() if r[S.QUESTION_ID] in qs]
    rng = np.random.default_rng(args.seed)
    pick = sorted(rng.choice(len(retrieved), size=min(args.questions, len(retrieved)), replace=False).tolist())
    rows = [retrieved[i] for i in pick]
    questions = [qs[r[S.QUESTION_ID]] for r in rows]
    contexts = contexts_for(rows, kg=kg, params=g)
    section = g.model_copy(update={"backend": "llamacpp"})
    overrides = {"n_threads": args.threads} if args.threads else None
    lp = backend_params(section, overrides)
    # not exp.client: that one is shared per process (kgrag.llm.clients.client_for's default) and of the params'
    # backend; this bench times the llamacpp backend on a fresh, unshared client (shared=False), no call cache
    client = client_for(section, cache=None, shared=False, overrides=overrides)
    backend = client.backend
    sampling = sampling_of(params)
    _ = backend.llm  # load the model before timing
    names = [context_entities(c, kg) for c in contexts]
    in_context = [any(normalize(a) in {normalize(n) for n in ns} for a in q.answers) for q, ns in zip(questions, names)]
    result: dict = {
        "machine": machine(), "questions": len(questions), "seed": args.seed, "model": backend.model_id,
        "settings": {"backend": "llamacpp", "context": g.context, "max_context_triples": g.max_context_triples,
                     "max_tokens": g.max_tokens, "temperature": g.temperature, "few_shot": g.few_shot,
                     "n_threads": lp.n_threads, "cache": None},
        "context_entities_mean": float(np.mean([len(n) for n in names])),
        "answer_in_context": float(np.mean(in_context)),
        "note": "Hit@1 = kgrag.evaluation.evaluate.answer_scores on parse_answers(prediction); constrained = the answer "
                "reasoner with ReasonInput.constrain_answer (grammar: context entity names joined by ' | '); "
                "answer_in_context = share of questions with a gold answer among the context's entity names "
                "(the ceiling of the constrained run's Hit@1)",
    }
    for mode, flag in (("unconstrained", False), ("constrained", True)):
        jobs = [answer(inp=ReasonInput(question=q, context=c, kg=kg, sampling=sampling, constrain_answer=flag),
                       params=NoParams()) for q, c in zip(questions, contexts)]
        t0 = time.perf_counter()
        res = run_batched(jobs=jobs, client=client)
        secs = time.perf_counter() - t0
        scores, rl, valid, examples = [], [], [], []
        for q, ns, (r, recs) in zip(questions, names, res):
            pred = parse_answers(r.answer, sampling.separator)
            scores.append(answer_scores(prediction=r.answer, predicted=pred, gold=q.answers))
            rl.append(rouge_l(r.answer, " | ".join(q.answers)))
            valid.append(bool(pred) and all(p in ns for p in pred))
            if len(examples) < 5:
                examples.append({"question": q.text, "gold": list(q.answers), "prediction": r.answer})
        result[mode] = {
            **{k: float(np.mean([s[k] for s in scores])) for k in ("hit_at_1", "hit_any", "f1")},
            "rouge_l": float(np.mean(rl)),
            "answers_all_context_entities": float(np.mean(valid)),
            "failed": sum(1 for _, recs in res if recs and recs[-1].failed),
            "tokens_out_mean": float(np.mean([sum(c.reply.tokens_out for c in recs) for _, recs in res])),
            "seconds": secs,
            "examples": examples,
        }
        print(f"{mode}: hit_at_1={result[mode]['hit_at_1']:.3f} ({secs:.0f} s)", file=sys.stderr)
    result["hit_at_1_unconstrained"] = result["unconstrained"]["hit_at_1"]
    result["hit_at_1_constrained"] = result["constrained"]["hit_at_1"]
    write_result(args.out, result)


if __name__ == "__main__":
    main()
