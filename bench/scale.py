"""Benchmark: ingest and per-question retrieval on SYNTHETIC KGs of 1M and 10M triples (issue 5 "scale").

For each size: ``kgrag.kg.synth`` writes the KG and its questions (not timed as ingest); the real ingest stage
(``python -m stages.ingest``, triples loader, default ``engine: auto`` = vectorized) runs in a child process
on them: ``ingest_s`` is the stage's own timing (loader + Parquet + DuckDB), ``ingest_wall_s`` the whole
process (imports included), ``peak_rss_gib`` the child's peak resident memory (``wait4``). Then, in
another child process, the DuckDB-backed store (``DuckKGStore``: one SQL query per hop, names fetched
lazily; its sidecar adjacency is built first, timed as ``duckstore_index_s``) runs the LEGO ``lego-00``
retriever (PPR + shortest paths + random refinement, no entity embeddings) on the synth questions:
``retrieve_median_ms``. The same child measures, in the same run, the same retriever on real MetaQA
(2-hop test questions) with the DuckDB store (the reference of ``retrieve_ratio``) and with the in-memory
``KGStore``. Writes ``reports/bench/scale.json`` with the machine and its load average.

The machine is shared: the load average before and after each step is recorded next to the numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

from bench.common import machine, write_result

ROOT = Path(__file__).resolve().parents[1]

SIZES = ("1M", "10M")


def triples_of(size: str) -> int:
    """``"1M"`` → 1_000_000, ``"200k"`` → 200_000."""
    mult = {"k": 1_000, "M": 1_000_000}[size[-1]]
    return int(float(size[:-1]) * mult)
SYNTH = dict(entities_per_triple=0.25, n_relations=24, n_types=8, skew=1.0, relation_skew=1.0, hops=(1, 2),
             max_answers=20, graph_extra=10, bad_lines=0, seed=0)


def load() -> list[float]:
    """1/5/15-minute load averages."""
    return [round(x, 2) for x in os.getloadavg()]


def run_child(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> tuple[float, float, str]:
    """(wall seconds, peak RSS GiB, stdout) of a child process (``env``: variables set for it); fails loudly when it
    fails."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = p.communicate()
    wall = time.perf_counter() - t0
    # communicate() reaped the child; its rusage is in RUSAGE_CHILDREN only cumulatively, so the child
    # reports its own peak (VmHWM) on stderr as its last line instead
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}):\n{err[-3000:]}")
    peak = _peak_from(err)
    return wall, peak, out


def _peak_from(err: str) -> float:
    for line in reversed(err.splitlines()):
        if line.startswith("PEAK_RSS_KB "):
            return int(line.split()[1]) / 2**20
    raise RuntimeError("child did not report its peak RSS")


PEAK_WRAPPER = (
    "import runpy, sys, atexit\n"
    "def _peak():\n"
    "    for ln in open('/proc/self/status'):\n"
    "        if ln.startswith('VmHWM:'):\n"
    "            print('PEAK_RSS_KB', ln.split()[1], file=sys.stderr, flush=True)\n"
    "atexit.register(_peak)\n"
    "sys.argv = sys.argv[1:]\n"
    "runpy.run_module(sys.argv[0], run_name='__main__')\n"
)


