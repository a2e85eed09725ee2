"""great-expectations validation on real tables: bad rows are quarantined with reasons, good rows go on."""

from __future__ import annotations

import pyarrow as pa
import pytest

from kgrag import schema as S
from kgrag.kg.validate import validate_tables
from tests.conftest import MOVIES, tiny_tables


def test_clean_tables_pass():
    t = tiny_tables(MOVIES, [{S.QUESTION_ID: "q1", S.SPLIT: "test", S.HOPS: 1, S.TEXT: "who starred in [Heat]",
                              S.QTYPE: "", S.TOPIC_IDS: [3], S.ANSWER_IDS: [0], S.ANSWERS: ["Al Pacino"]}])
    res = validate_tables(t)
    assert res.quarantine.num_rows == 0
    assert all(c["success"] for c in res.summary["checks"])
    assert res.tables["triples"].num_rows == len(MOVIES)


def test_bad_rows_go_to_quarantine_with_reasons():
    t = tiny_tables(MOVIES)
    tri = t["triples"]
    bad_triples = pa.concat_tables([
        tri,
        tri.slice(0, 1),  # duplicate of row 0
        pa.table({S.HEAD: [999], S.RELATION: [0], S.TAIL: [1]}, schema=S.TRIPLES),  # unknown head
        pa.table({S.HEAD: [0], S.RELATION: [77], S.TAIL: [1]}, schema=S.TRIPLES),  # unknown relation
    ])
    t["triples"] = bad_triples
    t["questions"] = pa.Table.from_pylist([
        {S.QUESTION_ID: "ok", S.SPLIT: "test", S.HOPS: 1, S.TEXT: "t", S.QTYPE: "", S.TOPIC_IDS: [1],
         S.ANSWER_IDS: [2], S.ANSWERS: ["x"]},
        {S.QUESTION_ID: "no-topic", S.SPLIT: "test", S.HOPS: 1, S.TEXT: "t", S.QTYPE: "", S.TOPIC_IDS: [None],
         S.ANSWER_IDS: [2], S.ANSWERS: ["x"]},
        {S.QUESTION_ID: "no-answer", S.SPLIT: "test", S.HOPS: 1, S.TEXT: "t", S.QTYPE: "", S.TOPIC_IDS: [1],
         S.ANSWER_IDS: [], S.ANSWERS: []},
        {S.QUESTION_ID: "ok", S.SPLIT: "test", S.HOPS: 1, S.TEXT: "t", S.QTYPE: "", S.TOPIC_IDS: [1],
         S.ANSWER_IDS: [2], S.ANSWERS: ["x"]},
    ], schema=S.QUESTIONS)
    res = validate_tables(t)
    q = res.quarantine.to_pylist()
    reasons = {(r[S.TABLE], r[S.ROW]): r[S.REASON] for r in q}
    n = len(MOVIES)
    assert reasons[("triples", n)] == "duplicate triple"
    assert "head is not an entity" in reasons[("triples", n + 1)]
    assert "relation is not a relation" in reasons[("triples", n + 2)]
    assert ("triples", 0) not in reasons  # the first copy of a duplicate stays
    assert "topic entity not in the KG" in reasons[("questions", 1)]  # recorded, and kept (below)
    assert "no answers" in reasons[("questions", 2)]
    assert reasons[("questions", 3)] == "duplicate question_id"
    assert res.tables["triples"].num_rows == n
    assert res.tables["questions"].column(S.QUESTION_ID).to_pylist() == ["ok", "no-topic"]
    assert res.summary["tables"]["triples"]["bad"] == 3


