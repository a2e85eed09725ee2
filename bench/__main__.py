"""The benches' one runner: every committed result (``reports/bench/*.json``) says which command made it (its
``run`` stamp, ``bench/_machine.py``), and this re-makes a result from that command.

    python -m bench                          # every result: its commit, its command (or why it has none)
    python -m bench rerun retrieve scale     # re-run the commands stamped in retrieve.json and scale.json
    python -m bench rerun --group make       # the results `make bench` re-makes (GROUPS below)
    python -m bench rerun --all --dry-run    # what re-making every stamped result would run

The benches are modules of this package, run from the repository root (``python -m bench.retrieve``); a result
stamped when they ran as files (``python bench/retrieve.py ...``) is re-run as a module (:func:`bench_argv`).

A result made before results were stamped (2026-11-29, b83881e) has no command: ``python -m bench`` says so, and
``rerun`` runs the one ``UNSTAMPED`` knows (the old Makefile list) or refuses it with the commit that recorded it
(its message and the docs name the command). A stamped command
whose ``--out`` named another file (a trial written to /tmp, then copied in) is re-run with ``--out`` set to the
committed file, and says so. A file that merges several runs (``earlier_runs``: one size or set each) is re-made by
each of their commands, earliest first. Commands run from the repository root, one after another (two cores: never two timed
runs at once), and the first that fails stops the run with its exit status.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REPORTS = ROOT / "reports" / "bench"

#: named groups of results; ``make bench`` re-makes ``make`` (about an hour on 2 cores)
GROUPS = {
    "make": ["retrieve", "lego", "constrain", "reasoners", "scale", "retrieval_frontier", "inference", "linking",
             "generalize"],
    "scale": ["scale", "dag_scale", "ingest_scale", "relplan_scale", "relpath_hubs", "relpath_hubs_duckdb"],
    "planner": ["planner_dev", "planner_pseudo", "transfer"],
}
#: the command of a result made before results were stamped, where one is known (the Makefile's `bench` list
#: until 2026-12-04); a re-made result carries its stamp from then on
UNSTAMPED = {
    "retrieve": "python -m bench.retrieve", "lego": "python -m bench.lego", "constrain": "python -m bench.constrain",
    "reasoners": "python -m bench.reasoners", "scale": "python -m bench.scale",
    "retrieval_frontier": "python -m bench.retrieval_frontier", "inference": "python -m bench.inference",
    "linking": "python -m bench.linking --split test --questions 500",
    "relplan_scale": "python -m bench.relplan_scale",
    "generalize": "python -m bench.generalize --split test --per-hop 100 --config default= "
                  "--config oracle=retrieve.oracle_hops=true",
}


def bench_argv(cmd: str) -> list[str] | None:
    """A stamped command as the argv that runs its bench module: ``python -m bench.x ARGS`` as it is, and the form
    stamped before the benches ran as modules, ``python bench/x.py ARGS``, as ``python -m bench.x ARGS``. None for
    a command that runs no bench module."""
    argv = shlex.split(cmd)
    if len(argv) >= 3 and argv[0] == "python" and argv[1] == "-m" and argv[2].startswith("bench."):
        return argv
    if len(argv) >= 2 and argv[0] == "python" and argv[1].startswith("bench/") and argv[1].endswith(".py"):
        module = Path(argv[1]).with_suffix("")
        if ".." not in module.parts:
            return ["python", "-m", ".".join(module.parts), *argv[2:]]
    return None


def results(reports: Path = REPORTS) -> dict[str, dict]:
    """Result name (file stem) -> its ``run`` stamp (``{}`` when the file has none), with ``earlier`` the stamps of
    the earlier runs whose rows a merged file kept (``earlier_runs``)."""
    out = {}
    for f in sorted(reports.glob("*.json")):
        try:
            doc = json.loads(f.read_text())
        except (OSError, ValueError) as e:
            out[f.stem] = {"note": f"unreadable: {e}"}
            continue
        out[f.stem] = {**(doc.get("run") or {}), "earlier": list(doc.get("earlier_runs") or [])}
    return out


def commands_for(name: str, run: dict, reports: Path = REPORTS, root: Path = ROOT) -> list[list[str]]:
    """The argvs that re-make result ``name``: the stamped commands of the runs that wrote into it, earliest first
    (a merged file: each size or set its own run), each once."""
    stamps = [e.get("command") for e in run.get("earlier", [])] + [run.get("command")]
    cmds = list(dict.fromkeys(c for c in stamps if c))
    if not cmds:
        return [command_for(name, run, reports, root)]
    return [command_for(name, {**run, "command": c}, reports, root) for c in cmds]


def command_for(name: str, run: dict, reports: Path = REPORTS, root: Path = ROOT) -> list[str]:
    """The argv that re-makes result ``name`` from its stamp: ``python`` replaced by this interpreter and ``--out``
    pointed at the committed file. ValueError (one line: why, and what to do) when it has no command."""
    cmd = run.get("command") or UNSTAMPED.get(name)
    if not cmd:
        made = run.get("committed_in") or run.get("commit") or "unknown"
        raise ValueError(f"{name}: no command stamped (made before results were stamped; recorded in commit "
                         f"{made[:12]}: its message and docs/benchmarks.md name the command)")
    argv = bench_argv(cmd)
    if argv is None:
        raise ValueError(f"{name}: the stamped command {cmd!r} is not a bench script (it ran elsewhere, e.g. in a "
                         "project folder); re-run it as docs/scale.md says")
    argv[0] = sys.executable
    target = (reports / f"{name}.json").resolve()
    mine = str(target.relative_to(root.resolve())) if target.is_relative_to(root.resolve()) else str(target)
    if "--out" in argv[:-1]:
        i = argv.index("--out")
        if (root / argv[i + 1]).resolve() != target:
            print(f"[bench] {name}: stamped --out {argv[i + 1]}; re-made into {mine}", file=sys.stderr)
            argv[i + 1] = mine
    return argv


def main(argv: list[str] | None = None, reports: Path = REPORTS, root: Path = ROOT) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd")
    sub.add_parser("list", help="every committed result, its commit and command (the default)")
    rr = sub.add_parser("rerun", help="re-make results from their stamped commands")
    rr.add_argument("names", nargs="*", help="result names (file stems under reports/bench)")
    rr.add_argument("--group", choices=sorted(GROUPS), help="a named group of results")
    rr.add_argument("--all", action="store_true", help="every result with a stamped command")
    rr.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    args = ap.parse_args(argv)
    have = results(reports)
    if args.cmd in (None, "list"):
        for name, run in have.items():
            cmd = run.get("command") or "(no command: " + (run.get("note") or "not stamped").split(":")[0] + ")"
            print(f"{name:40s} {(run.get('commit') or run.get('committed_in') or '-')[:10]:10s} {cmd}")
        return 0
    names = list(args.names) + GROUPS.get(args.group or "", [])
    if args.all:
        names += [n for n, r in have.items() if bench_argv(str(r.get("command") or ""))]
    unknown = [n for n in names if n not in have]
    if unknown or not names:
        print(f"bench rerun: {'unknown result ' + ', '.join(unknown) if unknown else 'no result named'}; "
              f"choices: {', '.join(have)}", file=sys.stderr)
        return 2
    try:
        plan = [(n, c) for n in dict.fromkeys(names) for c in commands_for(n, have[n], reports, root)]
    except ValueError as e:
        print(f"bench rerun: {e}", file=sys.stderr)
        return 2
    for name, cmd in plan:
        print(f"[bench] {name}: {shlex.join(cmd)}", file=sys.stderr, flush=True)
        if not args.dry_run:
            rc = subprocess.run(cmd, cwd=root).returncode
            if rc:
                print(f"bench rerun: {name} failed with exit status {rc}", file=sys.stderr)
                return rc
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