def ingest(size: str, n: int, work: Path, questions: int) -> dict:
    """Generate the synth KG, then run the real ingest stage on it in a child process."""
    from kgrag.kg.synth import write_synth

    proj = work / size
    shutil.rmtree(proj, ignore_errors=True)
    proj.mkdir(parents=True)
    info: dict = {"n_triples": n, "load_before": load()}
    t0 = time.perf_counter()
    m = write_synth(out=proj / "synth", n_triples=n, questions=questions, **SYNTH)
    info["synth_s"] = round(time.perf_counter() - t0, 2)
    info["triples_file_mb"] = round((proj / "synth" / "triples.tsv").stat().st_size / 1e6, 1)
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["data"] = {"dataset": "triples", "sample": 0, "seed": 0,
                      "triples": {"path": str(proj / "synth" / "triples.tsv"),
                                  "questions": str(proj / "synth" / "questions.jsonl")}}
    (proj / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    info["load_ingest_start"] = load()
    wall, peak, _ = run_child([sys.executable, "-c", PEAK_WRAPPER, "stages.ingest"], proj)
    timing = json.loads((proj / "data" / "timings" / "ingest" / "timing.json").read_text())  # run record
    info.update(ingest_s=round(timing["seconds"], 2), ingest_wall_s=round(wall, 2),
                triples_per_s=round(timing["triples"] / timing["seconds"]), peak_rss_gib=round(peak, 3),
                entities=timing["entities"], questions=timing["questions"], quarantined=timing["quarantined"],
                load_after=load(), synth_entities=m["entities"], max_degree=m["degree"]["max"])
    return info


def vm_hwm_kb() -> int:
    """This process's peak resident memory so far (kB)."""
    for ln in open("/proc/self/status"):
        if ln.startswith("VmHWM:"):
            return int(ln.split()[1])
    return 0


def retrieve_child(args: argparse.Namespace) -> None:
    """(child) lego-00 on the synth KG and on MetaQA, with the DuckDB store, then with the in-memory one."""
    from kgrag.kg.duckdb_io import read_tables, write_duckdb
    from kgrag.index.embed import EmbeddingIndex, encode
    from kgrag.kg.loaders.metaqa import load_metaqa
    from kgrag.params import RetrieveParams
    from kgrag.retrieval.run import retrieve_one
    from kgrag.kg.store import KGStore, questions_from_table
    from kgrag.kg.store_duckdb import DuckKGStore

    model = "all-MiniLM-L6-v2"
    params = RetrieveParams(method="lego", hops=2, max_neighbourhood_edges=args.max_edges, store="duckdb",
                            lego={"preset": "lego-00"})

    def index_for(kg) -> EmbeddingIndex:
        rel = [str(x).replace("_", " ") for x in kg.relation_names[np.arange(len(kg.relation_names))]]
        vecs = encode(rel, model=model)
        return EmbeddingIndex(model=model, entity_vectors=np.zeros((0, vecs.shape[1]), np.float32),
                              relation_vectors=vecs)

    def prepared(kg, qs) -> tuple:
        index = index_for(kg)
        vecs = index.encode([q.text for q in qs])
        for q, v in zip(qs[:3], vecs[:3]):  # warm-up (DuckDB caches, numpy paths)
            retrieve_one(question=q, query_vec=v, kg=kg, index=index, params=params)
        return kg, qs, index, vecs, {"ms": [], "edges": [], "recall": []}

    def time_interleaved(*runs: tuple) -> list[dict]:
        """Time each run's questions, alternating between the runs question by question, so that the
        shared machine's load changes touch every run alike."""
        for i in range(max(len(r[1]) for r in runs)):
            for kg, qs, index, vecs, acc in runs:
                if i < len(qs):
                    sub, t = retrieve_one(question=qs[i], query_vec=vecs[i], kg=kg, index=index, params=params)
                    acc["ms"].append(t)
                    acc["edges"].append(sub.neighbourhood_edges)
                    stages = sub.trace.get("stages") or []
                    if stages and stages[-1].get("answer_recall") is not None:
                        acc["recall"].append(stages[-1]["answer_recall"])
        return [{"questions": len(acc["ms"]), "median_ms": round(float(np.median(acc["ms"])), 2),
                 "p90_ms": round(float(np.percentile(acc["ms"], 90)), 2),
                 "mean_ms": round(float(np.mean(acc["ms"])), 2),
                 "median_neighbourhood_edges": float(np.median(acc["edges"])),
                 "answer_recall": round(float(np.mean(acc["recall"])), 3) if acc["recall"] else None, "load": load()}
                for *_, acc in runs]

    out: dict = {}
    db = Path(args.db)
    t0 = time.perf_counter()
    duck = DuckKGStore(db, cache_dir=Path(args.cache))
    out["duckstore_open_s"] = round(time.perf_counter() - t0, 2)  # sidecar adjacency built here
    qs = [q for q in questions_from_table(read_tables(db, ("questions",))["questions"]) if q.topic_ids]
    qs = qs[: args.questions]
    mq: list = []
    if args.metaqa:
        mdb = Path(args.cache) / "metaqa" / "kg.duckdb"
        t = load_metaqa(path=args.metaqa, hops=2, split="test", sample=args.questions, seed=0)
        write_duckdb(mdb, {"entities": t.entities, "relations": t.relations, "triples": t.triples,
                           "questions": t.questions})
        mq = [q for q in questions_from_table(t.questions) if q.topic_ids]
    runs = [prepared(duck, qs)]
    if mq:
        mduck = DuckKGStore(mdb, cache_dir=Path(args.cache))
        runs.append(prepared(mduck, mq))
    res = time_interleaved(*runs)  # synth and MetaQA, both with the DuckDB store
    out["synth"] = res[0]
    if mq:
        out["metaqa_duckdb"] = res[1]
        mduck.close()
    duck.close()
    out["duckdb_peak_rss_gib"] = round(vm_hwm_kb() / 2**20, 3)  # before anything loads a KG into memory
    runs = [prepared(KGStore(mdb), mq)] if mq else []
    if args.synth_memory:  # the same synth questions with the whole synth KG in memory: the store's share
        t0 = time.perf_counter()
        mem = KGStore(db)
        out["memory_load_s"] = round(time.perf_counter() - t0, 2)
        runs.append(prepared(mem, qs))
    res = time_interleaved(*runs) if runs else []
    if mq:
        out["metaqa_memory"] = res.pop(0)
    if args.synth_memory:
        out["synth_memory"] = res.pop(0)
    print(json.dumps(out))


def main() -> None:
    """Run the benchmark."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", nargs="+", default=list(SIZES), help="KG sizes, e.g. 1M 10M (200k for a smoke run)")
    ap.add_argument("--questions", type=int, default=100, help="synth questions generated and timed")
    ap.add_argument("--max-edges", type=int, default=5000, help="retrieve.max_neighbourhood_edges")
    ap.add_argument("--metaqa", default=str(ROOT.parent / "shared" / "data" / "metaqa"))
    ap.add_argument("--work", default=None, help="scratch folder (default: a temp dir, removed afterwards)")
    ap.add_argument("--out", default=str(ROOT / "reports" / "bench" / "scale.json"))
    ap.add_argument("--no-synth-memory", dest="synth_memory", action="store_false",
                    help="skip timing the synth questions with the whole KG in memory (KGStore)")
    ap.add_argument("--retrieve-child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--db", help=argparse.SUPPRESS)
    ap.add_argument("--cache", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.retrieve_child:
        retrieve_child(args)
        return
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="kgrag-scale-"))
    result: dict = {
        "machine": machine(), "synthetic": True, "synth_params": {**SYNTH, "hops": list(SYNTH["hops"])},
        "retriever": {"method": "lego", "preset": "lego-00", "hops": 2, "max_neighbourhood_edges": args.max_edges,
                      "store": "duckdb"},
        "note": "SYNTHETIC KGs (kgrag.kg.synth). ingest_s: the ingest stage's own timing (triples loader, vectorized "
                "engine, + Parquet + DuckDB), in a child process whose peak RSS is peak_rss_gib; "
                "retrieve_median_ms: lego-00 per question on the synth questions with the DuckDB-backed store "
                "(duckstore_open_s: its one-off sidecar adjacency build); metaqa_duckdb_median_ms: the same "
                "retriever and store on 100 real MetaQA 2-hop test questions in the same run, timed alternately "
                "with the synth questions (retrieve_ratio = retrieve_median_ms / it); metaqa_memory_median_ms: "
                "MetaQA with the in-memory KGStore; "
                "retrieve_memory_median_ms: the synth questions with the whole synth KG in a KGStore (loaded in "
                "memory_store_load_s), to separate the store's cost from the larger neighbourhoods "
                "(retrieve.median_neighbourhood_edges vs metaqa.median_neighbourhood_edges); "
                "retrieve_peak_rss_gib: the retrieval process's peak RSS (MiniLM, the sidecar build, the DuckDB "
                "store; before any KG is loaded whole). The "
                "machine is shared: load averages (1, 5, 15 min) recorded around each step.",
    }
    try:
        for size in args.sizes:
            info = ingest(size, triples_of(size), work, args.questions)
            print(f"[scale] {size} ingest: {json.dumps(info)}", file=sys.stderr)
            proj = work / size
            cmd = [sys.executable, "-c", PEAK_WRAPPER, "bench.scale", "--retrieve-child",
                   "--db", str(proj / "data" / "ingest" / "kg.duckdb"), "--cache", str(proj / "cache"),
                   "--questions", str(args.questions), "--max-edges", str(args.max_edges),
                   "--metaqa", args.metaqa if Path(args.metaqa, "kb.txt").exists() else "",
                   *([] if args.synth_memory else ["--no-synth-memory"])]
            _, _, out = run_child(cmd, ROOT)
            r = json.loads(out.strip().splitlines()[-1])
            info.update(retrieve_median_ms=r["synth"]["median_ms"], retrieve=r["synth"],
                        duckstore_open_s=r["duckstore_open_s"], retrieve_peak_rss_gib=r["duckdb_peak_rss_gib"])
            if "synth_memory" in r:
                info.update(retrieve_memory_median_ms=r["synth_memory"]["median_ms"], retrieve_memory=r["synth_memory"],
                            memory_store_load_s=r["memory_load_s"])
            if "metaqa_duckdb" in r:
                ms, mq, mm = r["synth"]["median_ms"], r["metaqa_duckdb"]["median_ms"], r["metaqa_memory"]["median_ms"]
                info.update(metaqa_duckdb_median_ms=mq, metaqa_memory_median_ms=mm,
                            retrieve_ratio=round(ms / mq, 2), retrieve_ratio_vs_memory=round(ms / mm, 2),
                            metaqa=r["metaqa_duckdb"], metaqa_memory=r["metaqa_memory"])
            info["targets"] = {"ingest_s<=120": info["ingest_s"] <= 120, "peak_rss_gib<=8": info["peak_rss_gib"] <= 8,
                               "retrieve_ratio<=3": info.get("retrieve_ratio", float("inf")) <= 3}
            result[size] = info
            print(f"[scale] {size}: {json.dumps({k: v for k, v in info.items() if not isinstance(v, dict)})}",
                  file=sys.stderr)
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    write_result(args.out, result)


if __name__ == "__main__":
    main()
