"""The ``rog`` loader (issue "Bring your own benchmark", item 2): RoG's WebQSP / CWQ question table, one row per
question with its own graph, as Parquet (one file or a folder of shards) and as JSONL, written here in the
layout of the ``rmanluo/RoG-webqsp`` dataset card; malformed rows quarantined, answers outside the graph kept;
and the real ingest and validate stages on it."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kgrag import schema as S
from kgrag.kg.loaders import rog
from kgrag.kg.loaders.common import LoaderInputError
from kgrag.kg.loaders.rog import load_rog
from kgrag.params import ParamsError, load
from tests.conftest import ROOT

# the dataset card's features (``choices``: always empty there, not read)
ROG = pa.schema([("id", pa.string()), ("question", pa.string()), ("answer", pa.list_(pa.string())),
                 ("q_entity", pa.list_(pa.string())), ("a_entity", pa.list_(pa.string())),
                 ("graph", pa.list_(pa.list_(pa.string()))), ("choices", pa.list_(pa.null()))])


def row(qid, question, q_entity, a_entity, graph, answer=None):
    return {"id": qid, "question": question, "answer": answer if answer is not None else a_entity,
            "q_entity": q_entity, "a_entity": a_entity, "graph": graph, "choices": []}


BIEBER = [["Justin Bieber", "people.person.sibling_s", "m.0gxnnwc"],
          ["m.0gxnnwc", "people.sibling_relationship.sibling", "Jaxon Bieber"],
          ["Justin Bieber", "people.person.nationality", "Canada"]]
GOOD = [
    row("WebQTest-0", "what is the name of justin bieber brother", ["Justin Bieber"], ["Jaxon Bieber"], BIEBER),
    # a_entity empty: the answer names stand in
    row("WebQTest-1", "what country is the grand bahama island in", ["Grand Bahama"], [],
        [["Grand Bahama", "location.location.containedby", "Bahamas"],
         ["Bahamas", "location.country.capital", "Nassau"]], answer=["Bahamas"]),
    # the answer is in no graph: kept, its name with a null id
    row("WebQTest-2", "what continent is canada on", ["Canada"], ["North America"],
        [["Canada", "location.location.containedby", "Americas"]]),
    # the answer is an entity of another row's graph, not of this one: kept, an id, not answerable
    row("WebQTest-3", "what is jaxon bieber's nationality", ["Jaxon Bieber"], ["Canada"],
        [["Jaxon Bieber", "people.person.parents", "Jeremy Bieber"]]),
]
# malformed rows a typed Parquet file can hold (their reasons)
BAD_PARQUET = [
    (row("WebQTest-4", "where is nassau", ["Nassau"], ["Bahamas"], [["Nassau", "location.location.containedby"]]),
     "graph[0]: expected [head, relation, tail] of 3 non-empty strings"),
    (row("WebQTest-0", "a second copy of an accepted id", ["Canada"], ["Canada"], []), "duplicate question id"),
    (row("WebQTest-5", "who is justin bieber", None, ["Justin Bieber"], BIEBER), "missing field(s): q_entity"),
    (row("WebQTest-6", "who knows", [], ["Canada"], BIEBER), "no topic entity"),
    (row("WebQTest-7", "no answer at all", ["Canada"], [], BIEBER, answer=[]), "no answers"),
]


def entity_names(kg, ids):
    names = dict(zip(kg.entities.column(S.ENTITY_ID).to_pylist(), kg.entities.column(S.NAME).to_pylist()))
    return [names[i] if i is not None else None for i in ids]


def graphs(kg) -> dict[str, set[tuple[str, str, str]]]:
    """graph_id -> its triples by name."""
    ent = dict(zip(kg.entities.column(S.ENTITY_ID).to_pylist(), kg.entities.column(S.NAME).to_pylist()))
    rel = dict(zip(kg.relations.column(S.RELATION_ID).to_pylist(), kg.relations.column(S.NAME).to_pylist()))
    t = kg.triples.to_pydict()
    out: dict[str, set] = {}
    for h, r, tl, g in zip(t[S.HEAD], t[S.RELATION], t[S.TAIL], t[S.GRAPH_ID]):
        out.setdefault(g, set()).add((ent[h], rel[r], ent[tl]))
    return out


def write_parquet(path: Path, rows: list[dict], row_group_size: int = 2) -> Path:
    pq.write_table(pa.Table.from_pylist(rows, schema=ROG), path, row_group_size=row_group_size)
    return path


def check_good(kg, ids=("WebQTest-0", "WebQTest-1", "WebQTest-2", "WebQTest-3")):
    """The four GOOD rows: ids, graphs, topics and answers as the rows give them."""
    q = {r[S.QUESTION_ID]: r for r in kg.questions.to_pylist()}
    assert list(q) == list(ids)
    by_graph = graphs(kg)
    want = {r["id"]: {tuple(t) for t in r["graph"]} for r in GOOD}
    for qid in ids:
        assert q[qid][S.GRAPH_ID] == qid and by_graph[qid] == want[qid]
        assert q[qid][S.SPLIT] == "test" and q[qid][S.TEXT] == next(r["question"] for r in GOOD if r["id"] == qid)
    if "WebQTest-0" in q:
        assert entity_names(kg, q["WebQTest-0"][S.TOPIC_IDS]) == ["Justin Bieber"]
        assert q["WebQTest-0"][S.ANSWERS] == ["Jaxon Bieber"]
        assert entity_names(kg, q["WebQTest-0"][S.ANSWER_IDS]) == ["Jaxon Bieber"]
    if "WebQTest-1" in q:  # a_entity empty: the answer names
        assert q["WebQTest-1"][S.ANSWERS] == ["Bahamas"]
        assert entity_names(kg, q["WebQTest-1"][S.ANSWER_IDS]) == ["Bahamas"]
    if "WebQTest-2" in q:  # the answer in no graph: kept, by name, no id
        assert q["WebQTest-2"][S.ANSWERS] == ["North America"] and q["WebQTest-2"][S.ANSWER_IDS] == [None]
    if "WebQTest-3" in q:  # in another row's graph: the shared entity's id
        assert entity_names(kg, q["WebQTest-3"][S.ANSWER_IDS]) == ["Canada"]
    # entities are shared across graphs by name: one Jaxon Bieber, in two graphs
    names = kg.entities.column(S.NAME).to_pylist()
    assert len(names) == len(set(names))


def reasons(kg) -> dict[int, str]:
    """Quarantined row / line -> reason (duplicate triples aside)."""
    return {r[S.ROW]: r[S.REASON] for r in kg.quarantine.to_pylist() if r[S.REASON] != "duplicate triple"}


def test_parquet_rows_graphs_answers_and_topics_come_out_right(tmp_path, monkeypatch):
    """A Parquet file in the dataset card's layout, read two rows a row group and one row a batch: each row a
    question over its own graph; the malformed rows quarantined with file, 0-based row and reason."""
    monkeypatch.setattr(rog, "BATCH_ROWS", 1)
    rows = GOOD[:2] + [r for r, _ in BAD_PARQUET] + GOOD[2:]
    f = write_parquet(tmp_path / "test.parquet", rows)
    assert pq.ParquetFile(f).num_row_groups == 5
    kg = load_rog(path=str(f))
    check_good(kg)
    got = reasons(kg)
    assert sorted(got) == [2, 3, 4, 5, 6]  # every dropped row accounted for, at its row index
    for (_, why), i in zip(BAD_PARQUET, range(2, 7)):
        assert got[i].startswith(why), (i, got[i])
    assert set(kg.quarantine.column(S.TABLE).to_pylist()) == {str(f)}
    assert "WebQTest-4" in kg.quarantine.to_pylist()[0][S.RECORD]
    assert kg.stats["answers_not_in_graph"] == 2 and kg.stats["answers_from_answer_field"] == 1
    assert kg.stats["graphs"] == 4 and kg.stats["topics_not_in_graph"] == 0


def test_jsonl_and_gzip_give_the_same_tables_and_quarantine_bad_lines(tmp_path):
    """The same rows as JSONL (and .jsonl.gz): the same questions and graphs; a line that is not JSON, a field of
    the wrong type and a triple of a number are quarantined at their 1-based line; a repeated triple within a
    graph is quarantined as a duplicate triple, the row kept."""
    lines = [json.dumps(r) for r in GOOD[:2]]
    lines += ["{not json", json.dumps({**GOOD[0], "id": "x1", "q_entity": "Justin Bieber"}),
              json.dumps({**GOOD[0], "id": "x2", "graph": [["Justin Bieber", "people.person.age", 30]]}),
              json.dumps({k: v for k, v in GOOD[0].items() if k not in ("a_entity", "answer")} | {"id": "x3"})]
    lines += [json.dumps(r) for r in GOOD[2:]]
    lines[-1] = json.dumps({**GOOD[3], "graph": GOOD[3]["graph"] * 2})  # its triple twice
    text = "\n".join(lines) + "\n"
    (tmp_path / "q.jsonl").write_text(text)
    with gzip.open(tmp_path / "q.jsonl.gz", "wt") as fh:
        fh.write(text)
    for name in ("q.jsonl", "q.jsonl.gz"):
        kg = load_rog(path=str(tmp_path / name))
        check_good(kg)
        got = reasons(kg)
        assert sorted(got) == [3, 4, 5, 6]
        assert got[3].startswith("not JSON") and got[4] == "q_entity must be a list of strings, got str"
        assert got[5].startswith("graph[0]: expected [head, relation, tail]")
        assert got[6] == "missing field(s): a_entity/answer"
        dup = [r for r in kg.quarantine.to_pylist() if r[S.REASON] == "duplicate triple"]
        assert [r[S.ROW] for r in dup] == [8] and kg.stats["duplicate_triples"] == 1
    parquet = load_rog(path=str(write_parquet(tmp_path / "q.parquet", GOOD)))
    assert graphs(parquet) == graphs(kg) and parquet.questions.equals(kg.questions)


def test_a_folder_of_shards_the_shards_glob_and_the_sample(tmp_path):
    """A folder in the Hugging Face layout (data/{split}-0000i-of-0000n.parquet): ``shards`` picks the test
    split's files, read in name order; row numbers are per file; the sample is drawn over all rows, seeded."""
    data = tmp_path / "data"
    data.mkdir()
    write_parquet(data / "test-00000-of-00002.parquet", GOOD[:2])
    write_parquet(data / "test-00001-of-00002.parquet", GOOD[2:] + [BAD_PARQUET[0][0]])
    write_parquet(data / "train-00000-of-00001.parquet", [row("WebQTrn-0", "t", ["Canada"], ["Canada"], BIEBER)])
    kg = load_rog(path=str(data), shards="test-*.parquet")
    check_good(kg)
    assert [(Path(r[S.TABLE]).name, r[S.ROW]) for r in kg.quarantine.to_pylist()] == [
        ("test-00001-of-00002.parquet", 2)]
    assert kg.stats["files"] == 2
    assert "WebQTrn-0" in load_rog(path=str(data)).questions.column(S.QUESTION_ID).to_pylist()  # all shards
    one = load_rog(path=str(data), shards="test-*.parquet", sample=2, seed=3)
    again = load_rog(path=str(data), shards="test-*.parquet", sample=2, seed=3)
    assert one.questions.equals(again.questions) and one.quarantine.num_rows == 0
    check_good(one, ids=("WebQTest-0", "WebQTest-3"))  # seed 3 draws rows 0 and 3 of the five (common.sample_rows)
    with pytest.raises(LoaderInputError, match="no file matches"):
        load_rog(path=str(data), shards="validation-*.parquet")


