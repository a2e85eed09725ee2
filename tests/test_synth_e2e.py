"""The synth stage end to end: `dvc repro synth/dvc.yaml` in a copy of the project, then the real ingest stage on its
files through the triples loader (the whole KG) and the jsonl loader (per-question graphs), and the real
retrieve stage on it with `retrieve.store: duckdb` against `memory` (same retrieved rows)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from tests.conftest import ROOT

pytestmark = pytest.mark.e2e

N, QUESTIONS, BAD = 4000, 12, 6


def _run(cmd: list[str], cwd: Path) -> str:
    env = {**os.environ, "PYTHONPATH": str(cwd)}
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
    p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, f"{' '.join(cmd)} failed:\n{(p.stdout + p.stderr)[-3000:]}"
    return p.stdout + p.stderr


def _params(proj: Path, **data) -> None:
    p = yaml.safe_load((proj / "params.yaml").read_text())
    p["synth"].update(n_triples=N, questions=QUESTIONS, bad_lines=BAD, n_relations=8, n_types=4)
    if data:
        p["data"] = {"sample": 0, "seed": 0, "input": "data/synth", **data}
    (proj / "params.yaml").write_text(yaml.safe_dump(p, sort_keys=False))


@pytest.fixture(scope="module")
def proj(tmp_path_factory) -> Path:
    """A DVC project (no git) with the repo's code, dvc.yaml and params, `dvc repro synth/dvc.yaml` done."""
    dst = tmp_path_factory.mktemp("synth") / "proj"
    dst.mkdir()
    for d in ("kgrag", "stages", "flows"):
        shutil.copytree(ROOT / d, dst / d, ignore=shutil.ignore_patterns("__pycache__"))
    for f in ("dvc.yaml", "params.yaml", "synth/dvc.yaml"):
        (dst / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / f, dst / f)
    _params(dst)
    _run(["dvc", "init", "--no-scm", "-q"], dst)
    out = _run(["dvc", "repro", "synth/dvc.yaml"], dst)
    assert "Running stage 'synth/dvc.yaml:synth'" in out, out
    for stage in ("ingest", "validate", "retrieve"):  # nothing else runs: the default DAG does not read synth
        assert f"Running stage '{stage}'" not in out
    return dst


def test_stage_writes_labelled_files_and_reruns_on_its_params(proj):
    m = json.loads((proj / "data" / "synth" / "manifest.json").read_text())
    assert m["synthetic"] is True and m["triples"] == N and m["bad_lines"] == BAD and m["questions"] == QUESTIONS
    lines = (proj / "data" / "synth" / "triples.tsv").read_text().splitlines()
    assert len(lines) == N + BAD
    assert "up to date" in _run(["dvc", "status", "synth/dvc.yaml:synth"], proj)
    original = (proj / "params.yaml").read_text()
    p = yaml.safe_load(original)
    p["data"]["sample"] = 7  # another stage's param: synth stays up to date
    (proj / "params.yaml").write_text(yaml.safe_dump(p, sort_keys=False))
    assert "up to date" in _run(["dvc", "status", "synth/dvc.yaml:synth"], proj)
    p["synth"]["seed"] = 1  # its own param: synth is stale
    (proj / "params.yaml").write_text(yaml.safe_dump(p, sort_keys=False))
    try:
        out = _run(["dvc", "status", "synth/dvc.yaml:synth"], proj)
        assert "changed deps" in out and "synth" in out.split("modified:")[1]
    finally:
        (proj / "params.yaml").write_text(original)


