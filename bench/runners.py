"""Where generate's shards run on a small machine: one process against a Dask cluster of worker processes, with
the LLM's prompt threads per process, on the same questions from a cold call cache.

``rank`` (the default reasoner) evaluates each question's prompt on ``generate.llamacpp.n_threads`` threads and
its candidates in per-sequence KV streams on one thread (``kgrag/llm/backends/llamacpp_engine.py``), so in one
process a second core idles while candidates are scored. This bench asks whether two worker processes
(``cluster.task_runner: dask``, ``cluster.dask.n_workers: 2``) use that core. In a work copy of the repository
(``--workdir``, its own caches; ``bench/full_split.py``'s helpers) the default params run ingest → retrieve once on
``--questions`` MetaQA ``--hops``-hop test questions, then generate once per configuration, each from empty shard
and LLM call caches, timed as a whole stage (``/usr/bin/time``: wall seconds; peak RSS is the stage process's,
Dask workers' own memory not included). The answers of every configuration are compared with the first's.

Writes ``reports/bench/runners.json``: per configuration its overrides, generate seconds, questions per minute,
the ratio to the first configuration's rate (same run), and how many answers (and traces, which hold rank's scores) differ from the first's.

    python -m bench.runners                                  # 400 2-hop questions, 4 configurations: ~25 min here
    python -m bench.runners --questions 200 --config local= --config dask2x1='cluster.task_runner=dask generate.llamacpp.n_threads=1'
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from bench.common import write_result
from bench.full_split import clear_caches, run_stage, workcopy

ROOT = Path(__file__).resolve().parents[1]

OUT = ROOT / "reports" / "bench" / "runners.json"
#: name -> overrides: the default (one process, prompts on 2 threads), the same on 1 thread, and a local Dask
#: cluster of 2 worker processes (1 Dask thread each; the LLM's prompt threads as given)
CONFIGS = {
    "local": "",
    "local, n_threads 1": "generate.llamacpp.n_threads=1",
    "dask 2 workers, n_threads 2": "cluster.task_runner=dask",
    "dask 2 workers, n_threads 1": "cluster.task_runner=dask generate.llamacpp.n_threads=1",
}


def answers(work: Path) -> dict[str, tuple[str, str]]:
    """Question id -> (answer, trace) of the work copy's last generate (the trace holds rank's scores)."""
    import pyarrow.parquet as pq

    from kgrag import schema as S

    t = pq.read_table(work / "data" / "generate" / "generations.parquet",
                      columns=[S.QUESTION_ID, S.PREDICTION, S.TRACE])
    return dict(zip(t.column(0).to_pylist(), zip(t.column(1).to_pylist(), t.column(2).to_pylist())))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hops", type=int, default=2, help="MetaQA test file (1, 2 or 3)")
    ap.add_argument("--questions", type=int, default=400, help="questions (data.sample)")
    ap.add_argument("--config", action="append", default=[], metavar="NAME=OVERRIDES",
                    help="a configuration: name, '=', space-separated KEY=VALUE overrides (repeatable; default: "
                         "the four of CONFIGS; the first is the reference)")
    ap.add_argument("--workdir", default="/tmp/kgrag-runners/main", help="work copy of the repository")
    ap.add_argument("--out", default=str(OUT))
    a = ap.parse_args()
    configs = dict(c.split("=", 1) for c in a.config) if a.config else CONFIGS
    work = Path(a.workdir)
    work.mkdir(parents=True, exist_ok=True)
    workcopy(work)
    base = [f"data.hops={a.hops}", f"data.sample={a.questions}"]
    clear_caches(work)
    for stage in ("ingest", "validate", "index", "relplan", "retrieve"):
        run_stage(work, stage, base)
    rows, ref, ref_rate = [], None, None
    for name, sets in configs.items():
        clear_caches(work)  # cold: no shard and no stored call
        t0 = time.strftime("%H:%M:%S")
        got = run_stage(work, "generate", [*base, *sets.split()])
        ans = answers(work)
        rate = round(len(ans) / got["seconds"] * 60, 1)
        if ref is None:
            ref, ref_rate = ans, rate
        row = {"config": name, "overrides": sets.split(), "started": t0, "generate_seconds": got["seconds"],
               "stage_peak_rss_mib": got["peak_rss_mib"], "questions": len(ans), "questions_per_minute": rate,
               "speed_vs_first": round(rate / ref_rate, 3),
               "answers_differing_from_first": sum((ans.get(q) or ("",))[0] != v[0] for q, v in ref.items()),
               "traces_differing_from_first": sum((ans.get(q) or ("", ""))[1] != v[1] for q, v in ref.items())}
        rows.append(row)
        print(f"[bench] {name}: {got['seconds']:.0f} s, {rate} q/min ({row['speed_vs_first']}x), "
              f"{row['answers_differing_from_first']} answers differ", file=sys.stderr, flush=True)
    write_result(a.out, {"hops": a.hops, "questions": a.questions, "configs": rows,
                         "note": "generate only, each configuration from empty shard and call caches; the "
                                 "retrieved contexts are the same file for all; a Dask configuration's seconds "
                                 "include starting its local cluster and loading the models in each worker"})


if __name__ == "__main__":
    main()
