"""DVC deps are derived from the code: every stage's deps cover every project file its command can run
(``kgrag.code.depgraph``), and the check notices a removed dep."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kgrag.code import depgraph
from kgrag.cli import PIPELINES

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("pipeline", PIPELINES)
def test_every_stage_deps_cover_its_import_closure(pipeline):
    missing = {stage: files for stage, files in depgraph.check(ROOT, ROOT / pipeline).items() if files}
    assert not missing, f"{pipeline}: deps miss files the stage can run (run `kgrag deps --write`): {missing}"


@pytest.mark.slow
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


def test_closure_follows_imports_and_the_kinds_a_file_looks_up(tmp_path):
    """Static imports (also inside functions and `from pkg import module`) and the catalogue modules of every
    kind a file looks up through a registry (read from its code, not declared) are in the closure; a file that
    only registers into a registry pulls no kind in; unrelated files are not in the closure."""
    files = {
        "stages/__init__.py": "",
        "stages/s.py": "from kgrag import a\ndef f():\n    import kgrag.b\n",
        "kgrag/__init__.py": "",
        "kgrag/a.py": "from kgrag.registry import RETRIEVERS\ndef pick(name):\n    return RETRIEVERS.get(name)\n",
        "kgrag/b.py": "",
        "kgrag/c.py": "",
        "kgrag/retrieval/retrievers/__init__.py": "",
        "kgrag/retrieval/retrievers/pcst.py": "from kgrag import c\n",
    }
    for rel, src in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(src)
    got = depgraph.closure(tmp_path, "stages.s")
    assert {"stages/s.py", "kgrag/a.py", "kgrag/b.py", "kgrag/retrieval/retrievers/pcst.py", "kgrag/c.py"} <= got
    (tmp_path / "kgrag/a.py").write_text("from kgrag.registry import RETRIEVERS\n"
                                         "@RETRIEVERS.register('x')\ndef x():\n    pass\n")
    assert "kgrag/retrieval/retrievers/pcst.py" not in depgraph.closure(tmp_path, "stages.s")


def test_parsed_facts_are_kept_on_disk_by_file_content(tmp_path, monkeypatch):
    """A process reads each file's import facts from the disk cache instead of parsing it again (every flow stage
    hashes its closure: ~1 s of parsing a process); an edited file is parsed anew, so the cache never answers for
    other bytes."""
    root = Path(depgraph.__file__).resolve().parents[2]
    monkeypatch.setenv(depgraph.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(depgraph, "_FACTS", {})
    want = depgraph.closure(root, "flows.retrieve")
    assert len(list((tmp_path / "cache").glob("*.json"))) == len(want)  # one file of facts per file read

    def no_parse(*a, **k):
        raise AssertionError("parsed a file the disk cache holds")

    monkeypatch.setattr(depgraph, "_FACTS", {})  # a new process: nothing in memory
    monkeypatch.setattr(depgraph, "_parse_text", no_parse)
    assert depgraph.closure(root, "flows.retrieve") == want
    proj = tmp_path / "proj"
    (proj / "stages").mkdir(parents=True)
    (proj / "stages" / "__init__.py").write_text("")
    (proj / "stages" / "s.py").write_text("import os\n")
    with pytest.raises(AssertionError, match="parsed a file"):
        depgraph.closure(proj, "stages.s")  # new bytes: parsed, not read


def test_the_repository_declares_no_kinds_by_hand():
    """The kinds come from the code alone: no file keeps a MODULE_KINDS list that could fall out of step."""
    held = [p.relative_to(ROOT).as_posix() for pkg in depgraph.PACKAGES for p in (ROOT / pkg).rglob("*.py")
            if "MODULE_KINDS =" in p.read_text()]
    assert held == []


def test_flows_code_version_is_the_closure_hash():
    from kgrag.code.versioning import closure_version

    assert closure_version("flows.retrieve") != closure_version("flows.generate")
    assert closure_version("flows.retrieve") == closure_version("flows.retrieve")


def test_gretriever_training_is_no_dependency_of_the_default_stages():
    """The ``gretriever`` backend loads a checkpoint without the training code (``model.load_best``): editing
    G-Retriever's training re-runs none of the default DAG's stages."""
    deps = depgraph.stage_deps(ROOT / "dvc.yaml")
    for stage, entry in depgraph.stage_entries(ROOT / "dvc.yaml").items():
        assert "kgrag/gretriever/train.py" not in depgraph.closure(ROOT, entry), stage
        assert "kgrag/gretriever/train.py" not in deps[stage], stage
