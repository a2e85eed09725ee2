"""The tune_answer_scorer stage on a label task whose train file brings a graph per question (ExplaGraphs' shape): the
training rows are retrieved from the split's own graphs, not from the evaluated KG, which does not hold them (before,
every such row's prompt had no facts). A real DuckDB file, the real MiniLM index and the real GGUF tokenizer; tiny
files written here."""

from __future__ import annotations

from pathlib import Path

import pytest

from kgrag.params import load
from kgrag.registry import LOADERS
from tests.conftest import ROOT, need

TRAIN = [
    ("Cannabis should be legal.", "It is not a bad thing.", "support",
     "(cannabis; capable of; relaxing people)(relaxing people; is a; good thing)"),
    ("Women should not be in combat.", "Women and men have the same rights.", "counter",
     "(women and men; has property; same rights)(same rights; capable of; serving in combat)"),
    ("Zoos should be banned.", "Zoos protect endangered species.", "counter",
     "(zoos; capable of; protecting species)(protecting species; is a; good thing)"),
]
DEV = [("Homework should be banned.", "Homework teaches discipline.", "counter",
        "(homework; capable of; teaching discipline)")]


def _write(folder: Path, name: str, rows) -> None:
    (folder / f"{name}.tsv").write_text("".join("\t".join(r) + "\n" for r in rows))


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A params file on the tiny ExplaGraphs files, the dev split validated as the evaluated questions."""
    from kgrag import io

    data = tmp_path / "explagraphs"
    data.mkdir()
    _write(data, "train", TRAIN)
    _write(data, "dev", DEV)
    params = load(ROOT / "params.yaml", overrides=["data.dataset=explagraphs", f"data.input={data}", f"data.explagraphs.path={data}",
                                                     "data.explagraphs.split=dev", "tune.split=train",
                                                     "retrieve.relpath.plan=null"])
    dev = LOADERS.get("explagraphs").impl(path=str(data), split="dev")
    monkeypatch.chdir(tmp_path)
    evaluated = tmp_path / "questions.parquet"
    io.write_parquet(evaluated, dev.questions)
    return params, evaluated, tmp_path


def test_rows_of_a_split_with_its_own_graphs_show_those_graphs(project):
    from llama_cpp import Llama

    from kgrag.experiment import Experiment, Files
    from kgrag.kg.heldout import brings_graphs, held_out_split
    from kgrag.experiment import own_graphs_experiment
    from kgrag.llm.backends.llamacpp import packaged_gguf
    from kgrag.tune.rows import build_rows

    params, evaluated, root = project
    tables, qs, note = held_out_split(params, None, evaluated=evaluated, what="tune", split="train")
    assert tables is not None and brings_graphs(tables) and len(qs) == len(TRAIN) and "train split" in note
    exp = own_graphs_experiment(Experiment(params, Files(db=str(root / "none.duckdb"))), tables, root / "cache")
    tok = Llama(model_path=str(packaged_gguf()), vocab_only=True, verbose=False)
    rows = build_rows(exp=exp, questions=qs, tokenizer=tok, paths=2, max_candidates=8)
    assert len(rows) == len(TRAIN)
    by_text = {q.question_id: q for q in qs}
    for r in rows:
        q = by_text[r["question_id"]]
        _, _, stance, graph = TRAIN[[t[0] in q.text for t in TRAIN].index(True)]
        prompt = tok.detokenize(r["prompt"]).decode()
        heads = [t.split(";")[0].strip() for t in graph.strip("()").split(")(")]
        assert all(h in prompt for h in heads), (heads, prompt[-400:])  # the question's own graph is in its prompt
        assert r["names"] == ["support", "counter"] and r["gold"] == [n == stance for n in r["names"]]
    # stored once under the tables' hash: a second call reads it
    again = own_graphs_experiment(Experiment(params, Files(db=str(root / "none.duckdb"))), tables, root / "cache")
    assert again.files.db == exp.files.db and len(list((root / "cache").iterdir())) == 1


def test_a_split_over_the_evaluated_kg_is_not_taken_for_own_graphs():
    from kgrag.kg.heldout import brings_graphs

    metaqa = ROOT.parent / "shared" / "data" / "metaqa"
    need(metaqa.exists(), "MetaQA data in ../shared/data")
    assert not brings_graphs(LOADERS.get("metaqa").impl(path=str(metaqa), hops=1, split="dev", sample=3, seed=0))
