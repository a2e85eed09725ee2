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
