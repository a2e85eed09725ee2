"""The benches' load record (bench/_machine.py): the warning reads the load before the run and the CPU time
other processes used during it, not the load average after (which the bench's own threads raise)."""

from __future__ import annotations

import pytest

from bench import _machine


@pytest.fixture
def fake(monkeypatch):
    """A machine whose load average, busy CPU seconds, own CPU seconds and clock the test sets."""
    state = {"load": [0.2, 0.3, 0.4], "busy": 100.0, "own": 10.0, "wall": 1000.0}
    monkeypatch.setattr(_machine, "_BEFORE", None)
    monkeypatch.setattr(_machine, "load_average", lambda: list(state["load"]))
    monkeypatch.setattr(_machine, "busy_seconds", lambda: state["busy"])
    monkeypatch.setattr(_machine, "own_seconds", lambda: state["own"])
    monkeypatch.setattr(_machine.time, "monotonic", lambda: state["wall"])
    return state


def test_own_threads_raising_the_load_average_are_not_a_warning(fake):
    _machine.start()
    # 100 s of wall time: the bench used 2 cores (200 CPU s), the whole machine 205: others 0.05 cores
    fake.update(load=[1.99, 1.4, 1.3], busy=305.0, own=210.0, wall=1100.0)
    r = _machine.finish({"x": 1})
    assert r["load"]["after"][0] == 1.99 and r["load"]["others_cores"] == 0.05
    assert r["load_warning"] is None and r["x"] == 1


def test_other_processes_during_the_run_give_a_warning(fake):
    _machine.start()
    fake.update(busy=100.0 + 200.0, own=10.0 + 100.0, wall=1100.0)  # others: (200 - 100) / 100 = 1 core
    r = _machine.finish({})
    assert r["load"]["others_cores"] == 1.0
    assert "other processes kept 1.0 cores busy" in r["load_warning"]


def test_a_busy_machine_before_the_run_gives_a_warning(fake):
    fake["load"] = [3.5, 3.0, 2.0]
    _machine.start()
    fake.update(busy=150.0, own=60.0, wall=1100.0)
    r = _machine.finish({})
    assert r["load"]["before"][0] == 3.5 and "load average 3.5 > 1.0 before the run" in r["load_warning"]


def test_real_counters_are_read():
    """On Linux the real counters exist and grow. The process counters tick in clock ticks (10 ms): a fixed
    amount of work can fall inside one tick, so the test works until a tick passes (2 s of CPU at most)."""
    import time

    b, o = _machine.busy_seconds(), _machine.own_seconds()
    t0 = time.process_time()
    while _machine.own_seconds() <= o and time.process_time() - t0 < 2.0:
        sum(i * i for i in range(20_000))
    assert b is not None and _machine.busy_seconds() >= b and _machine.own_seconds() > o


def test_every_result_says_which_commit_command_and_params_made_it(tmp_path, monkeypatch):
    """write_result stamps ``run``: the work tree's commit (and whether tracked files differed from it), the
    command line as typed from the repository root (a bench runs as a module, and Python sets ``argv[0]`` to the
    module's file: the stamp reads ``python -m bench.x``), and params.yaml's sha256."""
    import hashlib
    import json
    import subprocess
    import sys

    from bench.common import write_result

    monkeypatch.setattr(sys, "argv", [str(_machine.ROOT / "bench" / "retrieve.py"), "--questions", "5"])
    out = tmp_path / "r.json"
    write_result(str(out), {"x": 1})
    run = json.loads(out.read_text())["run"]
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=_machine.ROOT, capture_output=True, text=True)
    assert run["commit"] == (head.stdout.strip() if head.returncode == 0 else None)
    assert run["command"] == "python -m bench.retrieve --questions 5"
    assert run["params_sha256"] == hashlib.sha256((_machine.ROOT / "params.yaml").read_bytes()).hexdigest()
    assert isinstance(run["dirty"], bool) or run["commit"] is None
    # outside a git work tree: no commit, and no claim about it
    empty = _machine.provenance(tmp_path)
    assert empty["commit"] is None and empty["dirty"] is None and empty["params_sha256"] is None


