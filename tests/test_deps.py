"""DVC deps are derived from the code: every stage's deps cover every project file its command can run
(``kgrag.depgraph``), and the check notices a removed dep."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kgrag import depgraph
from kgrag.cli import PIPELINES

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("pipeline", PIPELINES)
def test_every_stage_deps_cover_its_import_closure(pipeline):
    missing = {stage: files for stage, files in depgraph.check(ROOT, ROOT / pipeline).items() if files}
    assert not missing, f"{pipeline}: deps miss files the stage can run (run `kgrag deps --write`): {missing}"


def test_the_check_fails_when_a_dep_is_removed(tmp_path):
    """Remove one code dep of the retrieve stage in a copy: the check names the files it no longer covers."""
    for d in ("kgrag", "stages", "flows"):
        shutil.copytree(ROOT / d, tmp_path / d, ignore=shutil.ignore_patterns("__pycache__"))
    text = (ROOT / "dvc.yaml").read_text()
    assert "      - kgrag/registry.py\n" in text
    (tmp_path / "dvc.yaml").write_text(text.replace("      - kgrag/registry.py\n", "", 1))
    missing = depgraph.check(tmp_path, tmp_path / "dvc.yaml")
    assert "kgrag/registry.py" in {f for files in missing.values() for f in files}
    depgraph.write(tmp_path, tmp_path / "dvc.yaml")  # and --write puts it back
    assert not any(depgraph.check(tmp_path, tmp_path / "dvc.yaml").values())


def test_closure_follows_imports_and_declared_kinds(tmp_path):
    """Static imports (also inside functions and `from pkg import module`) and the catalogue modules of every
    kind a file declares in MODULE_KINDS are in the closure; unrelated files are not."""
    files = {
        "stages/__init__.py": "",
        "stages/s.py": "from kgrag import a\ndef f():\n    import kgrag.b\n",
        "kgrag/__init__.py": "",
        "kgrag/a.py": "MODULE_KINDS = ('retriever',)\n",
        "kgrag/b.py": "",
        "kgrag/c.py": "",
        "kgrag/retrievers/__init__.py": "",
        "kgrag/retrievers/pcst.py": "from kgrag import c\n",
    }
    for rel, src in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(src)
    got = depgraph.closure(tmp_path, "stages.s")
    assert {"stages/s.py", "kgrag/a.py", "kgrag/b.py", "kgrag/retrievers/pcst.py", "kgrag/c.py"} <= got
    (tmp_path / "kgrag/a.py").write_text("")
    assert "kgrag/retrievers/pcst.py" not in depgraph.closure(tmp_path, "stages.s")


def test_files_that_look_modules_up_declare_their_kinds():
    """A file naming a registry (other than registering into it) declares the kind in MODULE_KINDS, so its
    stage's deps include every module it may pick (params.py only validates, see kgrag.depgraph)."""
    bad = {}
    for f in sorted(p for pkg in depgraph.PACKAGES for p in (ROOT / pkg).rglob("*.py")):
        rel = f.relative_to(ROOT).as_posix()
        if rel in depgraph.VALIDATION_ONLY:
            continue
        undeclared = depgraph.used_kinds(ROOT, rel) - set(depgraph.declared_kinds(ROOT, rel))
        if undeclared:
            bad[rel] = sorted(undeclared)
    assert not bad, f"declare MODULE_KINDS in: {bad}"


def test_flows_code_version_is_the_closure_hash():
    from kgrag.versioning import closure_version

    assert closure_version("flows.retrieve") != closure_version("flows.generate")
    assert closure_version("flows.retrieve") == closure_version("flows.retrieve")
