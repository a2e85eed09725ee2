"""The benches' one runner: every committed result (``reports/bench/*.json``) says which command made it (its
``run`` stamp, ``bench/_machine.py``), and this re-makes a result from that command.

    python -m bench                          # every result: its commit, its command (or why it has none)
    python -m bench rerun retrieve scale     # re-run the commands in retrieve.json and scale.json
    python -m bench rerun --group make       # the results `make bench` re-makes (GROUPS below)
    python -m bench rerun --all --dry-run    # what re-making every result with a command would run

The benches are modules of this package, run from the repository root (``python -m bench.retrieve``); a result
stamped when they ran as files (``python bench/retrieve.py ...``) is re-run as a module (:func:`bench_argv`).

*Stamped* and *recovered* commands. A result written since 2026-12-01 (b83881e) was stamped by the run itself:
``run.commit`` is the commit it ran at and ``run.command`` its command line. A result made before then was not;
its ``run.committed_in`` is the commit that recorded the file, and on 2026-12-05 its command and the commit whose
code made it were *recovered* from the evidence (committed_in's message, the docs and the bench's argparse of that
time, the JSON's own fields): such a ``run`` also carries ``command_source`` (where the command was read, how sure)
and, where a sample was re-run at that commit, ``verified``. A recovered command is what made the numbers as far
as that evidence goes, not a record the run wrote; ``python -m bench`` marks it ``[recovered]``. A few could not be
recovered (a file joined by hand from runs on different code, a flag recorded nowhere): their ``command`` is null,
``command_source`` says why, ``python -m bench`` says so, and ``rerun`` refuses them, or runs the one command
``UNSTAMPED`` knows that re-makes the result at HEAD though it did not make the committed file, and says so. A file
re-made in parts (full_split, a split at a time: each row stamped, ``made_by``) keeps such a run's rows until each is
re-made: the list marks it ``(+ rows of an earlier run without a command)`` and ``rerun`` runs ``UNSTAMPED``'s
command for the whole file.

``rerun`` runs every command at HEAD, so a re-made result measures today's code: numbers can differ from the
committed file's even for a stamped command, and for a recovered one it says so before it runs. A command whose
``--out`` named another file (a trial written to /tmp, then copied in) is re-run with ``--out`` set to the
committed file, and says so. A file that merges several runs (``earlier_runs``: one size or set each) is re-made
by each of their commands, earliest first. Commands run from the repository root, one after another (two cores:
never two timed runs at once), and the first that fails stops the run with its exit status.
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
#: a command that re-makes a result at HEAD where the command that made the committed file could not be recovered
#: (its ``run.command`` is null: ``command_source`` says why); ``rerun`` says that it did not make the file
UNSTAMPED: dict[str, str] = {}  # relplan_scale's entry went when its result was re-made, stamped, and
# full_split's (python -m bench.full_split --hops 1 2 3) when its last unstamped rows, the whole 3-hop split's,
# were (2026-12-06): every row of it names its own command now, and rerun runs those


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


#: the row groups of a bench file that merges runs: a row is stamped by the run that wrote it (``made_by``)
ROW_GROUPS = ("sets", "splits", "kill_resume")


def unstamped_rows(doc: dict) -> list[str]:
    """The rows of a bench file that no command is known to have made: a row names its run (``made_by``), or each
    run record in it (a dict with ``questions``: full_split's ``sample_200`` and ``full``) does. A file without row
    groups is one row, ``(file)``. Where every run that wrote into the file has a command (stamped or recovered),
    none: the file's stamps name them all."""
    if all(s.get("command") for s in [doc.get("run") or {}, *(doc.get("earlier_runs") or [])]):
        return []
    if not any(doc.get(g) for g in ROW_GROUPS):
        return ["(file)"]
    out = []
    for group in ROW_GROUPS:
        for key, row in (doc.get(group) or {}).items():
            runs = [v for v in row.values() if isinstance(v, dict) and "questions" in v]
            if not ((row.get("made_by") or {}).get("command")
                    or (runs and all((v.get("made_by") or {}).get("command") for v in runs))):
                out.append(f"{group}/{key}")
    return out


def results(reports: Path = REPORTS) -> dict[str, dict]:
    """Result name (file stem) -> its ``run`` stamp (``{}`` when the file has none), with ``earlier`` the stamps of
    the earlier runs whose rows a merged file kept (``earlier_runs``) and ``unstamped_rows`` those of its rows that
    no command made (:func:`unstamped_rows`)."""
    out = {}
    for f in sorted(reports.glob("*.json")):
        try:
            doc = json.loads(f.read_text())
        except (OSError, ValueError) as e:
            out[f.stem] = {"note": f"unreadable: {e}"}
            continue
        out[f.stem] = {**(doc.get("run") or {}), "earlier": list(doc.get("earlier_runs") or []),
                       "unstamped_rows": unstamped_rows(doc)}
    return out


def runs_of(run: dict) -> list[dict]:
    """The stamps of the runs that wrote into a result, earliest first (a merged file's ``earlier_runs``, then
    ``run``), each command once (its latest stamp)."""
    stamps = [*run.get("earlier", []), run]
    by_command = {s.get("command"): s for s in stamps if s.get("command")}
    return list(by_command.values()) or [run]


def unstamped_part(run: dict) -> bool:
    """Whether rows of the result come from a run without a command: its own, or one of a merged file's earlier
    runs whose rows are still there (full_split re-made one split at a time keeps the other splits' old rows)."""
    return not run.get("command") or bool(run.get("unstamped_rows"))


def runs_to_remake(name: str, run: dict) -> list[dict]:
    """The stamps whose commands re-make result ``name``: :func:`runs_of`, or, where rows of a run without a
    command remain and ``UNSTAMPED`` knows a command that re-makes the whole file, that one alone."""
    return [{"command": None}] if name in UNSTAMPED and unstamped_part(run) else runs_of(run)


def commands_for(name: str, run: dict, reports: Path = REPORTS, root: Path = ROOT) -> list[list[str]]:
    """The argvs that re-make result ``name``: the commands of the runs that wrote into it, earliest first
    (a merged file: each size or set its own run), each once; ``UNSTAMPED``'s where rows have no command."""
    return [command_for(name, s, reports, root) for s in runs_to_remake(name, run)]


def recovered(stamp: dict) -> bool:
    """Whether a run's command was recovered afterwards (``command_source``), not stamped by the run itself."""
    return bool(stamp.get("command") and stamp.get("command_source"))


def command_for(name: str, run: dict, reports: Path = REPORTS, root: Path = ROOT) -> list[str]:
    """The argv that re-makes result ``name`` from its stamp: ``python`` replaced by this interpreter and ``--out``
    pointed at the committed file. ValueError (one line: why, and what to do) when it has no command."""
    cmd = run.get("command") or UNSTAMPED.get(name)
    if not cmd:
        made = run.get("committed_in") or run.get("commit") or "unknown"
        why = ("its run.command_source says why" if run.get("command_source")
               else "its message and docs/benchmarks.md name the command")
        raise ValueError(f"{name}: no command (made before results were stamped, and not recovered; recorded in "
                         f"commit {made[:12]}: {why})")
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


def caveat(name: str, stamp: dict) -> str | None:
    """What to say before re-running a command that the committed file does not vouch for, or None."""
    if recovered(stamp):
        return (f"{name}: recovered command (run.command_source), not stamped by the run; it made the committed "
                f"numbers at {(stamp.get('commit') or '?')[:10]}, and runs now at HEAD: numbers can differ")
    if not stamp.get("command") and name in UNSTAMPED:
        return (f"{name}: no command made the committed file as it is (its run or an earlier run has none: "
                "run.command_source); this re-makes it whole at HEAD with the bench's own command")
    return None


def label(run: dict) -> str:
    """A result's command as ``python -m bench`` lists it."""
    if not run.get("command"):
        if run.get("command_source"):
            return "(no command: not recovered, see run.command_source)"
        return "(no command: " + (run.get("note") or "not stamped").split(":")[0] + ")"
    earlier = len(runs_of(run)) - 1
    return (run["command"] + (f"  (+{earlier} earlier run{'s' if earlier > 1 else ''})" if earlier > 0 else "")
            + ("  [recovered]" if recovered(run) else "")
            + ("  (+ rows of an earlier run without a command)" if unstamped_part(run) else ""))


def main(argv: list[str] | None = None, reports: Path = REPORTS, root: Path = ROOT) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd")
    sub.add_parser("list", help="every committed result, its commit and command (the default)")
    rr = sub.add_parser("rerun", help="re-make results from their commands (at HEAD)")
    rr.add_argument("names", nargs="*", help="result names (file stems under reports/bench)")
    rr.add_argument("--group", choices=sorted(GROUPS), help="a named group of results")
    rr.add_argument("--all", action="store_true", help="every result with a command (stamped or recovered)")
    rr.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    args = ap.parse_args(argv)
    have = results(reports)
    if args.cmd in (None, "list"):
        for name, run in have.items():
            print(f"{name:40s} {(run.get('commit') or run.get('committed_in') or '-')[:10]:10s} {label(run)}")
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
        plan = [(n, s, command_for(n, s, reports, root)) for n in dict.fromkeys(names)
                for s in runs_to_remake(n, have[n])]
    except ValueError as e:
        print(f"bench rerun: {e}", file=sys.stderr)
        return 2
    for name, stamp, cmd in plan:
        if note := caveat(name, stamp):
            print(f"[bench] {note}", file=sys.stderr)
        print(f"[bench] {name}: {shlex.join(cmd)}", file=sys.stderr, flush=True)
        if not args.dry_run:
            rc = subprocess.run(cmd, cwd=root).returncode
            if rc:
                print(f"bench rerun: {name} failed with exit status {rc}", file=sys.stderr)
                return rc
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
