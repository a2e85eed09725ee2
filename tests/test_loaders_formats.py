"""Ingest formats: one loader per format on real files, the bad-input corpus (tests/data/bad/), params."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from kgrag import schema as S
from kgrag.kg.duckdb_io import write_duckdb
from kgrag.kg.loaders.common import LoaderInputError, kept_rows, unknown_topic
from kgrag.kg.loaders.explagraphs import load_explagraphs
from kgrag.kg.loaders.gretriever import load_gretriever
from kgrag.kg.loaders.jsonl import load_jsonl
from kgrag.kg.loaders.metaqa import load_metaqa
from kgrag.kg.loaders.ntriples import NTriplesError, parse_line
from kgrag.kg.loaders.ntriples import load_ntriples
from kgrag.kg.loaders.triples import load_triples
from kgrag.params import ParamsError, parse
from kgrag.registry import LOADERS
from kgrag.kg.store import KGStore, questions_from_table
from tests.conftest import METAQA, SHARED

BAD = Path(__file__).parent / "data" / "bad"
EXPLA = SHARED / "data" / "explagraphs"


def quarantine(kg) -> dict[tuple[str, int], str]:
    """(file name, line) -> reason of every quarantine row."""
    return {(Path(r[S.TABLE]).name, r[S.ROW]): r[S.REASON] for r in kg.quarantine.to_pylist()}


def named(kg) -> list[tuple]:
    """Triples by name (with graph id when present), in table order."""
    ent = dict(zip(kg.entities.column(S.ENTITY_ID).to_pylist(), kg.entities.column(S.NAME).to_pylist()))
    rel = dict(zip(kg.relations.column(S.RELATION_ID).to_pylist(), kg.relations.column(S.NAME).to_pylist()))
    t = kg.triples.to_pydict()
    g = t.get(S.GRAPH_ID, [None] * len(t[S.HEAD]))
    return [(ent[h], rel[r], ent[x], gi) for h, r, x, gi in zip(t[S.HEAD], t[S.RELATION], t[S.TAIL], g)]


GOOD_TSV = "Heat\tdirected_by\tMichael Mann\nHeat\tstarred_actors\tAl Pacino\nTop Gun\trelease_year\t1986\n"
GOOD_Q = [
    {"id": "q1", "question": "who directed [Heat]", "topic_entities": ["Heat"], "answers": ["Michael Mann"], "hops": 1},
    {"id": "q2", "question": "year of [Top Gun]", "topic_entities": "Top Gun", "answers": [1986]},
    {"id": "q3", "question": "what does [A] link to", "topic_entities": ["A"], "answers": ["B", "not in kg"],
     "graph": [["A", "links", "B"], ["Heat", "links", "A"]]},
]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


# ---- triples ---------------------------------------------------------------------------------------------

def test_triples_good_tsv_with_jsonl_questions(tmp_path):
    kb = tmp_path / "kg.tsv"
    kb.write_text(GOOD_TSV)
    kg = load_triples(path=str(kb), questions=str(write_jsonl(tmp_path / "q.jsonl", GOOD_Q)), split="dev")
    assert kg.quarantine.num_rows == 0
    assert named(kg) == [("Heat", "directed_by", "Michael Mann", None), ("Heat", "starred_actors", "Al Pacino", None),
                         ("Top Gun", "release_year", "1986", None), ("A", "links", "B", "q3"), ("Heat", "links", "A", "q3")]
    assert kg.triples.schema.equals(S.GRAPH_TRIPLES) and kg.questions.schema.equals(S.QUESTIONS)
    names = kg.entities.column(S.NAME).to_pylist()
    q = {r[S.QUESTION_ID]: r for r in kg.questions.to_pylist()}
    assert [names[i] for i in q["q1"][S.TOPIC_IDS]] == ["Heat"] and q["q1"][S.HOPS] == 1
    assert [names[i] for i in q["q1"][S.ANSWER_IDS]] == ["Michael Mann"] and q["q1"][S.GRAPH_ID] is None
    assert q["q2"][S.ANSWERS] == ["1986"] and names[q["q2"][S.ANSWER_IDS][0]] == "1986"
    assert q["q3"][S.GRAPH_ID] == "q3" and q["q3"][S.ANSWERS] == ["B", "not in kg"]
    assert names[q["q3"][S.ANSWER_IDS][0]] == "B" and q["q3"][S.ANSWER_IDS][1] is None
    assert {r[S.SPLIT] for r in q.values()} == {"dev"}


@pytest.mark.parametrize("engine", ["python", "vectorized"])
def test_triples_label_table_names_id_keyed_entities(tmp_path, engine):
    """A KG keyed by ids with a label table (``names``): the first name of an entity is its display name, the
    others its aliases (which linking matches); the questions' answer texts follow the names; malformed label
    lines are quarantined with file, line and reason; table entities the KG lacks are counted. Both engines
    give the same tables."""
    kb = tmp_path / "kg.tsv"
    kb.write_text("Q1\tdirected_by\tQ2\nQ1\tstarred\tQ3\nQ4\tstarred\tQ3\n")
    names = tmp_path / "names.tsv"
    names.write_text("Q1\tHeat\nQ2\tMichael Mann\nQ2\tMann\nQ2\tMichael Kenneth Mann\nQ2\tMann\n"
                     "Q3\tAl Pacino\nQ9\tNot in the KG\nQ4\n\tno entity\nQ4\t \n")
    qs = write_jsonl(tmp_path / "q.jsonl", [{"id": "q", "question": "who directed Heat", "topic_entities": ["Q1"],
                                             "answers": ["Q2"]}])
    kg = load_triples(path=str(kb), questions=str(qs), names=str(names), engine=engine)
    assert kg.entities.schema.equals(S.ENTITIES_ALIASES)
    ent = kg.entities.to_pylist()
    assert [(e[S.NAME], e[S.ALIASES]) for e in ent] == [
        ("Heat", None), ("Michael Mann", ["Mann", "Michael Kenneth Mann"]), ("Al Pacino", None), ("Q4", None)]
    q = kg.questions.to_pylist()[0]
    assert q[S.ANSWERS] == ["Michael Mann"] and q[S.TOPIC_IDS] == [0]
    assert quarantine(kg) == {("names.tsv", 8): "names file: expected 2 tab-separated fields (entity, name), got 1",
                              ("names.tsv", 9): "names file: empty entity field",
                              ("names.tsv", 10): "names file: empty name field"}
    assert kg.stats["names_entities"] == 3 and kg.stats["names_aliases"] == 2 and kg.stats["names_unknown"] == 1
    from kgrag.kg.linking import ArrayKG, link_questions

    linked, _ = link_questions(kg)
    assert linked.questions.to_pylist()[0][S.TOPIC_IDS] == [0]
    arr = ArrayKG([e[S.NAME] for e in ent], kg.triples[S.HEAD].to_numpy(), kg.triples[S.RELATION].to_numpy(),
                  kg.triples[S.TAIL].to_numpy(), kg.relations[S.NAME].to_pylist(), [e[S.ALIASES] for e in ent])
    assert arr.link("what did michael kenneth mann direct").ids == (1,) and arr.link("what did Q2 direct").ids == ()


def test_triples_csv_by_header_name_gzip_and_quoting(tmp_path):
    f = tmp_path / "kg.csv.gz"
    with gzip.open(f, "wt", encoding="utf-8") as out:
        out.write('score,object,subject,predicate\n0.9,"Mann, Michael",Heat,directed_by\n0.1,1986,Top Gun,release_year\n')
    kg = load_triples(path=str(f), delimiter=",", quotechar='"', header=True, head="subject", relation="predicate",
                      tail="object")
    assert named(kg) == [("Heat", "directed_by", "Mann, Michael", None), ("Top Gun", "release_year", "1986", None)]
    assert kg.triples.schema.equals(S.TRIPLES)


def test_triples_bad_rows_quarantined(tmp_path):
    kg = load_triples(path=str(BAD / "triples_bad.tsv"))
    assert quarantine(kg) == {
        ("triples_bad.tsv", 2): "expected 3 '\\t'-separated fields, got 2",
        ("triples_bad.tsv", 3): "expected 3 '\\t'-separated fields, got 4",
        ("triples_bad.tsv", 4): "blank line",
        ("triples_bad.tsv", 5): "empty relation field",
        ("triples_bad.tsv", 6): "duplicate triple",
    }
    assert named(kg) == [("Heat", "directed_by", "Michael Mann", None), ("Ouroboros", "follows", "Ouroboros", None),
                         ("Collateral", "directed_by", "Michael Mann", None)]
    assert kg.stats["self_loops"] == 1 and kg.stats["duplicate_triples"] == 1
    rec = {r[S.ROW]: r[S.RECORD] for r in kg.quarantine.to_pylist()}
    assert rec[6] == "Heat\tdirected_by\tMichael Mann"


def test_triples_on_metaqa_kb_equals_metaqa_loader():
    a = load_triples(path=str(METAQA / "kb.txt"), delimiter="|")
    b = load_metaqa(path=str(METAQA), hops=1, split="test", sample=1, seed=0)
    assert a.triples.num_rows == 133_582 and a.quarantine.num_rows == 0
    assert a.triples.equals(b.triples)
    assert a.entities.equals(b.entities) and a.relations.equals(b.relations)


# ---- the bad-input corpus --------------------------------------------------------------------------------

def test_non_utf8_line_quarantined_rest_loaded():
    kg = load_triples(path=str(BAD / "nonutf8.tsv"))
    q = quarantine(kg)
    assert list(q) == [("nonutf8.tsv", 2)] and q[("nonutf8.tsv", 2)].startswith("not UTF-8: invalid continuation byte")
    assert named(kg) == [("Heat", "directed_by", "Michael Mann", None), ("Top Gun", "release_year", "1986", None)]


def test_bom_and_crlf_are_stripped():
    kg = load_triples(path=str(BAD / "bom.tsv"))
    assert kg.quarantine.num_rows == 0
    assert named(kg) == [("Heat", "directed_by", "Michael Mann", None), ("Top Gun", "release_year", "1986", None)]


@pytest.mark.parametrize("name,msg", [
    ("empty.tsv", "triples file is empty"),
    ("blank_only.tsv", "triples file is empty"),
    ("all_bad.tsv", "no valid triple"),
])
def test_empty_kg_file_is_an_error_naming_it(name, msg):
    with pytest.raises(LoaderInputError) as e:
        load_triples(path=str(BAD / name))
    assert str(BAD / name) in str(e.value) and msg in str(e.value)


def test_missing_file_and_header_column_are_errors():
    with pytest.raises(LoaderInputError, match="nope.tsv: triples file missing"):
        load_triples(path=str(BAD / "nope.tsv"))
    with pytest.raises(LoaderInputError, match=r"header_missing_col.csv: column 'head' not in the header"):
        load_triples(path=str(BAD / "header_missing_col.csv"), delimiter=",", header=True, head="head",
                     relation="relation", tail="tail")


def test_unterminated_csv_quote_quarantined():
    kg = load_triples(path=str(BAD / "quoted_bad.csv"), delimiter=",", quotechar='"', header=True,
                      head="head", relation="relation", tail="tail")
    assert quarantine(kg) == {("quoted_bad.csv", 3): "malformed CSV record: unexpected end of data"}
    assert named(kg) == [("Heat, the film", "directed_by", "Michael Mann", None)]


def test_ten_megabyte_line_quarantined(tmp_path):
    f = tmp_path / "huge.tsv"
    with open(f, "wb") as out:
        out.write(b"Heat\tdirected_by\tMichael Mann\n")
        out.write(b"x" * (10 << 20) + b"\tr\ty\n")
        out.write(b"Top Gun\trelease_year\t1986\n")
    kg = load_triples(path=str(f))
    row = kg.quarantine.to_pylist()
    assert len(row) == 1 and row[0][S.ROW] == 2 and row[0][S.TABLE] == str(f)
    assert row[0][S.REASON] == f"line of {(10 << 20) + 5} bytes is longer than {1 << 20}"
    assert len(row[0][S.RECORD]) == 200
    assert kg.triples.num_rows == 2


def test_a_question_without_topic_entities_is_kept(tmp_path):
    """An empty topic list is no bad line: linking (``data.link_entities``) may find the topic from the text, and
    validate flags a question left without one as not answerable."""
    kb = tmp_path / "kg.tsv"
    kb.write_text(GOOD_TSV)
    qs = write_jsonl(tmp_path / "q.jsonl", [{"id": "q", "question": "who directed Heat", "topic_entities": [],
                                             "answers": ["Michael Mann"]}])
    kg = load_triples(path=str(kb), questions=str(qs))
    assert kg.quarantine.num_rows == 0 and kg.questions.column(S.TOPIC_IDS).to_pylist() == [[]]


def test_bad_questions_quarantined_with_file_line_reason(tmp_path):
    kb = tmp_path / "kg.tsv"
    kb.write_text(GOOD_TSV)
    kg = load_triples(path=str(kb), questions=str(BAD / "questions_bad.jsonl"))
    q = {k: v for k, v in quarantine(kg).items() if k[0] == "questions_bad.jsonl"}
    assert q == {
        ("questions_bad.jsonl", 2): "not JSON: Expecting property name enclosed in double quotes at column 2",
        ("questions_bad.jsonl", 3): "missing field(s): answers",
        ("questions_bad.jsonl", 4): "no answers",
        ("questions_bad.jsonl", 5): unknown_topic("Nowhere"),  # recorded, and kept (below)
        ("questions_bad.jsonl", 6): "duplicate question id 'q1'",
        ("questions_bad.jsonl", 7): "graph[0]: expected [head, relation, tail] of non-empty strings",
        ("questions_bad.jsonl", 8): "expected a JSON object, got list",
        ("questions_bad.jsonl", 9): "duplicate triple",  # the repeated [A, links, B] of q9's graph
    }
    assert kg.questions.column(S.QUESTION_ID).to_pylist() == ["q1", "q5", "q9", "q10"]
    assert kg.questions.column(S.TOPIC_IDS).to_pylist()[1] == []  # q5: its topic is not in the KG
    assert [t for t in named(kg) if t[3] == "q9"] == [("A", "links", "B", "q9"), ("B", "links", "B", "q9")]
    assert kg.stats["self_loops"] == 1 and kg.stats["graphs"] == 1


# ---- jsonl -------------------------------------------------------------------------------------------------

def test_jsonl_per_question_graphs(tmp_path):
    rows = [
        {"id": "a", "question": "q a", "topic_entities": ["X"], "answers": ["Y"], "graph": [["X", "r", "Y"]]},
        {"id": "b", "question": "q b", "topic_entities": ["X"], "answers": ["Z"],
         "graph": [["X", "r", "Y"], ["Y", "s", "Z"]]},
    ]
    kg = load_jsonl(path=str(write_jsonl(tmp_path / "q.jsonl", rows)), split="train")
    assert kg.quarantine.num_rows == 0
    assert named(kg) == [("X", "r", "Y", "a"), ("X", "r", "Y", "b"), ("Y", "s", "Z", "b")]
    assert kg.questions.column(S.GRAPH_ID).to_pylist() == ["a", "b"]
    bad = load_jsonl(path=str(BAD / "questions_bad.jsonl"))
    q = quarantine(bad)
    assert q[("questions_bad.jsonl", 1)] == unknown_topic("Heat")  # no global KG here: kept, with no topic
    assert q[("questions_bad.jsonl", 6)] == "duplicate question id 'q1'"  # q1 was kept
    assert bad.questions.column(S.QUESTION_ID).to_pylist() == ["q1", "q5", "q9", "q10"]


def test_jsonl_question_whose_topic_is_not_in_the_kg_is_kept_as_a_miss_and_recorded(tmp_path):
    """A topic entity neither in the KG nor in the question's graph keeps the question, with no topic id (one of
    two unknown: none either), as a question that links to nothing: validate flags it not answerable and it is
    scored as a miss, in the denominator. Its quarantine row still says why; every line is accounted for (4
    lines = 3 questions + 1 dropped; 3 quarantine rows, 2 of them kept)."""
    from kgrag.evaluation.evaluate import evaluate_rows
    from kgrag.kg.validate import validate_tables

    graph = [["X", "r", "Y"]]
    rows = [{"id": "a", "question": "what does [X] r", "topic_entities": ["X"], "answers": ["Y"], "graph": graph},
            {"id": "b", "question": "what does [Nowhere] r", "topic_entities": ["Nowhere"], "answers": ["Y"],
             "graph": graph},
            {"id": "c", "question": "what do [X] and [Gone] r", "topic_entities": ["X", "Gone"], "answers": ["Y"],
             "graph": graph},
            {"id": "d", "question": "what does [X] r", "topic_entities": ["X"], "answers": [], "graph": graph}]
    kg = load_jsonl(path=str(write_jsonl(tmp_path / "q.jsonl", rows)))
    topics = dict(zip(kg.questions[S.QUESTION_ID].to_pylist(), kg.questions[S.TOPIC_IDS].to_pylist()))
    x = kg.entities[S.NAME].to_pylist().index("X")
    assert topics == {"a": [x], "b": [], "c": []}
    assert quarantine(kg) == {("q.jsonl", 2): unknown_topic("Nowhere"), ("q.jsonl", 3): unknown_topic("Gone"),
                              ("q.jsonl", 4): "no answers"}
    assert kept_rows(kg.quarantine) == 2 and kg.questions.num_rows + kg.quarantine.num_rows - 2 == len(rows)
    assert named(kg) == [("X", "r", "Y", "a"), ("X", "r", "Y", "b"), ("X", "r", "Y", "c")]  # its graph kept too
    res = validate_tables({"entities": kg.entities, "relations": kg.relations, "triples": kg.triples,
                           "questions": kg.questions})
    q = res.tables["questions"].to_pylist()
    assert {r[S.QUESTION_ID]: r[S.ANSWERABLE] for r in q} == {"a": True, "b": False, "c": False}
    gen = [{S.QUESTION_ID: r[S.QUESTION_ID], S.PREDICTION: "Y", S.PREDICTED_ANSWERS: ["Y"], S.FAILED: False}
           for r in q]
    per_q, m = evaluate_rows(questions=q, retrieved=[], generations=gen)
    assert {r[S.QUESTION_ID]: r["hit_at_1"] for r in per_q} == {"a": 1.0, "b": 0.0, "c": 0.0}
    assert m["questions"] == 3 and m["hit_at_1"] == pytest.approx(1 / 3)


# ---- ntriples ----------------------------------------------------------------------------------------------

def test_ntriples_line_parser():
    s, p, o = parse_line(r'<http://a/x>  <http://a/p>	"caf\u00E9 \"q\"\n"@en-GB . # comment')
    assert (s.kind, s.value, p.value) == ("iri", "http://a/x", "http://a/p")
    assert o == ("literal", 'café "q"\n', "en-gb", "")
    assert parse_line('_:b0 <http://a/p> "5"^^<http://www.w3.org/2001/XMLSchema#int> .')[2][3].endswith("#int")
    assert parse_line("   # only a comment") is None
    assert parse_line(r"<http://a/\u0078> <http://a/p> <http://a/o>.")[0].value == "http://a/x"
    for bad in ['<http://a/x> <http://a/p> "open .', "<http://a/x> _:p <http://a/o> .", "<http://a/x><http://a/p> <http://a/o> .",
                '<http://a/x> <http://a/p> "x"@ .', "<http://a/x> <http://a/p> <http://a/o> . extra",
                r'<http://a/x> <http://a/p> "\uD800" .']:
        with pytest.raises(NTriplesError):
            parse_line(bad)


def test_ntriples_good_file_labels_and_local_names(tmp_path):
    f = tmp_path / "kg.nt"
    f.write_text(
        "<http://ex.org/film/Heat> <http://ex.org/directed_by> <http://ex.org/p#Mann> .\n"
        '<http://ex.org/film/Heat> <http://www.w3.org/2000/01/rdf-schema#label> "Heat"@de .\n'
        '<http://ex.org/film/Heat> <http://www.w3.org/2000/01/rdf-schema#label> "Heat (film)"@en .\n'
        '<http://ex.org/film/Heat> <http://ex.org/year> "1995"^^<http://www.w3.org/2001/XMLSchema#gYear> .\n'
    )
    qs = write_jsonl(tmp_path / "q.jsonl", [
        {"id": "q", "question": "who directed Heat", "topic_entities": ["http://ex.org/film/Heat"], "answers": ["Mann"]}])
    kg = load_ntriples(path=str(f), questions=str(qs))
    assert kg.quarantine.num_rows == 0
    assert named(kg) == [("Heat (film)", "directed_by", "Mann", None), ("Heat (film)", "year", "1995", None)]
    assert "label" not in kg.relations.column(S.NAME).to_pylist()
    names = kg.entities.column(S.NAME).to_pylist()
    q = kg.questions.to_pylist()[0]
    assert names[q[S.TOPIC_IDS][0]] == "Heat (film)" and names[q[S.ANSWER_IDS][0]] == "Mann"
    # the other labels are aliases (linking matches them); entities with one label or none have none
    aliases = dict(zip(names, kg.entities.column(S.ALIASES).to_pylist()))
    assert aliases == {"Heat (film)": ["Heat"], "Mann": None, "1995": None}


def test_ntriples_bad_lines_quarantined():
    kg = load_ntriples(path=str(BAD / "bad.nt"))
    q = quarantine(kg)
    assert q == {
        ("bad.nt", 4): "not N-Triples: expected '.' at the end of the statement (column 78)",
        ("bad.nt", 5): "not N-Triples: character ' ' not allowed in an IRI (column 20)",
        ("bad.nt", 6): "not N-Triples: IRI <Heat> is not absolute",
        ("bad.nt", 7): "not N-Triples: bad escape \\q in literal (column 49)",
        ("bad.nt", 8): "not N-Triples: unexpected '\"' where the subject should start (column 1)",
        ("bad.nt", 9): "duplicate triple",
    }
    assert named(kg) == [
        ("Heat (1995)", "directed_by", "Michael_Mann", None), ("Heat (1995)", "release_year", "1995", None),
        ("b1", "loops", "b1", None), ("Heat (1995)", "tagline", 'A Los Angeles crime saga é\t"quoted"', None)]
    assert kg.stats["self_loops"] == 1


# ---- gretriever --------------------------------------------------------------------------------------------

def test_gretriever_good_folder(tmp_path):
    (tmp_path / "nodes.csv").write_text('node_id,node_attr\n0,heat\n1,"mann, michael"\n2,al pacino\n3,isolated\n')
    (tmp_path / "edges.csv").write_text("src,edge_attr,dst\n0,directed by,1\n0,starring,2\n")
    qs = write_jsonl(tmp_path / "q.jsonl", [
        {"id": "q", "question": "who directed heat", "topic_entities": [0], "answers": ["mann, michael"]}])
    kg = load_gretriever(path=str(tmp_path), questions=str(qs))
    assert kg.quarantine.num_rows == 0
    assert named(kg) == [("heat", "directed by", "mann, michael", None), ("heat", "starring", "al pacino", None)]
    assert sorted(kg.entities.column(S.NAME).to_pylist()) == ["al pacino", "heat", "isolated", "mann, michael"]
    names = kg.entities.column(S.NAME).to_pylist()
    q = kg.questions.to_pylist()[0]
    assert names[q[S.TOPIC_IDS][0]] == "heat" and names[q[S.ANSWER_IDS][0]] == "mann, michael"


def test_gretriever_bad_rows_quarantined():
    kg = load_gretriever(path=str(BAD / "gretriever"))
    assert quarantine(kg) == {
        ("nodes.csv", 5): "duplicate node_id '1'",
        ("nodes.csv", 6): "empty node_id or node_attr",
        ("nodes.csv", 8): "expected 2 fields, got 3",
        ("edges.csv", 4): "duplicate triple",
        ("edges.csv", 5): "src '9' not a node_id of nodes.csv",
        ("edges.csv", 6): "empty edge_attr",
        ("edges.csv", 7): "expected 3 fields, got 2",
    }
    assert named(kg) == [("heat", "directed_by", "michael mann", None), ("heat", "set_in", "los angeles, california", None),
                         ("los angeles, california", "same as", "los angeles, california", None)]
    assert kg.stats["self_loops"] == 1
    assert "lonely node" in kg.entities.column(S.NAME).to_pylist()


def test_gretriever_header_without_columns_is_an_error(tmp_path):
    (tmp_path / "nodes.csv").write_text("id,text\n0,a\n")
    (tmp_path / "edges.csv").write_text("src,edge_attr,dst\n0,r,0\n")
    with pytest.raises(LoaderInputError, match=r"nodes.csv: header 'id,text' lacks column\(s\) node_id, node_attr"):
        load_gretriever(path=str(tmp_path))


# ---- explagraphs -------------------------------------------------------------------------------------------

def test_explagraphs_real_dev():
    kg = load_explagraphs(path=str(EXPLA), split="dev")
    lines = (EXPLA / "dev.tsv").read_text(encoding="utf-8").splitlines()
    assert len(lines) == 398  # 397 newlines: the last row has none
    assert kg.questions.num_rows == len(lines) - kg.quarantine.num_rows == 398
    qs = kg.questions.to_pylist()
    assert {a for q in qs for a in q[S.ANSWERS]} == {"support", "counter"}
    assert all(len(q[S.ANSWERS]) == 1 for q in qs)
    graphs = {g for *_, g in named(kg)}
    assert all(q[S.GRAPH_ID] == q[S.QUESTION_ID] and q[S.GRAPH_ID] in graphs for q in qs)
    assert len(graphs) == 398 == kg.stats["graphs"]
    first = [t for t in named(kg) if t[3] == "explagraphs-dev-1"]
    assert first == [("marriage", "capable of", "deceiving", "explagraphs-dev-1"),
                     ("deceiving", "created by", "pase", "explagraphs-dev-1"),
                     ("pase", "used for", "everyone", "explagraphs-dev-1"),
                     ("everyone", "capable of", "believes", "explagraphs-dev-1")]
    assert qs[0][S.TEXT].startswith("Argument 1: marriage is pase.\nArgument 2: Not everyone believes in marriage")
    assert qs[0][S.ANSWERS] == ["support"]
    names = kg.entities.column(S.NAME).to_pylist()
    assert [names[i] for i in qs[0][S.TOPIC_IDS]] == ["marriage", "deceiving", "pase", "everyone", "believes"]


def test_explagraphs_bad_rows_quarantined():
    kg = load_explagraphs(path=str(BAD / "explagraphs"), split="dev")
    assert quarantine(kg) == {
        ("dev.tsv", 2): "expected 4 tab-separated fields (belief, argument, stance, graph), got 3",
        ("dev.tsv", 3): "stance 'neutral' is not support or counter",
        ("dev.tsv", 4): "graph is not back-to-back '(head; relation; tail)' triples",
        ("dev.tsv", 5): "duplicate triple",
    }
    assert kg.questions.column(S.QUESTION_ID).to_pylist() == ["explagraphs-dev-1", "explagraphs-dev-5"]
    assert [t[:3] for t in named(kg) if t[3] == "explagraphs-dev-5"] == [
        ("dogs", "has property", "loyal"), ("loyal", "not capable of", "bad")]


# ---- per-question graphs in the store ----------------------------------------------------------------------

def test_store_graph_edges_and_neighbourhood(tmp_path):
    kb = tmp_path / "kg.tsv"
    kb.write_text(GOOD_TSV)
    kg = load_triples(path=str(kb), questions=str(write_jsonl(tmp_path / "q.jsonl", GOOD_Q)))
    db = tmp_path / "kg.duckdb"
    write_duckdb(db, {"entities": kg.entities, "relations": kg.relations, "triples": kg.triples,
                      "questions": kg.questions})
    store = KGStore(db)
    assert store.has_graphs
    assert store.graph_edges("q3").tolist() == [3, 4] and store.graph_edges(None).tolist() == [0, 1, 2]
    assert store.graph_edges("nope").tolist() == []
    assert store.names(store.graph_nodes("q3")) == ["A", "B", "Heat"]
    heat = store.ids_of(["Heat"])
    nb = store.graph_neighbourhood(heat, 1, 100, "q3")
    assert nb.edges.tolist() == [4] and store.names(nb.nodes) == ["Heat", "A"]
    nb2 = store.graph_neighbourhood(heat, 2, 100, "q3")
    assert sorted(nb2.edges.tolist()) == [3, 4] and not nb2.truncated
    assert sorted(store.graph_neighbourhood(heat, 1, 100, "q3", include_global=True).edges.tolist()) == [0, 1, 4]
    assert store.graph_neighbourhood(heat, 2, 1, "q3").truncated
    qs = {q.question_id: q for q in questions_from_table(kg.questions)}
    assert qs["q3"].graph_id == "q3" and qs["q1"].graph_id is None
    # a KG without graphs: every triple is global, graph_id all None
    m = tmp_path / "m.duckdb"
    plain = load_triples(path=str(kb))
    write_duckdb(m, {"entities": plain.entities, "relations": plain.relations, "triples": plain.triples})
    s2 = KGStore(m)
    assert not s2.has_graphs and s2.graph_edges(None).tolist() == [0, 1, 2]
    np.testing.assert_array_equal(s2.graph_ids, np.array([None, None, None], dtype=object))


# ---- params ------------------------------------------------------------------------------------------------

def test_every_format_is_a_registered_loader_with_strict_params():
    assert {"metaqa", "triples", "ntriples", "jsonl", "gretriever", "explagraphs"} <= set(LOADERS.names())
    for name in LOADERS.names():
        assert LOADERS.get(name).params.model_config.get("extra") == "forbid", name


def test_loader_params_come_from_the_loader_section():
    p = parse({"data": {"dataset": "triples", "sample": 5,
                        "triples": {"path": "kb.txt", "delimiter": "|", "questions": "q.jsonl"}}})
    kw = p.data.loader_kwargs()
    assert kw["path"] == "kb.txt" and kw["delimiter"] == "|" and kw["questions"] == "q.jsonl"
    assert kw["sample"] == 5 and kw["seed"] == 0 and kw["header"] is False
    e = parse({"data": {"dataset": "explagraphs"}}).data.loader_kwargs()
    assert e == {"path": "../shared/data/explagraphs", "split": "dev", "sample": 200, "seed": 0}
    m = parse({"data": {"hops": 3, "split": "dev"}, "finetune": {"split": "test"},
               "relplan": {"split": "test"}}).data.loader_kwargs()
    assert m == {"path": "../shared/data/metaqa", "hops": 3, "split": "dev", "sample": 200, "seed": 0}


@pytest.mark.parametrize("data,msg", [
    ({"dataset": "triples"}, "data.triples.path: required when data.dataset is triples"),
    ({"dataset": "triples", "triples": {"path": "x", "delim": ","}}, "data.triples.delim: Extra inputs are not permitted"),
    ({"dataset": "ntriples", "ntriples": {"path": "x", "lable": "x"}}, "data.ntriples.lable: Extra inputs are not permitted"),
    ({"dataset": "explagraphs", "explagraphs": {"split": "test"}}, "data.explagraphs.split: Input should be 'train' or 'dev'"),
    ({"dataset": "triples", "triples": {"path": "x", "head": "h"}}, "need header: true"),
    ({"metaqa": {"hops": 3}}, "MetaQA's params are data.path, data.hops, data.split"),
    ({"foo": {}}, "unknown key 'foo'"),
    ({"dataset": "csvv"},
     "unknown loader module 'csvv'; valid choices: explagraphs, gretriever, irn, jsonl, metaqa, ntriples, rog, triples"),
])
def test_bad_loader_params_fail_naming_the_key(data, msg):
    with pytest.raises(ParamsError) as e:
        parse({"data": data})
    assert msg in str(e.value)


def test_an_unchosen_loaders_section_is_checked_by_kgrag_check():
    """An unchosen loader's typo does not stop a stage (its module is not even imported), and `kgrag check`
    (modules="all") names it."""
    data = {"data": {"ntriples": {"lable": "x"}}}
    assert parse(data).data.dataset == "metaqa"
    with pytest.raises(ParamsError) as e:
        parse(data, modules="all")
    assert "data.ntriples.lable: Extra inputs are not permitted" in str(e.value)


def test_validate_keeps_the_same_triple_in_two_graphs(tmp_path):
    from kgrag.kg.validate import validate_tables

    rows = [
        {"id": "a", "question": "q a", "topic_entities": ["X"], "answers": ["Y"], "graph": [["X", "r", "Y"]]},
        {"id": "b", "question": "q b", "topic_entities": ["X"], "answers": ["Y"], "graph": [["X", "r", "Y"]]},
    ]
    kg = load_jsonl(path=str(write_jsonl(tmp_path / "q.jsonl", rows)))
    dup = kg.triples.slice(1, 1)  # a real duplicate: same triple, same graph
    tables = {"entities": kg.entities, "relations": kg.relations, "questions": kg.questions,
              "triples": kg.triples.__class__.from_batches(kg.triples.to_batches() + dup.to_batches())}
    res = validate_tables(tables)
    assert res.tables["triples"].num_rows == 2
    assert [(r[S.TABLE], r[S.ROW], r[S.REASON]) for r in res.quarantine.to_pylist()] == [("triples", 2, "duplicate triple")]
    assert res.tables["questions"].num_rows == 2
