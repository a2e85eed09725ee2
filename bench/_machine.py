"""What every benchmark records about the machine and its load, and the warning when it was busy.

Timings taken while other processes compete for the cores overstate or understate speed-up ratios (a
busy machine slows a memory-bound whole-graph reference far more than a local method). Each bench calls
``start()`` first (via ``bench.common``: it runs on import) and ``finish(result)`` before writing: the JSON
gets ``machine`` (CPU, cores, Python, platform), ``load`` (1-, 5-, 15-minute load averages before and
after) and ``load_warning`` (a sentence, or null) when the 1-minute load average exceeded ``LOAD_LIMIT``
at either end. The warning is also printed to stderr.
"""

from __future__ import annotations

import os
import sys
import time

from kgrag.versioning import machine

LOAD_LIMIT = 1.0
_BEFORE: dict | None = None


def load_average() -> list[float]:
    """The 1-, 5- and 15-minute load averages (``os.getloadavg``); [] where the OS has none."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (OSError, AttributeError):
        return []


def start() -> dict:
    """Record the load before the run (once) and warn now if the machine is busy."""
    global _BEFORE
    if _BEFORE is None:
        _BEFORE = {"load": load_average(), "time": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        la = _BEFORE["load"]
        if la and la[0] > LOAD_LIMIT:
            print(f"WARNING: load average {la[0]} > {LOAD_LIMIT} before the benchmark: timings are not idle "
                  "figures", file=sys.stderr)
    return _BEFORE


def finish(result: dict) -> dict:
    """``result`` with ``machine``, ``load`` (before/after) and ``load_warning`` set; prints the warning."""
    before = start()
    after = load_average()
    worst = max([x[0] for x in (before["load"], after) if x] or [0.0])
    warning = None
    if worst > LOAD_LIMIT:
        warning = (f"load average {worst} > {LOAD_LIMIT} (before {before['load'][:1]}, after {after[:1]}): "
                   "timings measured under load; re-run on an idle machine before comparing them")
        print(f"WARNING: {warning}", file=sys.stderr)
    m = result.get("machine") or machine()
    return {**result, "machine": m, "load": {"before": before["load"], "after": after, "started": before["time"],
                                             "limit": LOAD_LIMIT}, "load_warning": warning}
