"""`python -m bench` (bench/__main__.py): the one runner that re-makes a committed result from the command stamped
in it (issue 56). A real subprocess per command, in a scratch repository root with a tiny bench module. The benches
run as modules (`python -m bench.x`); a result stamped before they did (`python bench/x.py`) is re-run as one."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from bench import __main__ as runner

ROOT = Path(__file__).resolve().parents[1]

TINY = """import json, sys
out = sys.argv[sys.argv.index('--out') + 1]
size = sys.argv[sys.argv.index('--size') + 1]
doc = json.load(open(out)) if __import__('os').path.exists(out) else {}
doc.setdefault('sizes', []).append(size)
doc['run'] = {'command': 'python -m bench.tiny ' + ' '.join(sys.argv[1:])}
json.dump(doc, open(out, 'w'))
"""


def _repo(tmp_path: Path) -> Path:
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "__init__.py").write_text("")
    (tmp_path / "bench" / "tiny.py").write_text(TINY)
    (tmp_path / "reports" / "bench").mkdir(parents=True)
    return tmp_path


def test_rerun_remakes_a_merged_result_from_each_stamped_command_into_the_committed_file(tmp_path):
    root = _repo(tmp_path)
    reports = root / "reports" / "bench"
    # two runs wrote into it: the first a trial written to /tmp and copied in (stamped when the benches ran as
    # files), the second into the file itself
    (reports / "tiny.json").write_text(json.dumps({"sizes": ["old"], "run": {
        "commit": "a" * 40, "command": "python -m bench.tiny --size 2 --out reports/bench/tiny.json"},
        "earlier_runs": [{"commit": "b" * 40, "command": "python bench/tiny.py --size 1 --out /tmp/trial.json"}]}))
    (reports / "old.json").write_text(json.dumps({"run": {"command": None, "committed_in": "c" * 40}}))
    assert runner.main(["rerun", "tiny"], reports=reports, root=root) == 0
    doc = json.loads((reports / "tiny.json").read_text())
    assert doc["sizes"] == ["old", "1", "2"]  # earliest first, both into the committed file
    assert doc["run"]["command"].endswith("--size 2 --out reports/bench/tiny.json")
    assert runner.main(["rerun", "old"], reports=reports, root=root) == 2  # no command: refused, nothing run
    assert runner.main(["rerun", "nosuch"], reports=reports, root=root) == 2


def test_every_committed_result_is_listed_and_the_make_group_has_a_command_for_each(capsys):
    """`python -m bench` lists every reports/bench/*.json; `make bench`'s group resolves to bench scripts."""
    assert runner.main(["list"]) == 0
    listed = {line.split()[0] for line in capsys.readouterr().out.splitlines()}
    assert listed == {f.stem for f in (ROOT / "reports" / "bench").glob("*.json")}
    assert runner.main(["rerun", "--group", "make", "--dry-run"]) == 0
    err = capsys.readouterr().err
    assert err.count("[bench] ") >= len(runner.GROUPS["make"]) and f"{sys.executable} -m bench." in err
    assert "rerun --group make" in (ROOT / "Makefile").read_text()


def test_a_command_stamped_when_the_benches_ran_as_files_is_re_run_as_a_module(tmp_path, capsys):
    """`python bench/x.py ARGS` (results stamped before the benches became modules) runs as `python -m bench.x ARGS`;
    a command of another kind (a stage run in a project folder) is still refused."""
    assert runner.bench_argv("python bench/tiny.py --size 3 --config a='b c'") == [
        "python", "-m", "bench.tiny", "--size", "3", "--config", "a=b c"]
    assert runner.bench_argv("python -m bench.tiny --size 3") == ["python", "-m", "bench.tiny", "--size", "3"]
    assert runner.bench_argv("python -m flows.with_api dvc repro") is None
    assert runner.bench_argv("python bench/../stages/x.py") is None
    root = _repo(tmp_path)
    reports = root / "reports" / "bench"
    (reports / "tiny.json").write_text(json.dumps({"run": {"command": "python bench/tiny.py --size 7 --out "
                                                                       "reports/bench/tiny.json"}}))
    (reports / "stage.json").write_text(json.dumps({"run": {"command": "python -m flows.with_api dvc repro"}}))
    assert runner.main(["rerun", "tiny"], reports=reports, root=root) == 0
    assert f"{sys.executable} -m bench.tiny --size 7" in capsys.readouterr().err
    doc = json.loads((reports / "tiny.json").read_text())
    assert doc["sizes"] == ["7"]
    assert doc["run"]["command"] == "python -m bench.tiny --size 7 --out reports/bench/tiny.json"  # stamped anew
    assert runner.main(["rerun", "stage"], reports=reports, root=root) == 2


def test_a_recovered_command_is_marked_in_the_list_and_re_run_at_head_with_a_caveat(tmp_path, capsys):
    """A result made before stamping whose command was recovered afterwards (``command_source``) is listed with it,
    marked ``[recovered]``; ``rerun`` runs it (and a merged file's recovered earlier runs, earliest first) and says
    first that it runs at HEAD, not at the commit that made the numbers. One that could not be recovered is listed
    as such and refused, unless ``UNSTAMPED`` knows a command that re-makes it (said too)."""
    root = _repo(tmp_path)
    reports = root / "reports" / "bench"
    src = "recovered 2026-12-05 from committed_in's message"
    (reports / "tiny.json").write_text(json.dumps({
        "run": {"command": "python -m bench.tiny --size 2 --out reports/bench/tiny.json", "commit": "a" * 40,
                "committed_in": "b" * 40, "command_source": src},
        "earlier_runs": [{"command": "python -m bench.tiny --size 1 --out reports/bench/tiny.json",
                          "commit": "c" * 40, "command_source": src}]}))
    (reports / "lost.json").write_text(json.dumps({"run": {
        "command": None, "commit": None, "committed_in": "d" * 40, "command_source": "not recovered: ..."}}))
    assert runner.main(["list"], reports=reports, root=root) == 0
    out = capsys.readouterr().out.splitlines()
    assert any(x.startswith("tiny ") and "--size 2" in x and "[recovered]" in x and "+1 earlier run" in x for x in out)
    assert any(x.startswith("lost ") and "not recovered" in x for x in out)
    assert runner.main(["rerun", "tiny"], reports=reports, root=root) == 0
    err = capsys.readouterr().err
    assert err.count("recovered command") == 2 and "at HEAD" in err and "cccccccccc" in err and "aaaaaaaaaa" in err
    assert json.loads((reports / "tiny.json").read_text())["sizes"] == ["1", "2"]
    assert runner.main(["rerun", "lost"], reports=reports, root=root) == 2
    assert "not recovered" in capsys.readouterr().err


def test_no_unstamped_fallback_shadows_a_result_that_has_a_command():
    """``UNSTAMPED`` holds only results that have no command of their own: a command recovered or stamped in the
    file is the one re-run (the old list's linking command no longer parsed with the bench's flags)."""
    have = runner.results()
    for name in runner.UNSTAMPED:
        assert name in have and runner.unstamped_part(have[name]), name


def test_a_file_partly_re_made_is_re_made_whole_by_its_unstamped_command(tmp_path, capsys, monkeypatch):
    """full_split re-made one split at a time: the latest run has a command, an earlier one (the other splits'
    rows) has none. The list says so, and rerun runs ``UNSTAMPED``'s command, which re-makes the whole file,
    not just the latest run's split."""
    root = _repo(tmp_path)
    reports = root / "reports" / "bench"
    doc = {"sizes": ["old", "1"], "run": {
        "commit": "a" * 40, "command": "python -m bench.tiny --size 1 --out reports/bench/tiny.json"},
        "earlier_runs": [{"command": None, "committed_in": "c" * 40, "command_source": "not recovered"}]}
    (reports / "tiny.json").write_text(json.dumps(doc))
    monkeypatch.setattr(runner, "UNSTAMPED", {"tiny": "python -m bench.tiny --size all --out reports/bench/tiny.json"})
    assert runner.main(["list"], reports=reports, root=root) == 0
    assert "rows of an earlier run without a command" in capsys.readouterr().out
    assert runner.main(["rerun", "tiny"], reports=reports, root=root) == 0
    assert "re-makes it whole" in capsys.readouterr().err
    assert json.loads((reports / "tiny.json").read_text())["sizes"] == ["old", "1", "all"]
    (reports / "tiny.json").write_text(json.dumps({**doc, "sizes": ["old", "1"]}))
    monkeypatch.setattr(runner, "UNSTAMPED", {})  # no whole-file command: the stamped run alone
    assert runner.main(["rerun", "tiny"], reports=reports, root=root) == 0
    assert json.loads((reports / "tiny.json").read_text())["sizes"] == ["old", "1", "1"]
