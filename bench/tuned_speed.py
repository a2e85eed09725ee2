"""Benchmark: questions a minute of ``rank`` with the tuned model against the base model, on the default sample,
same run, no LLM call cache (issue "The LLM earns its place", speed target: the tuned ``rank`` at ≥ 2x).

Runs in a work copy that holds a pipeline run up to a trained ``tune_answer_scorer`` stage
(``data/tune/model.gguf``; by default ``bench/llm_lift.py``'s, ``/tmp/kgrag-lift/main``, refreshed with the current
code first). The questions are the default experiment's own sample (``data/validated/questions.parquet``:
``data.sample`` questions of the MetaQA ``data.hops`` test file). Retrieval runs once (the default params); then the
generate phase runs four times in the order base, tuned, tuned, base (so that a drift of the machine's speed falls
on both models alike), each on a fresh ``Experiment`` without a call cache, so every scoring call is computed. The
weights and the scoring context are loaded before the clock starts (``load_s`` reports that apart).

Per run: seconds of the generate phase, questions a minute, scoring calls, the prompt tokens the engine evaluated
and the ones it found in its KV cache (the fixed head every prompt shares: instruction and, for the base model, the
worked example), candidate count, Hit@1 and the first candidate's Hit@1. ``ratio``: the tuned model's questions a
minute over the base model's (the mean of each model's two runs). ``why``: evaluated prompt tokens a call for each
model, which says how much of the prompt the worked example was (the reused head is not evaluated again).

    python -m bench.tuned_speed                 # reports/bench/tuned_speed.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

ORDER = ("base", "tuned", "tuned", "base")
OVERRIDES = {"base": [], "tuned": ["generate.model=tuned"]}


def summary(runs: list[dict]) -> dict:
    """Each model's questions a minute (the mean of its runs), the tuned over the base model's (``ratio``), and
    the prompt tokens a call each evaluated and found cached (``why``: the means of its runs)."""
    def mean(m: str, key: str) -> float:
        mine = [r[key] for r in runs if r["model"] == m]
        return sum(mine) / len(mine)

    qpm = {m: mean(m, "questions_per_minute") for m in OVERRIDES}
    return {"questions_per_minute": {m: round(v, 1) for m, v in qpm.items()},
            "ratio": round(qpm["tuned"] / qpm["base"], 2),
            "why": {m: {k: round(mean(m, k), 1) for k in ("evaluated_per_call", "reused_per_call")}
                    for m in OVERRIDES}}


def measure(out: str, limit: int = 0) -> None:
    """In the work copy (the current directory): the four timed generate runs; writes ``out``."""
    import pyarrow.parquet as pq

    from bench.common import machine, write_result
    from kgrag import io
    from kgrag import schema as S
    from kgrag.evaluation.evaluate import evaluate_rows
    from kgrag.experiment import Experiment, Files
    from kgrag.kg.store import questions_from_table
    from kgrag.params import load
    from kgrag.reasoning.generate import contexts_for, proposals_for, reason_rows, sampling_of
    from kgrag.retrieval.run import retrieve_with

    if not Path(io.TUNE, "model.gguf").exists():
        raise SystemExit(f"no {io.TUNE}/model.gguf here: run the tune_answer_scorer stage first (bench/llm_lift.py's "
                         "work copy has one), or pass --workdir")
    table = pq.read_table(Path(io.VALIDATED) / "questions.parquet")
    if limit:
        table = table.slice(0, limit)
    qrows = table.to_pylist()
    base = load("params.yaml")
    files = Files(**{**Files.of().__dict__, "cache": None})  # no call cache: every call is computed
    exp0 = Experiment(base, files)
    qs = questions_from_table(table, declared_hops=base.retrieve.oracle_hops)
    retrieved = []
    for s in range(0, len(qs), base.retrieve.shard_size):
        retrieved += retrieve_with(exp0, qs[s: s + base.retrieve.shard_size])
    gen_q = questions_from_table(table)
    # the same facts for both models (their generate sections differ only in the model)
    contexts = contexts_for(retrieved, kg=exp0.kg, params=base.generate)
    proposed = proposals_for(retrieved, kg=exp0.kg)
    runs = []
    for name in ORDER:
        params = load("params.yaml", OVERRIDES[name])
        exp = Experiment(params, files)
        g = params.generate
        client = exp.client
        t0 = time.perf_counter()
        engine = client.backend.engine  # loads the weights and the scoring context: timed apart
        load_s = time.perf_counter() - t0
        ev0, re0 = engine.evaluated, engine.reused
        t0 = time.perf_counter()
        gens = reason_rows(questions=gen_q, contexts=contexts, client=client, reason=params.reason,
                           sampling=sampling_of(params), kg=exp.kg, index=exp.index, proposed=proposed)
        secs = time.perf_counter() - t0
        rows, metrics = evaluate_rows(questions=qrows, retrieved=retrieved, generations=gens,
                                      max_context_triples=g.max_context_triples)
        calls = sum(int(x[S.REQUESTS] or 0) for x in gens)
        n = len(gens)
        cands = [int(json.loads(x[S.TRACE] or "{}").get("candidates") or 0) for x in gens]
        run = {"model": name, "model_id": client.backend.model_id, "questions": n, "seconds": round(secs, 1),
               "load_s": round(load_s, 1), "questions_per_minute": round(60 * n / secs, 1), "calls": calls,
               "prompt_tokens_evaluated": engine.evaluated - ev0, "prompt_tokens_reused": engine.reused - re0,
               "evaluated_per_call": round((engine.evaluated - ev0) / max(calls, 1), 1),
               "reused_per_call": round((engine.reused - re0) / max(calls, 1), 1),
               "candidates_per_question": round(sum(cands) / max(n, 1), 2),
               "hit_at_1": metrics.get("hit_at_1"), "baseline_first": metrics.get("baseline_first"),
               "llm_lift_paired": metrics.get("llm_lift_paired")}
        print(f"[tuned_speed] {json.dumps(run)}", file=sys.stderr, flush=True)
        runs.append(run)
    result = {"machine": machine(), "questions": len(qrows), "order": list(ORDER), "runs": runs, **summary(runs),
              "note": "the default sample (data.sample questions of the data.hops test file), the default retrieval, "
                      "rank with the base and the tuned model, no call cache; the target asks ratio >= 2"}
    write_result(out, result)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workdir", default="/tmp/kgrag-lift/main",
                    help="work copy with a trained tune_answer_scorer stage (bench/llm_lift.py makes one)")
    ap.add_argument("--out", default=str(ROOT / "reports" / "bench" / "tuned_speed.json"))
    ap.add_argument("--here", action="store_true", help="measure in the current directory (no work copy)")
    ap.add_argument("--questions", type=int, default=0, help="the first N questions only (a smoke run); 0 = all")
    args = ap.parse_args()
    if args.here:
        measure(str(Path(args.out).resolve()), args.questions)
        return
    from bench.full_split import env, workcopy

    work = workcopy(Path(args.workdir))
    subprocess.run([sys.executable, "-m", "bench.tuned_speed", "--here", "--out", str(Path(args.out).resolve()),
                    "--questions", str(args.questions)], cwd=work, env=env(), check=True)


if __name__ == "__main__":
    main()
