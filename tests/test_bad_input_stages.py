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


@pytest.mark.slow
def test_broken_files_through_ingest_validate_and_report(tmp_path):
    _params(tmp_path)
    r = _stage("ingest", tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    q = pq.read_table(tmp_path / "data" / "quarantine" / "ingest.parquet").to_pylist()
    by_file = {}
    for row in q:
        by_file.setdefault(Path(row["table"]).name, []).append((row["row"], row["reason"]))
    tsv = dict(by_file["triples_bad.tsv"])
    # short line, extra field, blank line (counted, not lost), empty field, duplicate of line 1
    assert set(tsv) == {2, 3, 4, 5, 6}
    assert "duplicate" in tsv[6] and tsv[4] == "blank line"
    jl = dict(by_file["questions_bad.jsonl"])
    assert {2, 3, 4, 5, 6} <= set(jl)  # bad JSON, no answers, empty answers, absent topic, duplicate id
    assert "JSON" in jl[2] or "json" in jl[2]
    # the absent topics' questions (Nowhere; Top Gun, not in this KG) are recorded, and kept (no topic id: a
    # miss), and ingest says so
    assert jl[5].endswith("(kept with no topic entity, scored as a miss)") and "'Top Gun'" in jl[10]
    assert "2 of them questions kept with no topic entity" in r.stdout
    kept = pq.read_table(tmp_path / "data" / "ingest" / "questions.parquet").to_pylist()
    assert {x["question_id"]: x["topic_ids"] for x in kept if x["question_id"] in ("q5", "q10")} == {"q5": [],
                                                                                                   "q10": []}
    good = pq.read_table(tmp_path / "data" / "ingest" / "triples.parquet").num_rows
    assert good >= 3  # the valid lines went on

    r = _stage("validate", tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    summary = json.loads((tmp_path / "data" / "validated" / "summary.json").read_text())
    assert summary["ingest_quarantined"] == len(q)
    reasons = summary["quarantine_reasons"]
    assert sum(x["rows"] for x in reasons if x["stage"] == "ingest") == len(q)

    from kgrag.reporting.report import render

    md = render(metrics={"questions": 0, "setup": {}}, rows=[], figure="f.png", validation=summary, examples=0)
    assert "Quarantined rows by reason" in md and reasons[0]["reason"] in md


@pytest.mark.slow
def test_every_dropped_line_is_counted_and_control_characters_and_long_questions_are_quarantined(tmp_path):
    """A blank line, a line of whitespace-only fields, a NUL inside a name (raw, and as a JSON escape in a
    question) and a question longer than data.max_question_chars: each dropped line or row has a quarantine row
    naming its reason (the limit named for the long one); the rest goes on, and ingest's counts add up."""
    kg = tmp_path / "kg.tsv"
    kg.write_bytes(b"Heat\tdirected_by\tMichael Mann\n\n \t \t \nHe\x00at\tstarred_actors\tAl Pacino\n"
                   b"Top Gun\trelease_year\t1986\n")
    qs = tmp_path / "q.jsonl"
    rows = [{"id": "ok", "question": "who directed [Heat]", "topic_entities": ["Heat"], "answers": ["Michael Mann"]},
            {"id": "nul", "question": "who directed [He\u0000at]", "topic_entities": ["Heat"],
             "answers": ["Michael Mann"]},
            {"id": "long", "question": "who directed [Heat] " + "x" * 300, "topic_entities": ["Heat"],
             "answers": ["Michael Mann"]},
            {"id": "outside", "question": "year of [Top Gun]", "topic_entities": ["Top Gun"], "answers": ["1999"]}]
    qs.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    _params(tmp_path, triples={"path": str(kg), "questions": str(qs)}, max_question_chars=100)
    r = _stage("ingest", tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    q = pq.read_table(tmp_path / "data" / "quarantine" / "ingest.parquet").to_pylist()
    reasons = {(Path(x["table"]).name, x["row"]): x["reason"] for x in q}
    assert reasons[("kg.tsv", 2)] == "blank line"
    assert reasons[("kg.tsv", 3)] == "blank line (whitespace only)"
    assert reasons[("kg.tsv", 4)] == "control character U+0000 at column 3"
    assert "control character U+0000" in reasons[("questions", 1)]
    assert reasons[("questions", 2)] == "question of 320 characters is longer than data.max_question_chars=100"
    assert len(q) == 5, reasons
    ingest = pq.read_table(tmp_path / "data" / "ingest" / "triples.parquet")
    kept = pq.read_table(tmp_path / "data" / "ingest" / "questions.parquet").column("question_id").to_pylist()
    assert ingest.num_rows == 2 and kept == ["ok", "outside"]  # 5 lines = 2 triples + 3 quarantined
    assert "5 lines or rows quarantined" in r.stdout and "ingest.parquet" in r.stdout and len(r.stdout) < 2000
    # the question whose answer is not in the KG is no bad row: validate keeps it, flagged, and does not fail
    r = _stage("validate", tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    v = pq.read_table(tmp_path / "data" / "validated" / "questions.parquet").to_pylist()
    assert {x["question_id"]: x["answerable"] for x in v} == {"ok": True, "outside": False}
    assert "1 of 2 have no gold answer in the KG" in r.stderr


def _output_hashes(project: Path) -> dict[str, str]:
    import hashlib

    data = project / "data"
    return {p.relative_to(data).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for folder in ("ingest", "validated", "quarantine") for p in sorted((data / folder).rglob("*"))
            if p.is_file() and not p.name.startswith("kg.duckdb")}


@pytest.mark.slow
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


@pytest.mark.slow
def test_a_failing_shard_prints_a_few_lines_not_tracebacks(tmp_path):
    """retrieve without its index: the shard task fails inside Prefect; the stage exits non-zero with the error's
    what and where in a few lines (no traceback, no parameter dump); KGRAG_TRACEBACK=1 brings the traceback."""
    _params(tmp_path)
    for stage in ("ingest", "validate"):
        assert _stage(stage, tmp_path).returncode == 0
    r = _stage("retrieve", tmp_path)
    assert r.returncode != 0
    err = [x for x in r.stderr.splitlines() if x.strip() and "Warning" not in x and "warn(" not in x]
    assert "Traceback" not in r.stderr and any(x.startswith("error: ") for x in err), r.stderr[-3000:]
    assert any("meta.json" in x and "dvc repro index" in x for x in err)  # what is missing, and the fix
    assert any(x.strip().startswith("at ") for x in err)
    assert len(err) <= 12 and len(r.stderr) < 4000, r.stderr
    import os

    full = subprocess.run([sys.executable, "-m", "stages.retrieve"], cwd=tmp_path, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "KGRAG_TRACEBACK": "1"}, timeout=600)
    assert full.returncode != 0 and "Traceback" in full.stderr
