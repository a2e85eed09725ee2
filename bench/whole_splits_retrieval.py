"""Benchmark: the default retriever on MetaQA's whole test splits, without the LLM.

The LLM's paired lift over the first candidate on the whole splits was -0.0005 (1-hop), -0.0013 (2-hop) and +0.005
(3-hop) (``reports/bench/full_split.json``): Hit@1 on MetaQA is a retrieval figure. After a change of the relation-path
planner, this bench checks that figure on every test question in minutes instead of hours: the pipeline run's KG,
index and plan (``dvc repro relplan``), every question of each k-hop test file (topics from the brackets, as the
full-split runs), the default ``relpath`` retriever, and the Hit@1 of the first candidate ``rank`` would score (the
first end of the chosen sequence) with its seeded bootstrap interval, and the retrieval recall. Writes
``reports/bench/whole_splits_retrieval.json``.

    python -m bench.whole_splits_retrieval            # about 25 minutes on 2 cores
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from bench.common import machine, write_result
from bench.generalize import question_rows

from kgrag import schema as S
from kgrag.evaluation.metrics import bootstrap_ci
from kgrag.experiment import Experiment, Files
from kgrag.kg.store import questions_from_table
from kgrag.params import load
from kgrag.retrieval.run import retrieve_with


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hops", nargs="+", type=int, default=[1, 2, 3])
    ap.add_argument("--limit", type=int, default=100_000, help="questions per split at most (all by default)")
    ap.add_argument("--out", default="reports/bench/whole_splits_retrieval.json")
    args = ap.parse_args()
    params = load("params.yaml")
    exp = Experiment(params, Files.of())
    plan = json.loads(Path(params.retrieve.module_params().plan, "plan.json").read_text())
    result = {"machine": machine(), "plan": {k: plan.get(k) for k in ("source", "labelled", "note")}, "splits": {},
              "note": "every question of each MetaQA k-hop test file, topics from the brackets; first_end_hit_at_1: "
                      "the first candidate rank would score (no LLM); the LLM's paired lift on these splits was "
                      "-0.0005 / -0.0013 / +0.005 (full_split.json)"}
    for k in args.hops:
        rows = question_rows(params=params, split="test", per_hop=args.limit, seed=0, kg=exp.kg, hops=(k,))
        table = pa.Table.from_pylist([{c: r.get(c) for c in S.QUESTIONS.names} for r in rows], schema=S.QUESTIONS)
        qs = questions_from_table(table)
        t0 = time.perf_counter()
        hit, rec = [], []
        for s in range(0, len(qs), 500):
            part = qs[s:s + 500]
            for q, r in zip(part, retrieve_with(exp, part)):
                ends = json.loads(r[S.TRACE] or "{}").get("ends") or []
                gold = set(q.answer_ids)
                hit.append(float(bool(ends) and ends[0] in gold))
                rec.append(len(gold & set(r[S.NODE_IDS])) / len(gold) if gold else 0.0)
            print(f"[whole_splits] {k}-hop {min(s + 500, len(qs))}/{len(qs)}", file=sys.stderr, flush=True)
        secs = time.perf_counter() - t0
        result["splits"][str(k)] = {"questions": len(qs), "first_end_hit_at_1": round(float(np.mean(hit)), 4),
                                    "first_end_hit_at_1_ci95": bootstrap_ci(hit), "retrieval_recall":
                                    round(float(np.mean(rec)), 4), "ms_per_question": round(secs * 1000 / len(qs), 1)}
        print(f"[whole_splits] {k}-hop: {result['splits'][str(k)]}", file=sys.stderr, flush=True)
        write_result(args.out, dict(result))


if __name__ == "__main__":
    main()
