"""End-to-end: the real DVC pipeline on a small real ExplaGraphs sample (``data.dataset: explagraphs``).

Every row carries its own graph and a support / counter label: ingest → validate → index → retrieve (the
default retriever, over each row's own graph) → generate (the embedded SmolLM2) → evaluate (accuracy) →
report, in a copy of the repository whose ExplaGraphs input is a copy of the real file, so that an edit of
it can be shown to make ``dvc status`` report the ingest stage changed.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import duckdb
import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml

from tests.conftest import SHARED, copy_repo, run, need

pytestmark = pytest.mark.e2e

EXPLA = SHARED / "data" / "explagraphs"
SAMPLE = 8
LABELS = ("support", "counter")


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    need((EXPLA / "dev.tsv").exists(), "real ExplaGraphs data not found")
    root = tmp_path_factory.mktemp("e2e-explagraphs")
    data = root / "explagraphs"
    shutil.copytree(EXPLA, data)
    for f in (data, *data.iterdir()):  # the shared copy is read-only; this one is edited below
        f.chmod(0o755 if f.is_dir() else 0o644)
    dst = copy_repo(root / "proj", sample=SAMPLE, shard_size=4)
    params = yaml.safe_load((dst / "params.yaml").read_text())
    params["data"].update({"dataset": "explagraphs", "explagraphs": {"path": str(data), "split": "dev"},
                           "input": str(data), "seed": 3})
    (dst / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    for cmd in (["git", "init", "-q"], ["git", "add", "-A"],
                ["git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "init"]):
        run(cmd, dst)
    run(["dvc", "repro"], dst)
    return dst


def _label(prediction: str) -> str | None:
    """The test's own reading of a prediction, by the rule README states: the answers (split on '|' and lines)
    that are a label decide if they name one; else the one label the text names as a word (or -s/-ed/-ing)."""
    pieces = {" ".join(re.findall(r"[a-z]+", x.lower())) for x in re.split(r"[|\n]", prediction)}
    exact = {lab for lab in LABELS if lab in pieces}
    if exact:
        return exact.pop() if len(exact) == 1 else None
    words = re.findall(r"[a-z]+", prediction.lower())
    named = {lab for lab in LABELS for w in words if w in (lab, lab + "s", lab + "ed", lab + "ing")}
    return named.pop() if len(named) == 1 else None


def test_accuracy_is_computed_from_the_predictions(project):
    m = json.loads((project / "reports" / "metrics.json").read_text())
    assert m["task"] == "label" and m["setup"]["dataset"] == "explagraphs" and m["setup"]["task"] == "label"
    assert m["questions"] == SAMPLE and m["failed"] == 0
    preds = pq.read_table(project / "reports" / "predictions.parquet").to_pylist()
    assert len(preds) == SAMPLE and all(p["prediction"].strip() for p in preds)
    assert all(p["choices"] == list(LABELS) and p["gold"][0] in LABELS for p in preds)
    mine = [_label(p["prediction"]) for p in preds]
    assert mine == [p["label"] for p in preds]  # the pipeline's parse agrees with this independent one
    acc = sum(lab == p["gold"][0] for lab, p in zip(mine, preds)) / SAMPLE
    assert m["accuracy"] == pytest.approx(acc)
    assert m["label_unparseable"] == sum(lab is None for lab in mine)
    assert sum(m["label_counts"].values()) == SAMPLE
    report = (project / "reports" / "report.md").read_text()
    assert "Accuracy (label task" in report and f"{m['accuracy']:.3f}" in report


def test_each_row_was_answered_from_its_own_graph(project):
    con = duckdb.connect(str(project / "data" / "validated" / "kg.duckdb"), read_only=True)
    try:
        graph_of = {}
        for h, r, t, g in con.execute("SELECT head, relation, tail, graph_id FROM triples").fetchall():
            graph_of.setdefault(g, set()).add((h, r, t))
        questions = {q: g for q, g in con.execute("SELECT question_id, graph_id FROM questions").fetchall()}
        n_ent = con.execute("SELECT count(*) FROM entities").fetchone()[0]
        n_rel = con.execute("SELECT count(*) FROM relations").fetchone()[0]
    finally:
        con.close()
    assert None not in graph_of and len(questions) == SAMPLE  # no global KG: every triple is one row's
    assert all(questions[q] == q for q in questions)
    retrieved = pq.read_table(project / "data" / "retrieve" / "retrieved.parquet").to_pylist()
    assert len(retrieved) == SAMPLE
    for row in retrieved:
        got = set(zip(row["triple_heads"], row["triple_relations"], row["triple_tails"]))
        mine = graph_of[questions[row["question_id"]]]
        assert got and got <= mine, row["question_id"]
        # what was searched was the row's graph, not the union of all rows' graphs
        assert row["neighbourhood_edges"] <= len(mine)
    # the index embeds every relation; an entity's name is encoded when first read (index.entities: lazy), and
    # every node of every per-question graph reads as a unit vector through the KG
    index = project / "data" / "index"
    rel_ids = set(pq.read_table(index / "relations.parquet").column("id").to_pylist())
    assert rel_ids == set(range(n_rel)) and not (index / "entities.parquet").exists()
    assert json.loads((index / "meta.json").read_text())["entities"] == "lazy"
    from kgrag.index.embed import EmbeddingIndex
    from kgrag.kg.store import KGStore

    nodes = sorted({x for ts in graph_of.values() for h, _, t in ts for x in (h, t)})
    assert nodes and max(nodes) < n_ent
    vecs = EmbeddingIndex.load(index, "all-MiniLM-L6-v2", KGStore(project / "data" / "validated" / "kg.duckdb")
                               ).entity_vectors[nodes]
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-4)
    # the prompts held each row's graph triples
    m = json.loads((project / "reports" / "metrics.json").read_text())
    assert m["context_triples_mean"] > 0
    summary = json.loads((project / "data" / "validated" / "summary.json").read_text())
    assert summary["tables"]["questions"]["bad"] == 0  # label answers are not "answer not in the KG"


def test_dvc_status_notices_an_edited_explagraphs_input(project):
    params = yaml.safe_load((project / "params.yaml").read_text())
    tsv = Path(params["data"]["input"]) / "dev.tsv"
    assert "ingest" not in run(["dvc", "status", "ingest"], project)  # up to date after the repro
    with open(tsv, "a", encoding="utf-8") as f:
        f.write("\nDogs are loyal.\tDogs help people.\tsupport\t(dogs; capable of; help people)")
    out = run(["dvc", "status", "ingest"], project)
    assert "ingest" in out and "changed deps" in out and str(tsv.parent) in out, out


def test_dvc_status_notices_an_edited_triples_input(tmp_path):
    """Same check for the triples loader, whose KG file and questions file both lie under data.input."""
    data = tmp_path / "mykg"
    data.mkdir()
    (data / "kb.tsv").write_text("Heat\tdirected_by\tMichael Mann\nHeat\tstarred_actors\tAl Pacino\n")
    (data / "q.jsonl").write_text(json.dumps({"id": "q1", "question": "who directed [Heat]",
                                              "topic_entities": ["Heat"], "answers": ["Michael Mann"]}) + "\n")
    dst = copy_repo(tmp_path / "proj", sample=0, shard_size=4)
    params = yaml.safe_load((dst / "params.yaml").read_text())
    params["data"].update({"dataset": "triples", "input": str(data), "sample": 0,
                           "triples": {"path": str(data / "kb.tsv"), "questions": str(data / "q.jsonl")}})
    (dst / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    for cmd in (["git", "init", "-q"], ["git", "add", "-A"],
                ["git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "init"]):
        run(cmd, dst)
    run(["dvc", "repro", "ingest"], dst)
    assert "ingest" not in run(["dvc", "status", "ingest"], dst)
    with open(data / "q.jsonl", "a") as f:  # the questions file, not the KG file
        f.write(json.dumps({"id": "q2", "question": "who starred in [Heat]", "topic_entities": ["Heat"],
                            "answers": ["Al Pacino"]}) + "\n")
    out = run(["dvc", "status", "ingest"], dst)
    assert "changed deps" in out and str(data) in out, out
    out = run(["dvc", "repro", "ingest"], dst)
    assert "Running stage 'ingest'" in out
    assert pq.read_table(dst / "data" / "ingest" / "questions.parquet").num_rows == 2
