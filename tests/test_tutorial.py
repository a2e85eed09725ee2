"""docs/tutorial.md runs: its ```bash blocks, in order, as one script, in a fresh copy of the repository (a git repo
with ../shared beside it), on a 6-question sample instead of the page's 100; and every command of README.md is
one the tutorial runs or is marked with why the suite does not run it. So neither page can drift from the code."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, copy_repo, need, run

TUTORIAL = ROOT / "docs" / "tutorial.md"
SAMPLE = 6  # the page runs 100; the suite needs a few of each run (a first SmolLM2 scoring pass costs ~4 s a question)


def blocks(text: str) -> list[str]:
    """The page's ```bash blocks, in order."""
    return re.findall(r"```bash\n(.*?)```", text, flags=re.S)


def test_the_tutorial_has_runnable_blocks_and_every_command_is_in_one():
    cmds = [c for b in blocks(TUTORIAL.read_text()) for c in b.strip().splitlines()]
    assert len(cmds) >= 7
    assert "dvc exp run -n wc-kg $S -S relplan.source=kg" in cmds
    assert "dvc exp run -n wc-labelled $S -S relplan.source=labelled" in cmds
    assert any(c.startswith("kgrag compare ") for c in cmds) and any(c.startswith("kgrag ask ") for c in cmds)


@pytest.mark.e2e  # two real pipeline runs through DVC experiments (a few minutes)
def test_the_tutorial_runs(tmp_path):
    shared = ROOT.parent / "shared" / "data" / "transfer" / "wc2014"
    need(shared.exists(), "../shared/data/transfer/wc2014 (the IRN release)")
    proj = copy_repo(tmp_path / "proj", sample=200, shard_size=25)
    (tmp_path / "shared").symlink_to(ROOT.parent / "shared")
    run(["git", "init", "-q"], proj)
    run(["git", "add", "-A"], proj)
    run(["git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "init"], proj)
    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_HOME", "PREFECT_LOCAL_STORAGE_PATH")}
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
    script = "\n".join(blocks(TUTORIAL.read_text())).replace("data.sample=100", f"data.sample={SAMPLE}")
    p = subprocess.run(["bash", "-euxo", "pipefail", "-c", script], cwd=proj, env=env, capture_output=True, text=True,
                       timeout=2400)
    assert p.returncode == 0, f"the tutorial failed:\n{(p.stdout + p.stderr)[-4000:]}"
    # the two runs are real experiments on the WorldCup KG, each with its own plan
    compare = (proj / "reports" / "compare.md").read_text()
    assert "wc-kg" in compare and "wc-labelled" in compare and "`setup.plan`" in compare
    assert "kg (" in compare and "labelled (" in compare
    metrics = json.loads((proj / "reports" / "metrics.json").read_text())
    assert metrics["questions"] == SAMPLE and metrics["setup"]["dataset"] == "irn"
    assert metrics["setup"]["plan"].startswith("labelled") and metrics["setup"]["link_entities"] is True
    assert "answer" in p.stdout.lower()  # kgrag ask printed its answer
    # compare's cells are each experiment's own metrics file, with its bootstrap interval
    shown = subprocess.run(["dvc", "exp", "show", "--json"], cwd=proj, env=env, capture_output=True, text=True,
                           check=True)
    files = dict(_named_metrics(json.loads(shown.stdout), {"wc-kg", "wc-labelled"}))
    assert set(files) == {"wc-kg", "wc-labelled"}
    _cells_are_the_metrics(_table(compare), files)


def _named_metrics(node, names: set[str]):
    """(experiment name, its reports/metrics.json) of each experiment named in ``names`` in `dvc exp show --json`."""
    if isinstance(node, dict):
        if node.get("name") in names and isinstance(node.get("data"), dict):
            yield node["name"], node["data"]["metrics"]["reports/metrics.json"]["data"]
            return
        for v in node.values():
            yield from _named_metrics(v, names)
    elif isinstance(node, list):
        for v in node:
            yield from _named_metrics(v, names)


def _table(md: str) -> dict[str, dict[str, str]]:
    """The first markdown table of ``md`` as {experiment: {column: cell}} (bold marks stripped)."""
    lines = [x for x in md.splitlines() if x.startswith("|")]
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = [[c.strip().strip("*") for c in x.strip("|").split("|")] for x in lines[2:]]
    return {r[0]: dict(zip(head, r)) for r in rows}


def _cells_are_the_metrics(table: dict, files: dict) -> None:
    """Each key metric's cell of each experiment: its value (rounded) and its 95% interval."""
    from kgrag.reporting.compare import KEY_METRICS, direction, fmt, label

    arrows = {1: " ↑", -1: " ↓", 0: ""}
    for name, m in files.items():
        assert "accuracy" not in m  # a label-task metric: not a column of this entity-question comparison
        checked = 0
        for key in (k for k in KEY_METRICS if k in m):
            cell = table[name][f"{label(key)}{arrows[direction(key)]}"]
            value, _, band = cell.partition(" [")  # the value (bold when best), then its bootstrap 95% interval
            value, band = value.strip("*"), band.rstrip("*")
            assert float(value) == pytest.approx(m[key], abs=0.05 if abs(m[key]) >= 100 else 5e-4), (name, key)
            ci = m.get("ci95", {}).get(key)
            assert band == (f"{fmt(ci['low'])}, {fmt(ci['high'])}]" if ci else ""), (name, key, cell)
            checked += 1
        assert checked >= 3 and set(m["ci95"]) >= {"hit_at_1", "hit_any", "f1"}


#: README commands the tutorial does not run, and why
NOT_IN_TUTORIAL = {
    "make repro": "CI's .ci/check_repro.sh runs it on a fresh clone (and checks dvc.lock is unchanged)",
    "make test": "this suite is what it runs",
    "make data": "make repro runs it; tests/test_fetch.py fetches the manifest from a local HTTP server",
    "make data FROM=~/Downloads/MetaQA": "tests/test_fetch.py reads a release from a local .zip",
    "make data MIRROR=https://example.org/data": "tests/test_fetch.py fetches from a mirror on a local server",
}


def test_every_readme_command_is_run_by_the_tutorial_or_marked():
    readme = (ROOT / "README.md").read_text()
    indented = re.findall(r"\n\n((?:    \S.*\n)+)", readme)  # markdown's indented code blocks
    cmds = [x.strip().split("  #")[0].strip() for block in indented for x in block.splitlines()]
    cmds = [c for c in cmds if c and not c.startswith(("params.yaml", "(", "stages/", "flows/", "kgrag/"))]
    tutorial = {c.strip() for b in blocks(TUTORIAL.read_text()) for c in b.splitlines()}
    missing = [c for c in cmds if c not in tutorial and c not in NOT_IN_TUTORIAL]
    assert not missing, missing
    assert len(cmds) >= 8