def test_unusable_inputs_are_errors_naming_the_file(tmp_path):
    with pytest.raises(LoaderInputError, match="missing"):
        load_rog(path=str(tmp_path / "nope.parquet"))
    (tmp_path / "q.csv").write_text("id,question\n")
    with pytest.raises(LoaderInputError, match=r"expected a \.parquet, \.jsonl or \.jsonl\.gz"):
        load_rog(path=str(tmp_path / "q.csv"))
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(LoaderInputError, match="empty"):
        load_rog(path=str(tmp_path / "empty.jsonl"))
    (tmp_path / "bad.jsonl").write_text("{not json\n")
    with pytest.raises(LoaderInputError, match="no valid row"):
        load_rog(path=str(tmp_path / "bad.jsonl"))
    pq.write_table(pa.table({"id": ["a"], "question": ["q"]}), tmp_path / "cols.parquet")
    with pytest.raises(LoaderInputError, match="no column q_entity, graph, a_entity/answer"):
        load_rog(path=str(tmp_path / "cols.parquet"))
    (tmp_path / "junk.parquet").write_bytes(b"not parquet")
    with pytest.raises(LoaderInputError, match="not a readable Parquet file"):
        load_rog(path=str(tmp_path / "junk.parquet"))


def test_params_require_data_input_to_hold_the_table(tmp_path):
    (tmp_path / "my").mkdir()
    f = write_parquet(tmp_path / "my" / "test.parquet", GOOD)
    with pytest.raises(ParamsError, match="data.rog.path"):
        load(ROOT / "params.yaml", ["data.dataset=rog", f"data.rog.path={f}"])
    p = load(ROOT / "params.yaml", ["data.dataset=rog", f"data.rog.path={f}", f"data.input={tmp_path / 'my'}"])
    assert p.data.input_paths() == {"data.rog.path": str(f)}
    assert p.data.loader_kwargs() == {"path": str(f), "split": "test", "shards": "*.parquet", "sample": 200, "seed": 0}
    with pytest.raises(ParamsError, match="data.rog.shardz"):
        load(ROOT / "params.yaml", ["data.dataset=rog", f"data.rog.path={f}", f"data.input={f}", "data.rog.shardz=x"])


