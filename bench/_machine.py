"""What every benchmark records about the machine and its load, and the warning when it was busy.

Timings taken while other processes compete for the cores overstate or understate speed-up ratios (a
busy machine slows a memory-bound whole-graph reference far more than a local method). Each bench calls
``start()`` first (via ``bench.common``: it runs on import) and ``finish(result)`` before writing: the JSON
gets ``machine`` (CPU, cores, Python, platform), ``load`` (1-, 5-, 15-minute load averages before and
after; ``others_cores``: the cores other processes kept busy on average while the bench ran) and
``load_warning`` (a sentence, or null) when the 1-minute load average before the run exceeded ``LOAD_LIMIT``
or other processes used more than ``OTHERS_LIMIT`` cores during it. The load average *after* includes the
bench's own threads (a 2-thread llama.cpp bench leaves it near 2 on an otherwise idle machine), so it is
recorded but not what the warning reads; ``others_cores`` is: busy CPU time of the whole machine
(``/proc/stat``) minus this process's own (``os.times``, children included), over the wall time.
The warning is also printed to stderr. ``run`` says what made the numbers: the commit (and whether tracked
files differed from it), the command line, and the sha256 of params.yaml (the default experiment's params, which
most benches start from).
"""

from __future__ import annotations

import hashlib
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

from kgrag.code.versioning import machine

LOAD_LIMIT = 1.0
OTHERS_LIMIT = 0.5
_BEFORE: dict | None = None


def busy_seconds() -> float | None:
    """CPU seconds the whole machine spent busy since boot (``/proc/stat``: all but idle and iowait);
    None where there is no ``/proc/stat``."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def own_seconds() -> float:
    """CPU seconds of this process, its threads and its waited-for children."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


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
        _BEFORE = {"load": load_average(), "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                   "busy": busy_seconds(), "own": own_seconds(), "wall": time.monotonic()}
        la = _BEFORE["load"]
        if la and la[0] > LOAD_LIMIT:
            print(f"WARNING: load average {la[0]} > {LOAD_LIMIT} before the benchmark: timings are not idle "
                  "figures", file=sys.stderr)
    return _BEFORE


ROOT = Path(__file__).resolve().parents[1]


def provenance(root: Path = ROOT) -> dict:
    """What made a result: ``commit`` (None outside a git work tree), ``dirty`` (tracked files outside ``reports/``
    changed since it),
    ``command`` (this process's command line, as typed from the repository root) and ``params_sha256``
    (params.yaml's, None when absent)."""
    def git(*args: str) -> str | None:
        try:
            p = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return p.stdout.strip() if p.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    # results under reports/ are outputs, not what made them (a bench chain writes one before the next starts)
    dirty = None if commit is None else bool(git("status", "--porcelain", "--untracked-files=no", "--", ".",
                                                 ":(exclude)reports"))
    params = root / "params.yaml"
    return {"commit": commit, "dirty": dirty, "command": command_line(sys.argv, root),
            "params_sha256": hashlib.sha256(params.read_bytes()).hexdigest() if params.is_file() else None}


def command_line(argv: list[str], root: Path = ROOT) -> str:
    """This process's command line as typed from the repository root. A bench runs as a module (``python -m
    bench.x``), and Python then sets ``argv[0]`` to the module's file: a file of the ``bench`` package is written back
    as ``python -m bench.x``; any other script as ``python PATH``, relative to ``root`` where it lies inside. Each
    argument is shell-quoted where it needs it (``shlex.join``: a value with spaces or ``;`` stays one argument), so
    ``shlex.split`` of the line gives the argv back and the line can be pasted into a shell (stamps written before
    2026-12-06 joined with bare spaces; the committed ones were re-quoted then)."""
    argv = list(argv)
    if argv and os.path.isabs(argv[0]):
        try:
            argv[0] = os.path.relpath(argv[0], root)
        except ValueError:
            pass
    script = Path(argv[0]) if argv else None
    if script is not None and script.suffix == ".py" and script.parts[:1] == ("bench",) and ".." not in script.parts:
        module = ".".join(script.with_suffix("").parts).removesuffix(".__main__")
        return shlex.join(["python", "-m", module, *argv[1:]])
    return shlex.join(["python", *argv])


def made_by() -> dict:
    """A row's stamp in a bench file that merges rows of several runs: the commit, whether tracked files
    differed from it, and the command line."""
    return {k: v for k, v in provenance().items() if k in ("commit", "dirty", "command")}


def finish(result: dict) -> dict:
    """``result`` with ``machine``, ``load`` (before/after) and ``load_warning`` set; prints the warning."""
    before = start()
    after = load_average()
    busy, wall = busy_seconds(), time.monotonic() - before["wall"]
    others = None
    if busy is not None and before["busy"] is not None and wall > 0:
        others = round(max(0.0, (busy - before["busy"]) - (own_seconds() - before["own"])) / wall, 2)
    reasons = []
    if before["load"] and before["load"][0] > LOAD_LIMIT:
        reasons.append(f"load average {before['load'][0]} > {LOAD_LIMIT} before the run")
    if others is not None and others > OTHERS_LIMIT:
        reasons.append(f"other processes kept {others} cores busy during it (> {OTHERS_LIMIT})")
    warning = None
    if reasons:
        warning = ("; ".join(reasons) + ": timings measured under load; re-run on an idle machine before "
                   "comparing them")
        print(f"WARNING: {warning}", file=sys.stderr)
    m = result.get("machine") or machine()
    run, earlier = provenance(), list(result.get("earlier_runs") or [])
    prev = result.get("run")  # a merged file's stamp (benches that re-run some rows keep the others)
    if prev and (prev.get("commit"), prev.get("command")) != (run["commit"], run["command"]) and prev not in earlier:
        earlier.append(prev)  # what made the rows this run kept: the file names every run that wrote into it
    if earlier:
        result = {**result, "earlier_runs": earlier}
    return {**result, "machine": m, "run": run, "load": {"before": before["load"], "after": after, "started": before["time"],
                                             "limit": LOAD_LIMIT, "others_cores": others,
                                             "others_limit": OTHERS_LIMIT}, "load_warning": warning}
