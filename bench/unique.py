"""Benchmark: ``kgrag.arrays.unique`` (sort-based) against ``np.unique`` (hash-based for plain calls since NumPy
2.3) on integer id arrays of the sizes a relation walk meets. Writes ``reports/bench/unique.json`` (the ratio
per size, the same run and process for both).

    python -m bench.unique
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from bench.common import machine, write_result
from kgrag import arrays

ROOT = Path(__file__).resolve().parents[1]


def best_of(f, repeat: int) -> float:
    f()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        f()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()  # no options: --help only
    rng = np.random.default_rng(0)
    sizes = {}
    for n in (1_000, 100_000, 1_000_000):
        x = rng.integers(0, 2_500_000, n)  # ids of a 2.5M-entity KG (the 10M-triple synthetic one)
        assert arrays.unique(x).tolist() == np.unique(x).tolist()
        a = best_of(lambda: np.unique(x), 5)
        b = best_of(lambda: arrays.unique(x), 5)
        sizes[str(n)] = {"np_unique_ms": round(a * 1e3, 3), "arrays_unique_ms": round(b * 1e3, 3),
                         "ratio": round(a / b, 1)}
        print(f"[unique] {n}: {sizes[str(n)]}", file=sys.stderr)
    write_result(str(ROOT / "reports" / "bench" / "unique.json"),
                 {"machine": machine(), "numpy": np.__version__, "sizes": sizes,
                  "note": "best of 5, int64 ids in [0, 2.5M); ratio = np.unique / arrays.unique"})


if __name__ == "__main__":
    main()
