"""Benchmark: the ingest stage's time and peak memory on SYNTHETIC KGs (issue 55), against a reference checkout in
the same run.

For each size, ``kgrag.kg.synth`` writes the KG and its questions once (``--work``, kept between runs; not timed
as ingest, its own seconds recorded as ``synth_s``). Then the real ingest stage (``python -m stages.ingest``,
``triples`` loader, engine ``auto`` = vectorized: loader + Parquet + DuckDB) runs in a child process on it, with
this checkout's code and, with ``--reference DIR``, with another checkout's (``git worktree add DIR <commit>``),
alternately ``--repeat`` times: ``seconds`` (wall, the child process), ``peak_rss_gib`` (the child's VmHWM) and the
stage's own ``ingest_s``. The reference's commit is recorded. Writes ``reports/bench/ingest_scale.json``.

    python -m bench.ingest_scale --sizes 1M 10M --reference /tmp/ref    # ~3 minutes, with a 10M file of 0.6 GB
    python -m bench.ingest_scale --sizes 1M 10M 100M --reference /tmp/ref   # 100M: ~15 minutes, 6.3 GB of disk
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

from bench.common import write_result
from bench.scale import PEAK_WRAPPER, SYNTH, _peak_from, triples_of

ROOT = Path(__file__).resolve().parents[1]


def synth(work: Path, size: str, questions: int) -> dict:
    """The size's synthetic KG (written once into ``work``): its manifest and the seconds it took."""
    out = work / size / "synth"
    done = out / "manifest.json"
    if done.exists():
        return {**json.loads(done.read_text()), "synth_s": None}
    from kgrag.kg.synth import write_synth

    t0 = time.perf_counter()
    m = write_synth(out=out, n_triples=triples_of(size), questions=questions, **SYNTH)
    return {**m, "synth_s": round(time.perf_counter() - t0, 1)}


def ingest(code: Path, work: Path, size: str) -> dict:
    """The ingest stage with ``code`` (a checkout) on the size's KG, in a child process of its own folder."""
    proj = work / size / f"proj-{abs(hash(str(code))) % 10**8}"
    proj.mkdir(parents=True, exist_ok=True)
    params = yaml.safe_load((code / "params.yaml").read_text())
    kg = work / size / "synth"
    params["data"] = {"dataset": "triples", "sample": 0, "seed": 0,
                      "triples": {"path": str(kg / "triples.tsv"), "questions": str(kg / "questions.jsonl")}}
    (proj / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    env = {**os.environ, "PYTHONPATH": str(code)}
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", PEAK_WRAPPER, "stages.ingest"], cwd=proj, env=env,
                       capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise RuntimeError(f"ingest with {code} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    timing = json.loads((proj / "data" / "timings" / "ingest" / "timing.json").read_text())
    return {"seconds": round(wall, 2), "ingest_s": round(timing["seconds"], 2),
            "peak_rss_gib": round(_peak_from(p.stderr), 3), "triples": timing["triples"],
            "entities": timing["entities"], "quarantined": timing["quarantined"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", nargs="+", default=["1M", "10M"], help="KG sizes (1M, 10M, 100M; 200k for a smoke run)")
    ap.add_argument("--questions", type=int, default=100, help="synth questions written with the KG")
    ap.add_argument("--reference", default=None, help="another checkout's folder, ingested alternately with this one")
    ap.add_argument("--reference-max", default="10M",
                    help="largest size the reference runs at (the whole-file loader needs about 0.4 GB a 1M triples)")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each checkout a size (alternating)")
    ap.add_argument("--work", default="/tmp/kgrag-ingest-scale", help="where the synthetic KGs are kept")
    ap.add_argument("--out", default=str(ROOT / "reports" / "bench" / "ingest_scale.json"))
    args = ap.parse_args()
    work = Path(args.work)
    codes = {"this": ROOT} | ({"reference": Path(args.reference).resolve()} if args.reference else {})
    result: dict = {"note": "SYNTHETIC KGs (kgrag.kg.synth, bench/scale.py's shape); the ingest stage in a child "
                            "process: seconds = its wall time, peak_rss_gib = its VmHWM, ingest_s = the stage's own "
                            "timing (loader + Parquet + DuckDB)", "sizes": {}}
    if args.reference:
        ref = subprocess.run(["git", "-C", str(codes["reference"]), "rev-parse", "HEAD"], capture_output=True,
                             text=True)
        result["reference"] = {"folder": str(codes["reference"]), "commit": ref.stdout.strip() or None}
    for size in args.sizes:
        m = synth(work, size, args.questions)
        row: dict = {"triples": m["triples"], "entities": m["entities"], "synth_s": m["synth_s"],
                     "file_gb": round((work / size / "synth" / "triples.tsv").stat().st_size / 1e9, 2)}
        for _ in range(args.repeat):
            for name, code in codes.items():
                if name == "reference" and triples_of(size) > triples_of(args.reference_max):
                    continue
                row.setdefault(name, []).append(ingest(code, work, size))
                print(f"[ingest_scale] {size} {name}: {row[name][-1]}", file=sys.stderr, flush=True)
        for name in [c for c in codes if c in row]:
            runs = row[name]
            row[f"{name}_best"] = {"seconds": min(r["seconds"] for r in runs),
                                   "peak_rss_gib": max(r["peak_rss_gib"] for r in runs)}
        result["sizes"][size] = row
        write_result(args.out, result)


if __name__ == "__main__":
    main()
