"""Prompt building, answer parsing and the metric rules, on hand-made cases."""

from __future__ import annotations

import pytest

from kgrag.evaluation.evaluate import answer_scores, evaluate_rows, normalize, retrieval_recall, stage_metrics
from kgrag.llm.prompts import build_request, clean_question, context_text, parse_answers
from kgrag import schema as S
def test_parse_answers():
    assert parse_answers("Michael Mann | Martin Scorsese") == ["Michael Mann", "Martin Scorsese"]
    assert parse_answers("Answer: 1. Heat\n2. Collateral.\n- Heat") == ["Heat", "Collateral"]
    assert parse_answers("") == []


@pytest.mark.parametrize("reply, parsed", [
    ("33.82", ["33.82"]),  # a decimal is no "33." bullet
    ("-4.5", ["-4.5"]),  # a sign is no "-" bullet
    ("+3", ["+3"]),
    ("1.5 million", ["1.5 million"]),
    ("2014-06-12", ["2014-06-12"]),
    ("Answer: 33.82.", ["33.82"]),  # the sentence's full stop goes, the decimal stays
    ("3. Paris", ["Paris"]),  # a real bullet
    ("1) Rome", ["Rome"]),
    ("1) Rome\n2) -4.5\n- 12.5", ["Rome", "-4.5", "12.5"]),
    ("0.5 | 1.25", ["0.5", "1.25"]),
])
def test_parse_answers_keeps_numbers_signs_and_dates_whole(reply, parsed):
    assert parse_answers(reply) == parsed


def test_the_answer_separator_reaches_the_prompt():
    """evaluate.answer_separator is what the prompt asks for (instruction and worked example) and what parsing
    splits on; the default prompt is unchanged."""
    kw = dict(question="who directed [Heat]", context="(Heat, directed_by, Michael Mann)", temperature=0.0,
              top_p=1.0, max_tokens=8, seed=1)
    default, semi = build_request(**kw), build_request(**kw, separator=";")
    assert default.messages == build_request(**kw, separator="|").messages
    assert "separated by ' | '" in default.messages[0][1] and default.messages[2][1] == "Entity Four | Entity Five"
    assert "separated by ' ; '" in semi.messages[0][1] and " | " not in semi.messages[0][1]
    assert semi.messages[2][1] == "Entity Four ; Entity Five"
    assert semi.messages[-1] == default.messages[-1]  # the question and its facts are not rewritten
    assert parse_answers(semi.messages[2][1], ";") == ["Entity Four", "Entity Five"]


def test_request_and_context():
    r = build_request(question="who directed [Heat]", context="(Heat, directed_by, Michael Mann)",
                      temperature=0.0, top_p=1.0, max_tokens=8, seed=1)
    assert "[Heat]" not in r.messages[-1][1] and "Heat" in r.messages[-1][1]
    assert "(Heat, directed_by, Michael Mann)" in r.messages[-1][1]
    assert clean_question("films by [A B]") == "films by A B"
    t = [("a", "r", "b"), ("b", "r", "c")]
    assert context_text(t, form="triples", max_triples=1) == "(a, r, b)"
    csv = context_text(t, form="csv", max_triples=2)
    assert csv.startswith("node_id,node_attr\n0,a\n1,b\n2,c") and "src,edge_attr,dst\n0,r,1\n1,r,2" in csv


def test_grouped_context_keeps_every_fact_in_fewer_lines():
    t = [("Heat", "starred_actors", "Al Pacino"), ("Heat", "directed_by", "Michael Mann"),
         ("Heat", "starred_actors", "Robert De Niro"), ("Heat", "starred_actors", "Al Pacino"),
         ("Ronin", "starred_actors", "Robert De Niro")]
    text = context_text(t, form="grouped", max_triples=60)
    assert text.splitlines() == ["(Heat, starred_actors, Al Pacino | Robert De Niro)",
                                 "(Heat, directed_by, Michael Mann)", "(Ronin, starred_actors, Robert De Niro)"]
    # every triple of the first max_triples is in the text once, and none past it
    assert context_text(t, form="grouped", max_triples=1) == "(Heat, starred_actors, Al Pacino)"
    assert len(text) < len(context_text(t, form="triples", max_triples=60))


def test_scores():
    s = answer_scores(prediction="The Heat | Collateral", predicted=["The Heat", "Collateral"], gold=["Heat"])
    assert s["hit_at_1"] == 1.0 and s["hit_any"] == 1.0 and s["em"] == 0.0
    assert s["precision"] == 0.5 and s["recall"] == 1.0 and s["f1"] == pytest.approx(2 / 3)
    s = answer_scores(prediction="I think Heat", predicted=["I think Heat"], gold=["Heat", "Ali"])
    assert s["hit_at_1"] == 0.0 and s["hit_any"] == 1.0
    s = answer_scores(prediction="Heath Ledger", predicted=["Heath Ledger"], gold=["Heat"])
    assert s["hit_any"] == 0.0  # whole words only
    assert answer_scores(prediction="", predicted=[], gold=["x"])["f1"] == 0.0
    assert normalize("  The  Heat! ") == "heat"


