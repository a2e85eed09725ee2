"""Bad input through the real stages: broken files end in quarantine with file, line and reason, the counts
reach the validate summary and the report; invalid params stop a stage before it does any work."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from tests.conftest import ROOT

BAD = ROOT / "tests" / "data" / "bad"


def _stage(name: str, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", f"stages.{name}", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)


def _params(tmp: Path, **data) -> Path:
    p = yaml.safe_load((ROOT / "params.yaml").read_text())
    p["data"] = {"dataset": "triples", "sample": 0, "seed": 0,
                 "triples": {"path": str(BAD / "triples_bad.tsv"), "questions": str(BAD / "questions_bad.jsonl")},
                 **data}
    p["validate"]["max_bad_fraction"] = 1.0
    path = tmp / "params.yaml"
    path.write_text(yaml.safe_dump(p, sort_keys=False))
    return path


def test_broken_files_through_ingest_validate_and_report(tmp_path):
    _params(tmp_path)
    r = _stage("ingest", tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    q = pq.read_table(tmp_path / "data" / "quarantine" / "ingest.parquet").to_pylist()
    by_file = {}
    for row in q:
        by_file.setdefault(Path(row["table"]).name, []).append((row["row"], row["reason"]))
    tsv = dict(by_file["triples_bad.tsv"])
    assert set(tsv) == {2, 3, 5, 6}  # short line, extra field, empty field, duplicate of line 1
    assert "duplicate" in tsv[6]
    jl = dict(by_file["questions_bad.jsonl"])
    assert {2, 3, 4, 5, 6} <= set(jl)  # bad JSON, no answers, empty answers, absent topic, duplicate id
    assert "JSON" in jl[2] or "json" in jl[2]
    good = pq.read_table(tmp_path / "data" / "ingest" / "triples.parquet").num_rows
    assert good >= 3  # the valid lines went on

    r = _stage("validate", tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    summary = json.loads((tmp_path / "data" / "validated" / "summary.json").read_text())
    assert summary["ingest_quarantined"] == len(q)
    reasons = summary["quarantine_reasons"]
    assert sum(x["rows"] for x in reasons if x["stage"] == "ingest") == len(q)

    from kgrag.report import render

    md = render(metrics={"questions": 0, "setup": {}}, rows=[], figure="f.png", validation=summary, examples=0)
    assert "Quarantined rows by reason" in md and reasons[0]["reason"] in md


def _output_hashes(project: Path) -> dict[str, str]:
    import hashlib

    data = project / "data"
    return {p.relative_to(data).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for folder in ("ingest", "validated", "quarantine") for p in sorted((data / folder).rglob("*"))
            if p.is_file() and not p.name.startswith("kg.duckdb")}


def test_ingest_and_validate_write_the_same_bytes_on_a_rerun(tmp_path):
    """The DVC outputs of ingest and validate (Parquet tables, quarantine, summary) are byte-identical across
    runs from scratch, so dvc.lock does not change; the DuckDB files are derived and ignored by DVC."""
    import shutil

    _params(tmp_path)
    runs = []
    for _ in range(2):
        shutil.rmtree(tmp_path / "data", ignore_errors=True)
        for stage in ("ingest", "validate"):
            r = _stage(stage, tmp_path)
            assert r.returncode == 0, r.stderr[-2000:]
        runs.append(_output_hashes(tmp_path))
    assert runs[0] == runs[1]
    assert {f"validated/{n}.parquet" for n in ("entities", "relations", "triples", "questions")} <= set(runs[0])
    assert (tmp_path / "data" / "validated" / "kg.duckdb").is_file()  # built for the stages downstream


@pytest.mark.parametrize("change,expect", [
    (("data", "sampel", 5), "sampel"),                                    # unknown key
    (("data", "sample", "many"), "data.sample"),                          # wrong type
    (("retrieve", "method", "pcts"), "pcst"),                             # unknown module: lists the choices
    (("generate", "backend", "gpt9"), "llamacpp"),
])
def test_invalid_params_stop_the_stage_before_any_work(tmp_path, change, expect):
    p = yaml.safe_load((ROOT / "params.yaml").read_text())
    section, key, value = change
    p[section][key] = value
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(p, sort_keys=False))
    r = _stage("ingest", tmp_path)
    assert r.returncode == 2
    assert "params.yaml:" in r.stderr and expect in r.stderr, r.stderr
    assert not (tmp_path / "data").exists()  # nothing was written
