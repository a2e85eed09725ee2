"""docs/tutorial.md runs: every ```bash block of the page, in order, in a fresh copy of the repository (a git repo
with ../shared beside it), on a 12-question sample instead of the page's 100. So the page cannot drift from the
code: a renamed param, loader or command fails here."""

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
SAMPLE = 12


def blocks(text: str) -> list[str]:
    """The page's ```bash blocks, in order."""
    return re.findall(r"```bash\n(.*?)```", text, flags=re.S)


def test_the_tutorial_has_runnable_blocks_and_every_command_is_in_one():
    cmds = [c for b in blocks(TUTORIAL.read_text()) for c in b.strip().splitlines()]
    assert len(cmds) >= 7
    assert any(c.startswith("dvc exp run -n wc-kg ") for c in cmds)
    assert any(c.startswith("dvc exp run -n wc-labelled ") for c in cmds)
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
    outputs = []
    for block in blocks(TUTORIAL.read_text()):
        script = block.replace("data.sample=100", f"data.sample={SAMPLE}")
        p = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=proj, env=env, capture_output=True,
                           text=True, timeout=1500)
        assert p.returncode == 0, f"tutorial block failed:\n{script}\n{(p.stdout + p.stderr)[-3000:]}"
        outputs.append(p.stdout)
    # the two runs are real experiments on the WorldCup KG, each with its own plan
    compare = (proj / "reports" / "compare.md").read_text()
    assert "wc-kg" in compare and "wc-labelled" in compare and "`setup.plan`" in compare
    assert "kg (" in compare and "labelled (" in compare
    metrics = json.loads((proj / "reports" / "metrics.json").read_text())
    assert metrics["questions"] == SAMPLE and metrics["setup"]["dataset"] == "irn"
    assert metrics["setup"]["plan"].startswith("labelled") and metrics["setup"]["link_entities"] is True
    assert "Shinji_OKAZAKI" in outputs[-1] or "answer" in outputs[-1].lower()