def test_a_question_without_topic_entity_is_kept_not_answerable():
    """No topic entity (nothing linked from its text) is no bad row: the question stays, flagged answerable=false
    (a miss for every metric), and the summary counts it."""
    t = tiny_tables(MOVIES, [
        {S.QUESTION_ID: "linked", S.SPLIT: "test", S.HOPS: 1, S.TEXT: "who starred in Heat", S.QTYPE: "",
         S.TOPIC_IDS: [3], S.ANSWER_IDS: [0], S.ANSWERS: ["Al Pacino"]},
        {S.QUESTION_ID: "unlinked", S.SPLIT: "test", S.HOPS: 1, S.TEXT: "who starred in it", S.QTYPE: "",
         S.TOPIC_IDS: [], S.ANSWER_IDS: [0], S.ANSWERS: ["Al Pacino"]}])
    res = validate_tables(t)
    assert res.quarantine.num_rows == 0
    q = res.tables["questions"].to_pylist()
    assert [(r[S.QUESTION_ID], r[S.ANSWERABLE]) for r in q] == [("linked", True), ("unlinked", False)]
    assert res.summary["answerable"] == {"questions": 2, "not_answerable": 1, "no_topic": 1}


def test_a_question_whose_topic_is_not_in_the_kg_is_kept_as_a_miss_and_recorded():
    """A given topic entity the KG lacks is the same case as a topic linking found none for: the question stays
    (the denominator keeps it), flagged answerable=false and left with its known topics only; the quarantine file
    still records it with its reason and its row as given; it is no bad row for max_bad_fraction. Through
    validate_tables and on to the metrics: it is scored as a miss even when its prediction names the answer."""
    from kgrag.evaluation.evaluate import evaluate_rows
    from kgrag.kg.validate import KEPT_UNKNOWN_TOPIC

    t = tiny_tables(MOVIES, [
        {S.QUESTION_ID: "known", S.SPLIT: "test", S.HOPS: 1, S.TEXT: "who starred in Heat", S.QTYPE: "",
         S.TOPIC_IDS: [3], S.ANSWER_IDS: [0], S.ANSWERS: ["Al Pacino"]},
        {S.QUESTION_ID: "unknown", S.SPLIT: "test", S.HOPS: 1, S.TEXT: "who starred in Heat", S.QTYPE: "",
         S.TOPIC_IDS: [3, 999], S.ANSWER_IDS: [0], S.ANSWERS: ["Al Pacino"]},
        {S.QUESTION_ID: "unlinked", S.SPLIT: "test", S.HOPS: 1, S.TEXT: "who starred in it", S.QTYPE: "",
         S.TOPIC_IDS: [], S.ANSWER_IDS: [0], S.ANSWERS: ["Al Pacino"]}])
    res = validate_tables(t)
    q = {r[S.QUESTION_ID]: r for r in res.tables["questions"].to_pylist()}
    assert list(q) == ["known", "unknown", "unlinked"]
    assert [q[k][S.ANSWERABLE] for k in q] == [True, False, False]
    assert q["unknown"][S.TOPIC_IDS] == [3]  # the unknown id leaves it, the known one stays
    (rec,) = res.quarantine.to_pylist()
    assert (rec[S.TABLE], rec[S.ROW], rec[S.REASON]) == ("questions", 1, KEPT_UNKNOWN_TOPIC)
    assert '"question_id": "unknown"' in rec[S.RECORD] and "999" in rec[S.RECORD]
    assert res.summary["tables"]["questions"]["bad"] == 0
    assert res.summary["answerable"] == {"questions": 3, "not_answerable": 2, "no_topic": 1}
    gen = [{S.QUESTION_ID: k, S.PREDICTION: "Al Pacino", S.PREDICTED_ANSWERS: ["Al Pacino"], S.FAILED: False}
           for k in q]
    per_q, m = evaluate_rows(questions=list(q.values()), retrieved=[], generations=gen)
    assert {r[S.QUESTION_ID]: r["hit_at_1"] for r in per_q} == {"known": 1.0, "unknown": 0.0, "unlinked": 0.0}
    assert m["questions"] == 3 and m["hit_at_1"] == pytest.approx(1 / 3)