def test_outputs_hold_no_run_record_and_a_rerun_leaves_the_lock_alone(proj):
    """The output folder holds the generated files only; the wall time goes to the run record
    (data/timings/synth/timing.json, no DVC output), which names the hash of each file. A forced re-run writes
    the same bytes, so synth/dvc.lock does not change."""
    from kgrag.io import file_hash

    names = ["manifest.json", "questions.jsonl", "questions_graphs.jsonl", "triples.tsv"]
    synth = proj / "data" / "synth"
    assert sorted(f.name for f in synth.iterdir()) == names
    assert not any(k in json.loads((synth / "manifest.json").read_text()) for k in ("seconds", "stage", "outputs"))
    record = proj / "data" / "timings" / "synth" / "timing.json"
    rec = json.loads(record.read_text())
    assert rec["stage"] == "synth" and rec["seconds"] >= 0 and rec["triples"] == N
    assert rec["outputs"] == {f"data/synth/{n}": file_hash(synth / n) for n in names}
    lock = (proj / "synth" / "dvc.lock").read_text()
    record.unlink()
    assert "Running stage 'synth/dvc.yaml:synth'" in _run(["dvc", "repro", "-f", "synth/dvc.yaml"], proj)
    assert record.exists()  # written again by the re-run ...
    assert (proj / "synth" / "dvc.lock").read_text() == lock  # ... which changed no output's hash


def test_ingest_through_the_triples_loader(proj):
    _params(proj, dataset="triples", triples={"path": "data/synth/triples.tsv",
                                              "questions": "data/synth/questions.jsonl"})
    _run([sys.executable, "-m", "stages.ingest"], proj)
    ing = proj / "data" / "ingest"
    assert pq.read_table(ing / "triples.parquet").num_rows == N
    q = pq.read_table(proj / "data" / "quarantine" / "ingest.parquet").to_pylist()
    assert len(q) == BAD and all(Path(r["table"]).name == "triples.tsv" for r in q)
    assert sum(r["reason"] == "duplicate triple" for r in q) == BAD // 3
    ents = pq.read_table(ing / "entities.parquet").to_pydict()
    name = dict(zip(ents["entity_id"], ents["name"]))
    lines = (proj / "data" / "synth" / "questions.jsonl").read_text().splitlines()
    src = {q["id"]: q for q in map(json.loads, lines)}
    rows = pq.read_table(ing / "questions.parquet").to_pylist()
    assert len(rows) == QUESTIONS
    for r in rows:  # every answer resolved to an entity whose name is the generated answer
        assert sorted(name[i] for i in r["answer_ids"]) == src[r["question_id"]]["answers"]
        assert [name[i] for i in r["topic_ids"]] == src[r["question_id"]]["topic_entities"]


def test_ingest_through_the_jsonl_loader(proj):
    _params(proj, dataset="jsonl", jsonl={"path": "data/synth/questions_graphs.jsonl"})
    _run([sys.executable, "-m", "stages.ingest"], proj)
    ing = proj / "data" / "ingest"
    t = pq.read_table(ing / "triples.parquet").to_pydict()
    assert set(t["graph_id"]) == {r["question_id"] for r in pq.read_table(ing / "questions.parquet").to_pylist()}
    assert pq.read_table(proj / "data" / "quarantine" / "ingest.parquet").num_rows == 0
    assert len(pq.read_table(ing / "questions.parquet").to_pylist()) == QUESTIONS


def test_retrieve_stage_with_the_duckdb_store(proj):
    _params(proj, dataset="triples", triples={"path": "data/synth/triples.tsv",
                                              "questions": "data/synth/questions.jsonl"})
    for stage in ("ingest", "validate", "index"):
        _run([sys.executable, "-m", f"stages.{stage}"], proj)
    got = {}
    for store in ("duckdb", "memory"):
        _run([sys.executable, "-m", "stages.retrieve", "--set", "retrieve.method=lego", "--set",
              "retrieve.lego={preset: lego-00}", "--set", f"retrieve.store={store}"], proj)
        got[store] = pq.read_table(proj / "data" / "retrieve" / "retrieved.parquet").to_pylist()
    assert len(got["duckdb"]) == QUESTIONS
    assert got["duckdb"] == got["memory"]  # retrieved.parquet holds no wall time (not even LEGO's per stage)
    assert sum(len(r["triple_heads"]) for r in got["duckdb"]) > 0
    assert list((proj / ".kgrag_cache" / "duckstore").glob("adjacency-*.duckdb"))  # the sidecar was built
