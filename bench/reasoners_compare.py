"""Every reasoning module on the same MetaQA questions with the embedded LLM: Hit@1, Hit, F1, average depth,
reasoner LLM calls and tokens per question, seconds per question; FastToG at several maximum community sizes M
(the paper's Figure 3 on our data). Reads the default pipeline's outputs (data/validated, data/index,
data/retrieve: run `dvc repro retrieve` first), writes ``reports/bench/reasoners_compare_sample.json`` after each
configuration, so an interrupted run keeps what it finished (and the LLM call cache keeps its calls).
"""

from __future__ import annotations

import argparse
import sys
import time

from bench.common import machine, write_result

from kgrag import io, schema as S
from kgrag.kg.duckdb_io import read_tables
from kgrag.evaluation.evaluate import answer_scores, summarize
from kgrag.llm.clients import backend_params
from kgrag.experiment import Experiment, Files
from kgrag.params import load
from kgrag.reasoning.generate import contexts_for, reason_rows, sampling_of
from kgrag.kg.store import questions_from_table

CONFIGS = [
    ("answer", {}), ("io", {}), ("cot", {}), ("cot-sc", {"samples": 3}),
    ("tog", {"width": 2, "depth": 2}), ("agent", {"max_steps": 4}),
    *[("fasttog", {"width": 2, "d_max": 2, "max_size": m}) for m in (1, 2, 4, 8)],
    ("explore", {"max_steps": 2, "depth": 1}),  # last: the costliest (about 7 calls with long prompts / question)
]


def main() -> None:
    """Run the comparison."""
    import pyarrow as pa

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--questions", type=int, default=5, help="first N questions of the experiment's sample")
    ap.add_argument("--questions-for", action="append", default=[], metavar="REASONER=N",
                    help="fewer questions (the first N of the same sample) for one reasoner, e.g. explore=20")
    ap.add_argument("--backend-param", action="append", default=[], metavar="KEY=VALUE",
                    help="override a param of the selected backend, e.g. n_threads=1 on a machine other jobs load "
                         "(llama.cpp's threads spin-wait: under oversubscription 2 threads run far slower than 1)")
    ap.add_argument("--out", default="reports/bench/reasoners_compare_sample.json")
    args = ap.parse_args()
    params = load("params.yaml", [])
    g = params.generate
    base = g.module_params()
    overrides = {k: type(getattr(base, k))(v) for k, v in (x.split("=", 1) for x in args.backend_param)}
    # the default pipeline's KG, index and LLM call cache; the client with the --backend-param overrides
    exp = Experiment(params, Files.of(), client_overrides=overrides or None)
    kg, index = exp.kg, exp.index
    qrows = read_tables(exp.files.db, ("questions",))["questions"].to_pylist()[: args.questions]
    questions = questions_from_table(pa.Table.from_pylist(qrows, schema=S.QUESTIONS))
    by_id = {r[S.QUESTION_ID]: r for r in io.read_parquet(io.RETRIEVE / "retrieved.parquet").to_pylist()}
    contexts = contexts_for([by_id[q.question_id] for q in questions], kg=kg, params=g)
    client = exp.client
    used_params = backend_params(g, overrides or None)
    sampling = sampling_of(params)
    result = {"machine": machine(), "questions": len(questions), "backend": client.model_id,
              "backend_params": used_params.model_dump(),
              "retrieval": params.retrieve.method, "rows": []}
    limits = {k: int(v) for k, v in (x.split("=", 1) for x in args.questions_for)}
    for name, over in CONFIGS:
        reason = params.reason.model_validate({"method": name, name: over})  # to reason_rows, not exp's reason
        qs = questions[: limits.get(name, len(questions))]
        t0 = time.perf_counter()
        rows = reason_rows(questions=qs, contexts=contexts[: len(qs)], client=client, reason=reason,
                           sampling=sampling, kg=kg, index=index)
        secs = time.perf_counter() - t0
        scores = [answer_scores(prediction=r[S.PREDICTION], predicted=r[S.PREDICTED_ANSWERS], gold=q.answers)
                  for r, q in zip(rows, qs)]
        row = {"reasoner": name, "params": over, "questions": len(qs),
               # seconds / question count only the calls not served by the call cache of an earlier run
               "answers_from_cache": sum(r[S.CACHED] for r in rows),
               **{k: summarize([s[k] for s in scores]) for k in ("hit_at_1", "hit_any", "f1")},
               "depth_mean": summarize([r[S.DEPTH] for r in rows]),
               "reasoner_calls_per_question": summarize([r[S.REQUESTS] for r in rows]),
               "tokens_per_question": summarize([r[S.TOKENS_IN] + r[S.TOKENS_OUT] for r in rows]),
               "unparseable": sum(r[S.UNPARSEABLE] for r in rows), "failed": sum(r[S.FAILED] for r in rows),
               "seconds_per_question": secs / max(1, len(rows)),
               "example": {"question": questions[0].text, "gold": list(questions[0].answers),
                           "prediction": rows[0][S.PREDICTION][:300]}}
        result["rows"].append(row)
        print(f"[compare] {name} {over}: hit@1 {row['hit_at_1']} depth {row['depth_mean']} "
              f"calls {row['reasoner_calls_per_question']} {row['seconds_per_question']:.1f} s/q", file=sys.stderr)
        write_result(args.out, result)


if __name__ == "__main__":
    main()