def test_ingest_and_validate_stages_on_a_rog_parquet(tmp_path, monkeypatch):
    """The real ingest and validate stages with `-S` overrides, as `dvc exp run -S data.dataset=rog ...` runs
    them: every good row a validated question over its own graph; the two whose answer is not in their graph
    kept with answerable false, and one whose topic entity is not in its graph (an entity with no edge it sees:
    retrieval finds nothing, scored as a miss); the malformed rows in the ingest quarantine; validate
    quarantines nothing."""
    from stages import ingest, validate

    my = tmp_path / "my"
    my.mkdir()
    outside = row("WebQTest-9", "who is barack obama's wife", ["Barack Obama"], ["Michelle Obama"],
                  [["Canada", "location.location.containedby", "Americas"]])
    write_parquet(my / "test.parquet", GOOD + [r for r, _ in BAD_PARQUET] + [outside])
    monkeypatch.chdir(tmp_path)
    common = ["--params", str(ROOT / "params.yaml"), "-S", "data.dataset=rog", "-S", f"data.input={my}",
              "-S", f"data.rog.path={my / 'test.parquet'}", "-S", "data.sample=0"]
    ingest.main(common)
    validate.main(common)
    q = pq.read_table(tmp_path / "data" / "validated" / "questions.parquet")
    assert q.schema.equals(S.VALIDATED_QUESTIONS)
    answerable = dict(zip(q.column(S.QUESTION_ID).to_pylist(), q.column(S.ANSWERABLE).to_pylist()))
    assert answerable == {"WebQTest-0": True, "WebQTest-1": True, "WebQTest-2": False, "WebQTest-3": False,
                          "WebQTest-9": False}
    assert q.column(S.GRAPH_ID).to_pylist() == q.column(S.QUESTION_ID).to_pylist()
    t = pq.read_table(tmp_path / "data" / "validated" / "triples.parquet")
    assert t.num_rows == sum(len(r["graph"]) for r in GOOD + [outside])
    assert set(t.column(S.GRAPH_ID).to_pylist()) == set(answerable)
    ingest_q = pq.read_table(tmp_path / "data" / "quarantine" / "ingest.parquet").to_pylist()
    assert sorted(r[S.ROW] for r in ingest_q) == [4, 5, 6, 7, 8]
    assert pq.read_table(tmp_path / "data" / "quarantine" / "validate.parquet").num_rows == 0
    summary = json.loads((tmp_path / "data" / "validated" / "summary.json").read_text())
    assert summary["ingest_quarantined"] == 5 and summary["answerable"] == {"questions": 5, "not_answerable": 3, "no_topic": 0}
    run = json.loads((tmp_path / "data" / "timings" / "ingest" / "timing.json").read_text())
    assert run["topics_not_in_graph"] == 1 and run["answers_not_in_graph"] == 3
