"""Benchmark: the default DAG's stages, one child process each, on SYNTHETIC KGs of growing size (issue 55), with
MetaQA's retrieve stage timed alternately in the same run, and each stage's growth exponent between sizes.

For each size, ``kgrag.kg.synth`` writes the KG and ``--questions`` questions once (``--work``, kept between runs;
bench/scale.py's shape, via bench/ingest_scale.py). A project folder holds this checkout's ``params.yaml`` with
``data`` set to the ``triples`` loader on that KG (every question; default params otherwise: ``store: auto``, the
lazy index, ``relplan.source: auto``, relpath with ``hub_budget``, ``rank`` on the embedded SmolLM2). Each stage of
``--stages`` then runs as ``python -m stages.<stage>`` in it (PYTHONPATH = this checkout), as DVC would run it:
``seconds`` (the child's wall) and ``peak_rss_gib`` (its VmHWM). Every size starts with an empty vector cache of
its own and no LLM call cache (a new KG's first run: the answer type's entity names are encoded as they are met).

MetaQA's default project (200 questions) is built once at the start, untimed; before each size's retrieve its
retrieve stage runs again with its shard cache cleared, so the two are timed under the same load, and
``retrieve_ratio`` is the size's per-question p50 over MetaQA's (issue 55's target: <= 3). Per-question times come
from each project's ``data/timings/retrieve/questions.parquet``; answer recall of the retrieved nodes and Hit@1 from
its ``reports/metrics.json``; disk from ``du`` of its folders. ``growth`` holds, per stage, the exponent k of
``seconds ~ triples^k`` (and of peak RSS) between each pair of consecutive sizes: k <= 1 is at most linear.
MetaQA's project is built first, so its vector cache is warm when it is timed: ``--warm`` then re-runs only the
retrieve stages (MetaQA's, then the size's, shards cleared), the size's cache now holding what its first run
encoded (``retrieve_warm``, ``retrieve_ratio_warm``: what a second run on the same KG sees).
Writes ``reports/bench/dag_scale.json`` (sizes already in the file are kept unless run again).

    python -m bench.dag_scale --sizes 1M 10M                      # ~30 minutes on 2 cores
    python -m bench.dag_scale --sizes 1M 10M --warm               # then retrieve again, the vector cache warm
    python -m bench.dag_scale --sizes 10M --rerun-retrieve        # retrieve again, cold then warm (an idle re-check)
    python -m bench.dag_scale --sizes 100k --questions 20 --out /tmp/dag_scale.json     # a smoke run, ~3 minutes
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import yaml

from bench.common import write_result
from bench.ingest_scale import synth
from bench.scale import PEAK_WRAPPER, load, run_child, triples_of

ROOT = Path(__file__).resolve().parents[1]

STAGES = ("ingest", "validate", "index", "relplan", "retrieve", "generate", "evaluate", "report")
METAQA = (ROOT.parent / "shared" / "data" / "metaqa").resolve()


def project(folder: Path, data: dict) -> Path:
    """A project folder whose params.yaml is this checkout's with ``data`` updated (paths absolute)."""
    folder.mkdir(parents=True, exist_ok=True)
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["data"].update(data)
    (folder / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    return folder


def stage(proj: Path, name: str, vectors: Path) -> dict:
    """One stage in a child process (bench/scale.py's ``run_child``, this checkout's code, the vector cache
    ``vectors``): its wall seconds and peak RSS."""
    wall, peak, _ = run_child([sys.executable, "-c", PEAK_WRAPPER, f"stages.{name}"], proj,
                              env={"KGRAG_VECTOR_CACHE": str(vectors)})
    return {"seconds": round(wall, 1), "peak_rss_gib": round(peak, 3)}


def retrieve_ms(proj: Path) -> dict:
    """p50 / p95 / mean of the per-question retrieve times the retrieve stage recorded."""
    import pyarrow.parquet as pq

    ms = np.asarray(pq.read_table(proj / "data" / "timings" / "retrieve" / "questions.parquet")
                    .column("retrieve_ms").to_numpy(), dtype=float)
    return {"questions": int(len(ms)), "ms_p50": round(float(np.percentile(ms, 50)), 1),
            "ms_p95": round(float(np.percentile(ms, 95)), 1), "ms_mean": round(float(ms.mean()), 1)}


def metaqa_retrieve(proj: Path, vectors: Path) -> dict:
    """MetaQA's retrieve stage again, its shard cache cleared: the stage's figures and its per-question times."""
    shutil.rmtree(proj / ".kgrag_cache" / "shards", ignore_errors=True)
    return {**stage(proj, "retrieve", vectors), **retrieve_ms(proj)}


def retrieve_against_metaqa(proj: Path, vectors: Path, mq: Path, mq_vectors: Path) -> dict:
    """MetaQA's retrieve (:func:`metaqa_retrieve`), then the project's with its shards cleared: MetaQA's figures,
    the stage's, its per-question times and ``ratio``, its p50 over MetaQA's."""
    mq_row = metaqa_retrieve(mq, mq_vectors)
    shutil.rmtree(proj / ".kgrag_cache" / "shards", ignore_errors=True)
    stage_row = stage(proj, "retrieve", vectors)
    ms = retrieve_ms(proj)
    return {"metaqa": mq_row, "stage": stage_row, **ms, "ratio": round(ms["ms_p50"] / mq_row["ms_p50"], 2)}


def du_gb(*paths: Path) -> float:
    """Disk used by ``paths`` (``du -sb``), GB."""
    have = [str(p) for p in paths if p.exists()]
    if not have:
        return 0.0
    out = subprocess.run(["du", "-sbc", *have], capture_output=True, text=True).stdout.splitlines()[-1]
    return round(int(out.split()[0]) / 1e9, 3)


def exponent(a: float, b: float, na: int, nb: int) -> float | None:
    """k of ``value ~ triples^k`` between two sizes."""
    return round(math.log(b / a) / math.log(nb / na), 2) if a and b and na != nb else None


def growth(sizes: dict) -> dict:
    """Per stage (and retrieve's p50 a question): the exponents between consecutive sizes, time and peak RSS."""
    rows = sorted(sizes.values(), key=lambda r: r["triples"])
    out: dict = {}
    for a, b in zip(rows, rows[1:]):
        key = f"{a['size']}->{b['size']}"
        for name in STAGES:
            sa, sb = a["stages"].get(name), b["stages"].get(name)
            if sa and sb:
                out.setdefault(name, {})[key] = {
                    "seconds": exponent(sa["seconds"], sb["seconds"], a["triples"], b["triples"]),
                    "peak_rss": exponent(sa["peak_rss_gib"], sb["peak_rss_gib"], a["triples"], b["triples"])}
        if a.get("retrieve") and b.get("retrieve"):
            out.setdefault("retrieve_ms_p50", {})[key] = exponent(a["retrieve"]["ms_p50"], b["retrieve"]["ms_p50"],
                                                                  a["triples"], b["triples"])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", nargs="+", default=["1M", "10M"], help="KG sizes (100k, 1M, 10M, 100M)")
    ap.add_argument("--questions", type=int, default=200, help="synth questions written with the KG, all asked")
    ap.add_argument("--stages", nargs="+", default=list(STAGES), choices=STAGES, help="stages run, in DAG order")
    ap.add_argument("--work", default="/tmp/kgrag-dag-scale", help="where the KGs and the projects are kept")
    ap.add_argument("--out", default=str(ROOT / "reports" / "bench" / "dag_scale.json"))
    ap.add_argument("--warm", action="store_true",
                    help="only retrieve again in each size's kept project, its vector cache now warm (shards cleared), "
                         "with MetaQA's just before: retrieve_warm and retrieve_ratio_warm, added to the size's row")
    ap.add_argument("--rerun-retrieve", action="store_true",
                    help="only retrieve again in each size's kept project, twice: with an emptied vector cache (cold), "
                         "then warm, MetaQA's before each: retrieve_rerun in the size's row (an idle re-check)")
    args = ap.parse_args()
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)  # the stages' children write their bytecode, as `make` lets them
    work = Path(args.work)
    out = Path(args.out)
    old = json.loads(out.read_text()) if out.exists() else {}
    result = {**old, "note": "SYNTHETIC KGs (kgrag.kg.synth, bench/scale.py's shape) through the default DAG's "
                             "stages, each a child process (seconds = wall, peak_rss_gib = VmHWM); cold vector and LLM "
                             "call caches; retrieve_ratio = the size's per-question retrieve p50 over MetaQA's default "
                             "project's, timed just before it",
              "sizes": old.get("sizes", {}), "stages": list(args.stages)}
    for size in args.sizes if args.warm or args.rerun_retrieve else ():  # before anything is built
        if size not in result["sizes"] or not (work / size / "project" / "params.yaml").exists():
            flag = "--warm" if args.warm else "--rerun-retrieve"
            raise SystemExit(f"dag_scale {flag}: no {size} run in {out} and {work / size / 'project'}; run without "
                             f"{flag} first")
    mq = work / "metaqa"
    mq_vectors = work / "metaqa-vectors"
    if not (mq / "data" / "retrieve" / "retrieved.parquet").exists():
        project(mq, {"path": str(METAQA), "input": str(METAQA)})
        for name in ("ingest", "validate", "index", "relplan", "retrieve"):
            stage(mq, name, mq_vectors)
        print("[dag_scale] MetaQA's project built", file=sys.stderr, flush=True)
    if args.rerun_retrieve:
        for size in args.sizes:
            row, proj, vectors = result["sizes"][size], work / size / "project", work / size / "vectors"
            rerun: dict = {"load_before": load()}
            for kind in ("cold", "warm"):
                if kind == "cold":
                    shutil.rmtree(vectors, ignore_errors=True)
                rerun[kind] = retrieve_against_metaqa(proj, vectors, mq, mq_vectors)
                print(f"[dag_scale] {size} retrieve again, {kind}: {rerun[kind]}", file=sys.stderr, flush=True)
            rerun["load_after"] = load()
            row["retrieve_rerun"] = rerun
        write_result(str(out), result)
        return
    if args.warm:
        for size in args.sizes:
            row, proj = result["sizes"][size], work / size / "project"
            got = retrieve_against_metaqa(proj, work / size / "vectors", mq, mq_vectors)
            row["metaqa_retrieve_warm"] = got.pop("metaqa")
            row["stages_warm"] = {"retrieve": got.pop("stage")}
            row["retrieve_ratio_warm"] = got.pop("ratio")
            row["retrieve_warm"] = got
            print(f"[dag_scale] {size} retrieve, warm: {row['retrieve_warm']}", file=sys.stderr, flush=True)
        result["growth_warm_retrieve_ms_p50"] = growth(
            {k: {**r, "retrieve": r["retrieve_warm"], "stages": {}} for k, r in result["sizes"].items()
             if "retrieve_warm" in r}).get("retrieve_ms_p50", {})
        write_result(str(out), result)
        return
    for size in args.sizes:
        n = triples_of(size)
        m = synth(work, size, args.questions)
        kg = work / size / "synth"
        proj = work / size / "project"
        shutil.rmtree(proj, ignore_errors=True)
        vectors = work / size / "vectors"
        shutil.rmtree(vectors, ignore_errors=True)
        project(proj, {"dataset": "triples", "sample": 0, "seed": 0, "input": str(kg),
                       "triples": {"path": str(kg / "triples.tsv"), "questions": str(kg / "questions.jsonl")}})
        row: dict = {"size": size, "triples": n, "entities": m["entities"], "synth_s": m["synth_s"],
                     "input_gb": du_gb(kg / "triples.tsv"), "load_before": load(), "stages": {}}
        for name in args.stages:
            if name == "retrieve":
                row["metaqa_retrieve"] = metaqa_retrieve(mq, mq_vectors)
            row["stages"][name] = stage(proj, name, vectors)
            print(f"[dag_scale] {size} {name}: {row['stages'][name]}", file=sys.stderr, flush=True)
            if name == "retrieve":
                row["retrieve"] = retrieve_ms(proj)
                row["retrieve_ratio"] = round(row["retrieve"]["ms_p50"] / row["metaqa_retrieve"]["ms_p50"], 2)
        metrics = proj / "reports" / "metrics.json"
        if metrics.exists():
            mj = json.loads(metrics.read_text())
            row["metrics"] = {k: mj.get(k) for k in ("questions", "hit_at_1", "baseline_first", "baseline_random",
                                                   "retrieval_recall", "failed")}
        row["disk_gb"] = {"data": du_gb(proj / "data"), "kgrag_cache": du_gb(proj / ".kgrag_cache"),
                          "vector_cache": du_gb(vectors), "input": row["input_gb"]}
        row["load_after"] = load()
        row["dag_seconds"] = round(sum(s["seconds"] for s in row["stages"].values()), 1)
        row["dag_peak_rss_gib"] = max(s["peak_rss_gib"] for s in row["stages"].values())
        result["sizes"][size] = row
        result["growth"] = growth(result["sizes"])
        write_result(str(out), result)


if __name__ == "__main__":
    main()
