"""Fine-tuned sentence-transformer: triplet mining, the margin loss, a real training run, the scorer loading it."""

from __future__ import annotations

import numpy as np
import pytest

from kgrag.index.embed import EmbeddingIndex, encode
from kgrag.retrieval.finetune import Triplet, finetune_st, margin_loss, pair_accuracy, question_triplets, training_triplets
from kgrag.retrieval.lego import SCORERS
from kgrag.retrieval.lego.types import Context
from kgrag.registry import LOADERS
from kgrag.kg.store import KGStore, questions_from_table
from kgrag.types import Question
from tests.conftest import METAQA

MODEL = "all-MiniLM-L6-v2"
QUESTION = "who directed the movies starred by Al Pacino"


def _q(kg, topic: str, answers: list[str]) -> Question:
    return Question("q", QUESTION, kg.ids_of([topic]), kg.ids_of(answers))


def test_triplets_positive_paths_end_at_answers_and_negatives_do_not(kg):
    q = _q(kg, "Al Pacino", ["Michael Mann", "Martin Scorsese"])
    got = question_triplets(kg=kg, question=q, hops=2, max_edges=100, per_question=3,
                            rng=np.random.default_rng(0))
    paths = [t for t in got if t.kind == "path"]
    edges = [t for t in got if t.kind == "edge"]
    assert paths and edges
    for t in paths:
        assert t.positive.startswith("Al Pacino") and t.negative.startswith("Al Pacino")
        assert t.positive.endswith(("Michael Mann", "Martin Scorsese"))
        assert not t.negative.endswith(("Michael Mann", "Martin Scorsese"))
        assert t.positive.count("->") + t.positive.count("<-") == t.negative.count("->") + t.negative.count("<-")
    assert all(t.positive != t.negative for t in edges)
    again = question_triplets(kg=kg, question=q, hops=2, max_edges=100, per_question=3,
                              rng=np.random.default_rng(0))
    assert again == got


def test_triplets_empty_when_nothing_to_learn(kg):
    rng = np.random.default_rng(0)
    kw = dict(kg=kg, hops=2, max_edges=100, per_question=2, rng=rng)
    assert question_triplets(question=Question("q", "x", (), kg.ids_of(["Heat"])), **kw) == []  # no topic
    assert question_triplets(question=Question("q", "x", kg.ids_of(["Heat"]), ()), **kw) == []  # no answer
    # answer in another component: no positive path
    assert question_triplets(question=_q(kg, "Island A", ["Heat"]), **kw) == []
    # every reachable node is an answer: no negative
    assert question_triplets(question=_q(kg, "Island A", ["Island B"]), **kw) == []


def test_margin_loss_is_the_papers_hinge_on_cosines():
    from kgrag.retrieval.finetune import load_trainable

    model = load_trainable(MODEL)
    model.eval()
    batch = [Triplet(QUESTION, "Heat directed by Michael Mann", "Top Gun release year 1986", "edge"),
             Triplet(QUESTION, "Top Gun release year 1986", "Heat directed by Michael Mann", "edge")]
    import torch

    with torch.no_grad():
        got = float(margin_loss(model, batch, 0.3))
    q, a, b = encode([QUESTION, batch[0].positive, batch[0].negative], model=MODEL)
    s_a, s_b = float(q @ a), float(q @ b)
    want = (max(0.0, 0.3 - s_a + s_b) + max(0.0, 0.3 - s_b + s_a)) / 2
    assert got == pytest.approx(want, abs=1e-5)


@pytest.fixture(scope="module")
def metaqa_triplets():
    """Triplets mined from 60 real MetaQA 2-hop dev questions over the real KB."""
    import tempfile

    from kgrag.kg.duckdb_io import write_duckdb as write

    tabs = LOADERS.get("metaqa").impl(path=str(METAQA), hops=2, split="dev", sample=60, seed=1)
    path = f"{tempfile.mkdtemp()}/kg.duckdb"
    write(path, {"entities": tabs.entities, "relations": tabs.relations, "triples": tabs.triples,
                 "questions": tabs.questions})
    kg = KGStore(path)
    return training_triplets(kg=kg, questions=questions_from_table(tabs.questions), hops=2, max_edges=5000,
                             per_question=1, seed=0)


