"""Benchmark: the memory ``KGStore`` (the in-memory store) takes, against ``kgrag.kg.store.memory_estimate``
(``MEMORY_BYTES_PER_TRIPLE`` x triples + ``MEMORY_BYTES_PER_ENTITY`` x entities), the estimate ``retrieve.store:
auto`` compares with the memory budget.

Each KG is written to a DuckDB file, then opened in a fresh process, measured with tracemalloc (every numpy array
and Python object allocated): ``retained`` after ``KGStore(path)``, ``with_lookups`` after the name look-ups
(``ids_of``'s dict and ``find_entities``' linking keys, built on first use), ``peak`` over both; and the process's
resident memory grown meanwhile (``rss_delta``, which also holds allocator slack). KGs: the real MetaQA KB
(``--metaqa``, its loader's tables) and SYNTHETIC KGs (``kgrag.kg.synth``) of two shapes, few entities per triple
and many. Writes ``reports/bench/store_memory.json``.

    python -m bench.store_memory                       # MetaQA + synth 400k x 0.05 and 200k x 0.6 (~1 minute)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.common import write_result

ROOT = Path(__file__).resolve().parents[1]

MEASURE = """
import gc, json, sys, tracemalloc
import psutil
from kgrag.kg.store import KGStore
proc = psutil.Process()
gc.collect()
rss0 = proc.memory_info().rss
tracemalloc.start()
kg = KGStore(sys.argv[1])
gc.collect()
retained = tracemalloc.get_traced_memory()[0]
rss1 = proc.memory_info().rss
kg.ids_of(["x"])
kg.names_lookup(["x"])
with_lookups, peak = tracemalloc.get_traced_memory()
print(json.dumps({"retained": retained, "with_lookups": with_lookups, "peak": peak, "rss_delta": rss1 - rss0}))
"""


def write_kg(name: str, out: Path, metaqa: str) -> Path:
    """Write KG ``name`` (``metaqa`` or ``synth-<triples>-<entities per triple>``) to ``out/<name>.duckdb``."""
    from kgrag.kg.duckdb_io import write_duckdb

    db = out / f"{name}.duckdb"
    if name == "metaqa":
        from kgrag.kg.loaders.metaqa import load_metaqa

        t = load_metaqa(path=metaqa, hops=2, split="test", sample=5, seed=0)
        tables = {"entities": t.entities, "relations": t.relations, "triples": t.triples, "questions": t.questions}
    else:
        from kgrag.kg.synth import generate_kg

        _, n, epe = name.split("-")
        kg = generate_kg(n_triples=int(n), entities_per_triple=float(epe), n_relations=20, n_types=5, skew=1.0,
                         relation_skew=1.0, seed=1)
        tables = kg.tables()
    write_duckdb(db, tables)
    return db


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--metaqa", default=str(ROOT.parent / "shared" / "data" / "metaqa"), help="MetaQA folder")
    ap.add_argument("--kgs", nargs="+", default=["metaqa", "synth-400000-0.05", "synth-200000-0.6"])
    ap.add_argument("--out", default=str(ROOT / "reports" / "bench" / "store_memory.json"))
    args = ap.parse_args()
    from kgrag.kg.store import MEMORY_BYTES_PER_ENTITY, MEMORY_BYTES_PER_TRIPLE, kg_counts, memory_estimate

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.kgs:
            db = write_kg(name, Path(tmp), args.metaqa)
            triples, entities = kg_counts(db)
            got = json.loads(subprocess.run([sys.executable, "-c", MEASURE, str(db)], check=True, text=True,
                                            capture_output=True, env={"PYTHONPATH": str(ROOT), "PATH": ""}).stdout)
            est = memory_estimate(triples, entities)
            rows.append({"kg": name, "triples": triples, "entities": entities, **got, "estimate": est,
                         "estimate_over_peak": round(est / got["peak"], 3),
                         "peak_bytes_per_triple": round(got["peak"] / triples, 1)})
            print(json.dumps(rows[-1]))
    write_result(args.out, {"bytes_per_triple": MEMORY_BYTES_PER_TRIPLE, "bytes_per_entity": MEMORY_BYTES_PER_ENTITY,
                            "rows": rows, "command": "python -m bench.store_memory"})


if __name__ == "__main__":
    main()
