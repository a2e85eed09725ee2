"""The labelled relation-path plan from held-out questions that bring their own graphs (issue "Bring your own
benchmark", item 1): a RoG-format ``relplan.file`` (WebQSP / CWQ ship a train split in the format of their test
split) is read by the ``rog`` loader, stored apart from the evaluated KG, and each question is labelled in its own
graph; the plan then serves the evaluated questions' graphs, since the relation names are the benchmark's.
Real ingest, validate and relplan stages on tiny JSONL files, a real DuckDB file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kgrag.index.relplan import PlanModel, sequence_scores
from kgrag.kg.loaders.rog import load_rog
from kgrag.kg.store import KGStore
from tests.conftest import ROOT

NAT, BORN, IN = "people.person.nationality", "people.person.place_of_birth", "location.location.containedby"


def person(qid: str, who: str, country: str, city: str, elsewhere: str, text: str | None = None) -> dict:
    """A question asking ``who``'s nationality, whose graph also holds a 2-hop path to another country (born in a
    city of ``elsewhere``): the label is the 1-hop nationality edge."""
    graph = [[who, NAT, country], [who, BORN, city], [city, IN, elsewhere], [country, "location.country.capital",
                                                                              f"{country} City"]]
    return {"id": qid, "question": text or f"what is the nationality of {who}", "answer": [country],
            "q_entity": [who], "a_entity": [country], "graph": graph}


TRAIN = [person("WebQTrn-0", "Ana Ruiz", "Spain", "Lyon", "France"),
         person("WebQTrn-1", "Bo Li", "China", "Boston", "United States"),
         person("WebQTrn-2", "Cem Aydin", "Turkey", "Berlin", "Germany", text="which country is Cem Aydin a citizen of"),
         # its answer is not in its graph: walked, nothing found, left unlabelled
         {**person("WebQTrn-3", "Dan Oz", "Israel", "Paris", "France"), "answer": ["Peru"], "a_entity": ["Peru"]}]
TEST = [person("WebQTest-0", "Eva Novak", "Czechia", "Vienna", "Austria"),
        person("WebQTest-1", "Femi Ade", "Nigeria", "London", "United Kingdom")]


def write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def stages(tmp_path: Path, monkeypatch, *extra: str) -> list[str]:
    from stages import ingest, validate

    my = tmp_path / "my"
    my.mkdir(exist_ok=True)
    write(my / "test.jsonl", TEST)
    write(my / "train.jsonl", TRAIN)
    monkeypatch.chdir(tmp_path)
    common = ["--params", str(ROOT / "params.yaml"), "-S", "data.dataset=rog", "-S", f"data.input={my}",
              "-S", f"data.rog.path={my / 'test.jsonl'}", "-S", "data.sample=0", *extra]
    ingest.main(common)
    validate.main(common)
    return common


def test_each_question_is_labelled_in_its_own_graph(tmp_path):
    """Golden: in its own graph the nationality edge explains the answer (recall 1, precision 1) and is the best
    label; the 2-hop path through the birthplace reaches another country. Another question's graph, which does not
    hold this topic, gives nothing."""
    from kgrag.kg.duckdb_io import write_duckdb

    tables = load_rog(path=str(write(tmp_path / "train.jsonl", TRAIN)), split="train")
    write_duckdb(tmp_path / "kg.duckdb", {"entities": tables.entities, "relations": tables.relations,
                                          "triples": tables.triples})
    kg = KGStore(tmp_path / "kg.duckdb")
    q = {r["question_id"]: r for r in tables.questions.to_pylist()}["WebQTrn-0"]
    got = sequence_scores(kg, q["topic_ids"], q["answer_ids"], None, graph_id="WebQTrn-0")
    assert got[((NAT, True),)] == (1.0, 1.0)
    assert ((BORN, True), (IN, True)) not in got  # reaches France, not Spain
    assert max(got, key=lambda k: got[k]) == ((NAT, True),)
    assert sequence_scores(kg, q["topic_ids"], q["answer_ids"], None, graph_id="WebQTrn-1") == {}


def test_relplan_learns_from_a_rog_file_of_its_own_graphs(tmp_path, monkeypatch):
    """The relplan stage with ``relplan.file`` in RoG's format: the three labelled questions train the plan with
    the nationality sequence (the fourth, whose answer its graph lacks, is left unlabelled); their graphs are
    stored apart (``.kgrag_cache/relplan/split-*``), not in the evaluated KG."""
    from stages import relplan

    common = stages(tmp_path, monkeypatch, "-S", f"relplan.file={tmp_path / 'my' / 'train.jsonl'}",
                    "-S", "relplan.source=labelled")
    relplan.main(common)
    plan = json.loads((tmp_path / "data" / "relplan" / "plan.json").read_text())
    assert plan["source"] == "labelled" and plan["questions"] == 4 and plan["labelled"] == 3, plan
    assert plan["label_answer_recall"] == 1.0 and plan["note"].startswith("from ")
    model = PlanModel.load(tmp_path / "data" / "relplan")
    assert [tuple(x) for x in model.labels] == [((NAT, True),)] * 3
    stored = list((tmp_path / ".kgrag_cache" / "relplan").glob("split-*/kg.duckdb"))
    assert len(stored) == 1 and not (stored[0].parent / "index").exists()  # a labelled plan needs no index
    evaluated = KGStore(tmp_path / "data" / "validated" / "kg.duckdb")
    assert "Ana Ruiz" not in set(evaluated.names(range(evaluated.num_entities)))


def test_a_rog_file_holding_the_evaluated_questions_is_refused(tmp_path, monkeypatch, capsys):
    """The evaluated file itself is refused by the params check (exit 2, the key named); a copy of it by the leak
    guard, which reads the file's questions as any other's: the stage stops with the count."""
    from stages import relplan

    with pytest.raises(SystemExit) as e:
        stages(tmp_path, monkeypatch, "-S", f"relplan.file={tmp_path / 'my' / 'test.jsonl'}")
    assert e.value.code == 2 and "is the evaluated questions file (data.rog.path)" in capsys.readouterr().err
    write(tmp_path / "my" / "copy.jsonl", TEST)
    common = stages(tmp_path, monkeypatch, "-S", f"relplan.file={tmp_path / 'my' / 'copy.jsonl'}")
    with pytest.raises(SystemExit, match=r"relplan: .*2 of the 2 evaluated questions"):
        relplan.main(common)


def test_tune_reads_the_same_file_and_refuses_to_train_on_nothing(tmp_path, monkeypatch, capsys):
    """The tune_answer_scorer stage takes the same RoG-format file through the same path (its questions retrieved from
    a store of their own graphs, with an index). Here each training graph holds its nationality edge alone, so the
    plan leaves each question one candidate, the gold one: no row has a wrong candidate to learn from, and the stage
    stops rather than write the base model under the tuned model's name. (With the birthplace path in the graphs, as
    the other tests have them, the second path's country is a wrong candidate and there is a row.)"""
    from stages import relplan, tune_answer_scorer

    common = stages(tmp_path, monkeypatch, "-S", f"relplan.file={tmp_path / 'my' / 'train.jsonl'}",
                    "-S", "tune.enabled=true", "-S", "tune.questions=3")
    write(tmp_path / "my" / "train.jsonl", [{**q, "graph": q["graph"][:1]} for q in TRAIN])
    relplan.main(common)
    with pytest.raises(SystemExit,
                       match=r"tune_answer_scorer: none of the 3 training questions gave a row to learn from"):
        tune_answer_scorer.main(common)
    assert "the questions' own graphs (4 triples) stored for retrieval" in capsys.readouterr().err
    assert not (tmp_path / "data" / "tune" / "model.gguf").exists()
