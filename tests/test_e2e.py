"""End-to-end: the real DVC pipeline (real DuckDB, MiniLM, SmolLM2) on a small real MetaQA sample.

Runs in a copy of the repository: `dvc repro` from scratch, then again (nothing runs), then a
generation-only param change (retrieve is not recomputed, and its output is byte-identical).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.conftest import METAQA, ROOT

pytestmark = pytest.mark.e2e
SAMPLE = 12


def _run(cmd: list[str], cwd: Path) -> str:
    # The project's own Prefect home and result store, not the test process's.
    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_HOME", "PREFECT_LOCAL_STORAGE_PATH")}
    env["PATH"] = f"{Path(os.sys.executable).parent}:{os.environ['PATH']}"
    p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=1500)
    out = p.stdout + p.stderr
    assert p.returncode == 0, f"{' '.join(cmd)} failed:\n{out[-4000:]}"
    return out


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    dst = tmp_path_factory.mktemp("e2e") / "proj"
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.split()
    for f in files:
        src = ROOT / f
        if src.is_file() and not f.startswith(("reports/", "data/")):
            (dst / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst / f)
    params = yaml.safe_load((dst / "params.yaml").read_text())
    params["data"]["sample"] = SAMPLE
    params["data"]["path"] = str(METAQA)
    params["generate"]["max_tokens"] = 24
    params["generate"]["shard_size"] = 6
    params["retrieve"]["shard_size"] = 6
    (dst / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    _run(["git", "init", "-q"], dst)
    _run(["git", "add", "-A"], dst)
    _run(["git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "init"], dst)
    return dst


@pytest.fixture(scope="module")
def first_run(project: Path) -> str:
    return _run(["dvc", "repro"], project)


def test_metrics_fields_and_ranges(project, first_run):
    m = json.loads((project / "reports" / "metrics.json").read_text())
    assert m["questions"] == SAMPLE
    for k in ("hit_at_1", "hit_any", "em", "precision", "recall", "f1", "retrieval_recall"):
        assert 0.0 <= m[k] <= 1.0, k
    assert m["hit_at_1"] <= m["hit_any"] + 1e-9 or m["hit_at_1"] <= 1.0
    assert m["retrieval_recall"] > 0.3  # PCST on 2-hop neighbourhoods holds many answers
    assert m["context_triples_mean"] > 0 and m["context_tokens_mean"] > 50
    assert m["llm_calls_per_question"] >= 1 and m["failed"] == 0
    assert set(m["stage_seconds"]) >= {"ingest", "validate", "index", "retrieve", "generate"}
    report = (project / "reports" / "report.md").read_text()
    assert "Hit@1" in report and "figures/recall_vs_context.png" in report
    png = project / "reports" / "figures" / "recall_vs_context.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    import pyarrow.parquet as pq

    preds = pq.read_table(project / "reports" / "predictions.parquet").to_pylist()
    assert len(preds) == SAMPLE and all(p["prediction"] for p in preds)
    assert {"question", "gold", "prediction", "retrieved_triples", "hit_at_1", "f1"} <= set(preds[0])


def test_repro_again_runs_nothing(project, first_run):
    out = _run(["dvc", "repro"], project)
    assert "Running stage" not in out, out


def test_generation_change_keeps_retrieval(project, first_run):
    retrieved = project / "data" / "retrieve" / "retrieved.parquet"
    before = _sha(retrieved)
    gen_before = json.loads((project / "data" / "generate" / "timing.json").read_text())
    params = yaml.safe_load((project / "params.yaml").read_text())
    params["generate"]["max_tokens"] = 16
    (project / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    out = _run(["dvc", "repro"], project)
    assert "Running stage 'generate'" in out and "Running stage 'evaluate'" in out
    for stage in ("ingest", "validate", "index", "retrieve"):
        assert f"Running stage '{stage}'" not in out, stage
    assert _sha(retrieved) == before
    gen_after = json.loads((project / "data" / "generate" / "timing.json").read_text())
    assert gen_after["cached"] == 0 and gen_before["cached"] == 0  # new sampling params: new calls


def test_ask_answers_from_the_graph(project, first_run):
    out = _run(["kgrag", "ask", "who directed the movies starred by [Al Pacino]", "--show", "5"], project)
    assert "topic entities (named in the question): Al Pacino" in out
    assert "retrieved" in out and "starred_actors" in out
    assert "LLM calls:" in out and "tokens_in=" in out
    assert "\nanswer: " in out