def test_a_merged_result_is_stamped_by_the_run_that_wrote_it_and_keeps_the_earlier_ones(tmp_path, monkeypatch):
    """A bench that re-runs some rows of a committed file (transfer.py, question_graphs.py) reads the file back
    with its old ``run``: the new file's ``run`` is this run's, and the old one moves to ``earlier_runs`` (once,
    however often the same earlier run is merged again)."""
    import json
    import sys

    from bench.common import write_result

    monkeypatch.setattr(sys, "argv", [str(_machine.ROOT / "bench" / "transfer.py"), "--sources", "kg"])
    old = {"commit": "0" * 40, "dirty": False, "command": "python bench/transfer.py", "params_sha256": None}
    out = tmp_path / "r.json"
    write_result(str(out), {"sets": {"a": 1}, "run": old})
    first = json.loads(out.read_text())
    assert first["run"]["command"] == "python -m bench.transfer --sources kg" and first["earlier_runs"] == [old]
    write_result(str(out), first)  # the same run writes again (one row at a time): nothing new is earlier
    again = json.loads(out.read_text())
    assert again["earlier_runs"] == [old] and again["run"] == first["run"]
    write_result(str(tmp_path / "fresh.json"), {"x": 1})
    assert "earlier_runs" not in json.loads((tmp_path / "fresh.json").read_text())


#: results whose command could not be recovered (issue 56): each file's run.command_source says why in full. This
#: list may shrink (a result re-made, or its command found) but not grow: every new result is stamped by its run.
NOT_RECOVERED: dict[str, str] = {}  # full_split left it on 2026-12-06: each of its rows re-made, stamped


def test_a_merged_file_is_stamped_only_when_every_row_is():
    from bench.__main__ import unstamped_rows

    """A file re-made in parts (full_split: one split a session) keeps rows of an unstamped earlier run until each
    is re-made: its rows without ``made_by`` are listed, and the stamped ones are not."""
    row = {"questions": 3, "made_by": {"command": "python -m bench.full_split --hops 1", "commit": "0" * 40}}
    doc = {"splits": {"1-hop": {"full": row, "sample_200": row, "per_question_cost_ratio": {"generate": 1.0}},
                      "2-hop": {"full": {"questions": 5}, "sample_200": row}},
           "kill_resume": {"1-hop": {"questions": 2}}, "sets": {"a": {"made_by": row["made_by"]}},
           "run": {"command": "python -m bench.full_split --hops 1"}, "earlier_runs": [{"command": None}]}
    assert unstamped_rows(doc) == ["splits/2-hop", "kill_resume/1-hop"]
    doc["splits"]["2-hop"]["full"] = row
    doc["kill_resume"]["1-hop"] = row
    assert unstamped_rows(doc) == []
    run = {"command": "python -m bench.x"}
    assert unstamped_rows({"run": run, "earlier_runs": [{"command": None}]}) == ["(file)"]  # no rows: the file
    assert unstamped_rows({"run": run, "earlier_runs": [run]}) == []