@pytest.mark.slow
def test_real_finetuning_separates_the_training_pairs_and_the_scorer_loads_it(metaqa_triplets, tmp_path, kg):
    train = metaqa_triplets
    assert len(train) >= 60
    model, history, seconds = finetune_st(base_model=MODEL, train=train, val=train[:40], margin=0.2, epochs=2,
                                          batch_size=16, lr=5e-5, warmup=0.1, seed=0)
    assert [h["epoch"] for h in history] == [0, 1, 2]
    assert len(seconds) == 2 and all(s > 0 for s in seconds) and not any("seconds" in h for h in history)
    assert history[-1]["mean_gap"] > history[0]["mean_gap"]
    assert pair_accuracy(model, train)["pair_accuracy"] >= history[0]["pair_accuracy"]
    folder = tmp_path / "st_model"
    model.save(str(folder))

    # the st scorer with params.model = the saved folder scores like the trained model, unlike the base one
    index = EmbeddingIndex(model=MODEL, entity_vectors=np.zeros((1, 384), np.float32),
                           relation_vectors=np.zeros((1, 384), np.float32))
    t = train[0]
    ctx = Context(question=t.question, query_vec=index.encode([t.question])[0], kg=kg, index=index)
    entry = SCORERS.get("st")
    tuned = entry.impl(query=t.question, docs=[t.positive, t.negative],
                       params=entry.params(model=str(folder)), ctx=ctx)
    base = entry.impl(query=t.question, docs=[t.positive, t.negative], params=entry.params(), ctx=ctx)
    q, p, n = model.encode([t.question, t.positive, t.negative], normalize_embeddings=True)
    assert tuned == pytest.approx([float(q @ p), float(q @ n)], abs=1e-4)
    assert not np.allclose(tuned, base, atol=1e-3)


@pytest.mark.slow
def test_training_is_deterministic_under_a_seed(metaqa_triplets):
    small = metaqa_triplets[:32]
    a = finetune_st(base_model=MODEL, train=small, val=small, margin=0.2, epochs=1, batch_size=16, lr=5e-5,
                    warmup=0.0, seed=3)[1]
    b = finetune_st(base_model=MODEL, train=small, val=small, margin=0.2, epochs=1, batch_size=16, lr=5e-5,
                    warmup=0.0, seed=3)[1]
    assert a[-1]["train_loss"] == pytest.approx(b[-1]["train_loss"], rel=1e-6)
    assert a[-1]["mean_gap"] == pytest.approx(b[-1]["mean_gap"], rel=1e-6)


def test_missing_finetuned_model_names_the_stage(kg):
    entry = SCORERS.get("st")
    index = EmbeddingIndex(model=MODEL, entity_vectors=np.zeros((1, 384), np.float32),
                           relation_vectors=np.zeros((1, 384), np.float32))
    ctx = Context(question=QUESTION, query_vec=index.encode([QUESTION])[0], kg=kg, index=index)
    with pytest.raises(FileNotFoundError, match="dvc repro finetune/dvc.yaml"):
        entry.impl(query=QUESTION, docs=["x"], params=entry.params(model="no/such/st_model"), ctx=ctx)


@pytest.mark.slow
def test_stage_outputs_hold_no_wall_time_and_a_rerun_writes_the_same_reports(tmp_path, monkeypatch):
    """stages.finetune_path_scorer twice on a small real MetaQA split: ``reports/finetune.json`` and ``history.json``
    (DVC outputs) are the same bytes and hold no seconds; the wall times are in the run record
    (data/timings/finetune_path_scorer/timing.json, no DVC output), which names the hash of each file it describes."""
    import json

    import yaml

    from kgrag import io
    from stages import finetune_path_scorer as stage
    from tests.conftest import ROOT, metaqa_sample_store

    metaqa_sample_store(tmp_path / "data" / "validated", sample=2)
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["data"].update(dataset="metaqa", path=str(METAQA), input=str(METAQA), sample=2)
    params["finetune"].update(questions=10, per_question=1, max_neighbourhood_edges=300, epochs=1, batch_size=8)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    monkeypatch.chdir(tmp_path)
    outs = [io.REPORTS / "finetune.json", io.FINETUNE / "history.json"]
    runs = []
    for _ in range(2):
        stage.main([])
        runs.append([f.read_bytes() for f in outs])
    assert runs[0] == runs[1]
    report, history = (json.loads(b) for b in runs[1])
    assert report["train_triplets"] > 0 and "seconds" not in report
    assert [h["epoch"] for h in history] == [0, 1] and not any("seconds" in h for h in history)
    assert sorted(p.name for p in io.FINETUNE.iterdir()) == ["history.json", "st_model"]
    rec = json.loads((io.TIMINGS / "finetune_path_scorer" / "timing.json").read_text())
    assert rec["stage"] == "finetune_path_scorer" and rec["seconds"] > 0 and len(rec["epoch_seconds"]) == 1
    assert rec["outputs"] == {f.as_posix(): io.file_hash(f) for f in [*outs, io.ST_MODEL / "model.safetensors"]}