def test_retrieval_recall():
    assert retrieval_recall(answer_ids=[1, 2], node_ids=[2, 3]) == 0.5
    assert retrieval_recall(answer_ids=[], node_ids=[1]) is None


def test_evaluate_rows_counts_failures():
    qs = [{S.QUESTION_ID: "a", S.TEXT: "q", S.ANSWERS: ["x"], S.ANSWER_IDS: [1]},
          {S.QUESTION_ID: "b", S.TEXT: "q", S.ANSWERS: ["y"], S.ANSWER_IDS: [2]}]
    ret = [{S.QUESTION_ID: "a", S.NODE_IDS: [1], S.TRIPLE_HEADS: [1]},
           {S.QUESTION_ID: "b", S.NODE_IDS: [], S.TRIPLE_HEADS: []}]
    gen = [{S.QUESTION_ID: "a", S.PREDICTION: "x", S.PREDICTED_ANSWERS: ["x"], S.FAILED: False},
           {S.QUESTION_ID: "b", S.PREDICTION: "", S.PREDICTED_ANSWERS: [], S.FAILED: True}]
    rows, m = evaluate_rows(questions=qs, retrieved=ret, generations=gen)
    assert m["questions"] == 2 and m["failed"] == 1
    assert m["hit_at_1"] == 0.5 and m["retrieval_recall"] == 0.5


def test_stage_metrics_per_module():
    import json

    qs = [{S.QUESTION_ID: "a", S.ANSWER_IDS: [1, 2]}, {S.QUESTION_ID: "b", S.ANSWER_IDS: [3]},
          {S.QUESTION_ID: "c", S.ANSWER_IDS: []}]
    stages_a = [{"stage": "extract", "module": "ppr", "node_ids": [1, 2, 5, 6]},
                {"stage": "refine", "module": "bm25", "node_ids": [1]}]
    stages_b = [{"stage": "extract", "module": "ppr", "node_ids": [7]},
                {"stage": "refine", "module": "bm25", "node_ids": []}]
    # the wall times are a run-record column (stage_ms, one per trace stage), not part of the trace
    ret = [{S.QUESTION_ID: "a", S.TRACE: json.dumps({"stages": stages_a}), S.STAGE_MS: [2.0, 4.0]},
           {S.QUESTION_ID: "b", S.TRACE: json.dumps({"stages": stages_b}), S.STAGE_MS: [4.0, 2.0]},
           {S.QUESTION_ID: "c", S.TRACE: json.dumps({"stages": stages_a}), S.STAGE_MS: [1.0, 1.0]},  # no answers
           {S.QUESTION_ID: "d", S.TRACE: json.dumps({"method": "pcst"}), S.STAGE_MS: None}]
    m = {x["stage"]: x for x in stage_metrics(questions=qs, retrieved=ret)}
    assert [x["stage"] for x in stage_metrics(questions=qs, retrieved=ret)] == ["extract", "refine"]
    ex, rf = m["extract"], m["refine"]
    assert ex["questions"] == 2 and ex["module"] == "ppr"
    assert ex["precision"] == pytest.approx((0.5 + 0.0) / 2) and ex["recall"] == pytest.approx(0.5)
    assert ex["hit"] == 0.5 and ex["nodes_mean"] == 2.5 and ex["ms_mean"] == 3.0
    assert rf["precision"] == pytest.approx(0.5) and rf["recall"] == pytest.approx(0.25)
    assert rf["f1"] == pytest.approx((2 * 1 * 0.5 / 1.5) / 2)
    # rows as retrieved.parquet holds them (no run-record column): the same metrics, no time
    bare = stage_metrics(questions=qs, retrieved=[{k: v for k, v in r.items() if k != S.STAGE_MS} for r in ret])
    assert all(x["ms_mean"] is None and x["ms_median"] is None for x in bare)
    assert [{k: v for k, v in x.items() if not k.startswith("ms_")} for x in bare] == \
        [{k: v for k, v in x.items() if not k.startswith("ms_")} for x in m.values()]
    # ... with the run records' times by question id; a list that does not match the trace's stages is not used
    rec = stage_metrics(questions=qs, retrieved=ret, stage_ms={"a": [6.0, 1.0], "b": [9.0]})
    assert rec[0]["ms_mean"] == 6.0 and rec[1]["ms_median"] == 1.0