def test_every_committed_result_names_what_made_it():
    """Each reports/bench/*.json carries ``run``: the commit and command line that made it, stamped by the run, or,
    for a result made before results were stamped, recovered afterwards from the evidence (``command_source`` says
    where from) beside ``committed_in``, the commit that recorded the file. Only the results of ``NOT_RECOVERED``
    may lack them (their ``command_source`` says why), and that list does not grow. A file that merges runs, one of
    which has no command, counts as lacking until each of its rows carries its own stamp (``bench.__main__.unstamped_rows``). Every
    commit named (also an earlier run's of a merged file) must be in this history."""
    import json
    import re
    import subprocess
    from pathlib import Path

    from bench.__main__ import unstamped_rows

    root = Path(__file__).resolve().parents[1]
    files = sorted((root / "reports" / "bench").glob("*.json"))
    assert files
    sha = re.compile(r"[0-9a-f]{40}")
    named, lacking = set(), set()
    for f in files:
        doc = json.loads(f.read_text())
        run = doc.get("run")
        assert isinstance(run, dict), f"{f.name}: no run record"
        for r in [run, *(doc.get("earlier_runs") or [])]:
            for key in ("commit", "committed_in"):
                if r.get(key):
                    assert sha.fullmatch(r[key]), f"{f.name}: {key} {r[key]!r}"
                    named.add(r[key])
            if r.get("command_source") and r.get("command"):  # recovered: it says from where, and the code it names
                assert r.get("commit") and r.get("command", "").startswith("python "), f.name
        if run.get("commit") and run.get("command"):
            assert run["command"].startswith("python "), f.name
            if not run.get("command_source"):  # stamped by the run: since b83881e, no committed_in
                assert not run.get("committed_in"), f.name
            if not unstamped_rows(doc):
                continue  # every run that wrote into it is named, or each row names its own
        lacking.add(f.stem)
        assert f.stem in NOT_RECOVERED, f"{f.name}: no commit and command, and not in NOT_RECOVERED"
        bare = [r for r in [run, *(doc.get("earlier_runs") or [])] if not r.get("command")]  # a part re-made keeps one
        assert any(sha.fullmatch(r.get("committed_in") or "") for r in bare), f"{f.name}: no command, no committed_in"
        assert any(r.get("command_source") for r in bare), f"{f.name}: no command, and no command_source saying why"
    assert len(NOT_RECOVERED) <= 7, "NOT_RECOVERED may shrink, not grow: stamp or recover the result's command"
    assert lacking == set(NOT_RECOVERED), f"recovered or gone, drop from NOT_RECOVERED: {set(NOT_RECOVERED) - lacking}"
    shallow = subprocess.run(["git", "rev-parse", "--is-shallow-repository"], cwd=root, capture_output=True,
                             text=True).stdout.strip()
    if shallow == "false":  # a full history (a shallow clone lacks the old commits)
        p = subprocess.run(["git", "cat-file", "--batch-check"], cwd=root, input="\n".join(sorted(named)) + "\n",
                           capture_output=True, text=True)
        assert "missing" not in p.stdout, p.stdout


def test_a_stamped_command_keeps_each_argument_whole():
    """An argument with spaces or ``;`` (a ``--loko-row`` title, a ``--config`` of several overrides) is quoted in
    the stamp, so that ``shlex.split`` (what ``python -m bench rerun`` runs) gives the bench the argv it ran with.
    Stamps joined with bare spaces before 2026-12-06 split such a value into several arguments, and rerun failed
    on them; every committed stamp is now in this quoted form (recovered commands keep the form they were read in)."""
    import json
    import shlex
    from pathlib import Path

    argv = [str(_machine.ROOT / "bench" / "transfer.py"), "--loko-row", "lexical + WordNet (leave-one-KG-out, x)",
            "--config", "a=retrieve.relpath.plan=null;retrieve.relpath.scorer_params={normalize: mean}", "--out", "o"]
    line = _machine.command_line(argv)
    assert shlex.split(line) == ["python", "-m", "bench.transfer", *argv[1:]]
    assert _machine.command_line([str(_machine.ROOT / "bench" / "retrieve.py"), "--questions", "5"]) == (
        "python -m bench.retrieve --questions 5")  # plain arguments stay bare

    def stamps(doc):
        if isinstance(doc, dict):
            for k, v in doc.items():
                if k in ("run", "made_by") and isinstance(v, dict):
                    yield v
                elif k == "earlier_runs":
                    yield from (x for x in v if isinstance(x, dict))
                else:
                    yield from stamps(v)
        elif isinstance(doc, list):
            for x in doc:
                yield from stamps(x)

    bad = []
    for f in sorted((Path(__file__).resolve().parents[1] / "reports" / "bench").glob("*.json")):
        for s in stamps(json.loads(f.read_text())):
            cmd = s.get("command")
            if cmd and not s.get("command_source") and shlex.join(shlex.split(cmd)) != cmd:
                bad.append(f"{f.name}: {cmd[:80]}")
    assert not bad, "stamped commands not in shlex.join form (an argument split or unquoted): " + "; ".join(bad)
