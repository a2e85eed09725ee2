"""Label tasks (questions with ``choices``, e.g. ExplaGraphs' support / counter): declared by the loader in the
questions table, accepted by validate, listed (and constrained) in the answer prompts, scored by accuracy."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from kgrag import schema as S
from kgrag.evaluation.evaluate import evaluate_rows, label_scores, parse_label
from kgrag.llm.prompts import DEMO, build_request
from kgrag.llm.calls import LLMClient, LLMReply
from kgrag.kg.loaders.explagraphs import load_explagraphs
from kgrag.kg.loaders.jsonl import load_jsonl
from kgrag.reasoning.reasoners import REASONERS, ReasonInput, Sampling, run_batched
from kgrag.reporting.report import render
from kgrag.kg.store import questions_from_table
from kgrag.types import Question
from kgrag.kg.validate import validate_tables
from tests.conftest import MOVIES, SHARED, tiny_tables, need

EXPLA = SHARED / "data" / "explagraphs"
STANCE = ("support", "counter")


# ---- loaders declare the choices ---------------------------------------------------------------------------

def test_explagraphs_questions_carry_their_choices():
    need((EXPLA / "dev.tsv").exists(), "real ExplaGraphs data not found")
    kg = load_explagraphs(path=str(EXPLA), split="dev", sample=20, seed=1)
    qs = questions_from_table(kg.questions)
    assert len(qs) == 20
    assert all(q.choices == STANCE and q.answers[0] in STANCE and q.answer_ids == () for q in qs)
    assert all(q.graph_id == q.question_id for q in qs)


def test_jsonl_choices_good_and_bad(tmp_path):
    rows = [
        {"id": "ok", "question": "do they agree", "topic_entities": ["a"], "answers": ["support"],
         "choices": ["support", "counter"], "graph": [["a", "r", "b"]]},
        {"id": "outside", "question": "?", "topic_entities": ["a"], "answers": ["neutral"],
         "choices": ["support", "counter"], "graph": [["a", "r", "b"]]},
        {"id": "bad-choices", "question": "?", "topic_entities": ["a"], "answers": ["x"], "choices": "x",
         "graph": [["a", "r", "b"]]},
        {"id": "entity", "question": "what is linked to a", "topic_entities": ["a"], "answers": ["b"],
         "graph": [["a", "r", "b"]]},
    ]
    path = tmp_path / "q.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    kg = load_jsonl(path=str(path))
    reasons = {r[S.ROW]: r[S.REASON] for r in kg.quarantine.to_pylist()}
    assert reasons == {2: "answer 'neutral' is not one of the choices",
                       3: "choices must be a non-empty list of non-empty strings"}
    got = {q.question_id: q for q in questions_from_table(kg.questions)}
    assert got["ok"].choices == STANCE and got["ok"].answers == ("support",) and got["ok"].answer_ids == ()
    assert got["entity"].choices == () and len(got["entity"].answer_ids) == 1


# ---- validate -------------------------------------------------------------------------------------------------

def _q(qid, answers, answer_ids, choices=None, topics=(0,)):
    return {S.QUESTION_ID: qid, S.SPLIT: "dev", S.HOPS: None, S.TEXT: "t", S.QTYPE: "", S.TOPIC_IDS: list(topics),
            S.ANSWER_IDS: answer_ids, S.ANSWERS: answers, S.CHOICES: choices}


def test_validate_accepts_labels_and_rejects_answers_outside_the_choices():
    t = tiny_tables(MOVIES)
    t["questions"] = pa.Table.from_pylist([
        _q("label", ["support"], [None], ["support", "counter"]),
        _q("label-outside", ["neutral"], [None], ["support", "counter"]),
        _q("entity", ["Al Pacino"], [0]),
        _q("entity-not-in-kg", ["Nobody"], [None]),
    ], schema=S.QUESTIONS)
    res = validate_tables(t)
    reasons = {r[S.ROW]: r[S.REASON] for r in res.quarantine.to_pylist() if r[S.TABLE] == "questions"}
    assert reasons == {1: "answer is not one of the question's choices"}
    # an answer outside the KG is no bad row: the question is kept, flagged, and scored as a miss
    kept = res.tables["questions"]
    assert kept.column(S.QUESTION_ID).to_pylist() == ["label", "entity", "entity-not-in-kg"]
    assert kept.column(S.ANSWERABLE).to_pylist() == [True, True, False]
    assert res.summary["answerable"] == {"questions": 3, "not_answerable": 1, "no_topic": 0}


# ---- the prompt lists the choices; constrained decoding picks one ---------------------------------------------

def test_answer_prompt_lists_the_choices():
    label = build_request(question="Argument 1: a\nArgument 2: b", context="(a, r, b)", temperature=0.0, top_p=1.0,
                          max_tokens=8, seed=0, choices=STANCE)
    user = label.messages[-1][1]
    assert "Choices: support | counter" in user and user.endswith("Answer:")
    assert "one of the listed choices" in label.messages[0][1]
    assert all(DEMO[1] not in m for _, m in label.messages)  # the entity-list example is left out
    entity = build_request(question="who directed [Heat]", context="", temperature=0.0, top_p=1.0, max_tokens=8,
                           seed=0)
    assert "Choices" not in entity.messages[-1][1] and any(DEMO[1] in m for _, m in entity.messages)


class _Scripted:
    model_id = "scripted"

    def __init__(self, reply: str) -> None:
        self.reply, self.requests = reply, []

    def generate(self, requests):
        self.requests.extend(requests)
        return [LLMReply(text=self.reply, tokens_in=3, tokens_out=1) for _ in requests]


@pytest.mark.parametrize("method", ["answer", "io", "cot", "cot-sc"])
def test_reasoners_pass_the_choices(method):
    q = Question("q", "Argument 1: a\nArgument 2: b", (0,), (), ("counter",), graph_id="q", choices=STANCE)
    b = _Scripted("Answer: counter")
    entry = REASONERS.get(method)
    job = entry.impl(inp=ReasonInput(question=q, context="(a, r, b)", sampling=Sampling(), constrain_answer=True),
                     params=entry.params())
    (res, calls), = run_batched(jobs=[job], client=LLMClient(b, cache=None))
    assert "counter" in res.answer
    assert all("Choices: support | counter" in r.messages[-1][1] for r in b.requests)
    if method == "answer":  # constrained to exactly one label
        assert b.requests[0].choices == STANCE and res.trace["constrained_to"] == 2


# ---- accuracy -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("prediction,predicted,want", [
    ("support", ["support"], "support"),
    ("Counter.", ["Counter"], "counter"),
    ("The two arguments counter each other", ["The two arguments counter each other"], "counter"),
    ("Argument 2 supports argument 1", ["Argument 2 supports argument 1"], "support"),
    ("they are countered", ["they are countered"], "counter"),
    ("support or counter", ["support or counter"], None),  # both named: ambiguous
    ("support | counter", ["support", "counter"], None),  # both given as answers: ambiguous
    ("Support | the arguments do not counter", ["Support", "the arguments do not counter"], "support"),
    ("I am not sure", ["I am not sure"], None),
    ("", [], None),
    ("supportive", ["supportive"], None),  # not a word form the rule allows
])
def test_parse_label(prediction, predicted, want):
    assert parse_label(prediction=prediction, predicted=predicted, choices=STANCE) == want


def test_label_scores():
    assert label_scores(prediction="Support", predicted=["Support"], gold=["support"], choices=STANCE) == \
        {"label": "support", "correct": 1.0, "correct_gretriever": 1.0}
    assert label_scores(prediction="counter", predicted=["counter"], gold=["support"], choices=STANCE)["correct"] == 0.0


def test_evaluate_rows_accuracy_with_unparseable_and_failed():
    qs = [{S.QUESTION_ID: f"q{i}", S.TEXT: "t", S.ANSWERS: [g], S.ANSWER_IDS: [None], S.CHOICES: list(STANCE)}
          for i, g in enumerate(["support", "counter", "support", "counter", "support"])]
    preds = ["support", "support", "Counter", "they counter each other", ""]
    gen = [{S.QUESTION_ID: f"q{i}", S.PREDICTION: p, S.PREDICTED_ANSWERS: [p] if p else [], S.FAILED: not p}
           for i, p in enumerate(preds)]
    gen[2][S.PREDICTION] = "support or counter"  # unparseable, not failed
    gen[2][S.PREDICTED_ANSWERS] = ["support or counter"]
    rows, m = evaluate_rows(questions=qs, retrieved=[], generations=gen)
    assert [r["label"] for r in rows] == ["support", "support", None, "counter", None]
    # independent recomputation: correct = parsed label equals gold
    want = sum(r["label"] == q[S.ANSWERS][0] for r, q in zip(rows, qs)) / len(qs)
    assert m["task"] == "label" and m["accuracy"] == pytest.approx(want) == pytest.approx(2 / 5)
    assert m["accuracy_answered"] == pytest.approx(2 / 4)
    assert m["label_unparseable"] == 1 and m["failed"] == 1
    assert m["label_counts"] == {"counter": 1, "failed": 1, "support": 2, "unparseable": 1}
    assert m["retrieval_recall"] is None  # no answer entities
    md = render(metrics={**m, "setup": {"dataset": "explagraphs", "split": "dev", "task": "label"}}, rows=rows,
                figure="f.png", examples=2, validation=None)
    assert "Accuracy (label task" in md and f"| {m['accuracy']:.3f} |" in md and "(label task)" in md
    assert "label support of support / counter, correct 1" in md


def test_entity_questions_keep_their_metrics_and_mixed_task():
    qs = [{S.QUESTION_ID: "e", S.TEXT: "t", S.ANSWERS: ["Heat"], S.ANSWER_IDS: [1]},
          {S.QUESTION_ID: "l", S.TEXT: "t", S.ANSWERS: ["support"], S.ANSWER_IDS: [None], S.CHOICES: list(STANCE)}]
    gen = [{S.QUESTION_ID: "e", S.PREDICTION: "Heat", S.PREDICTED_ANSWERS: ["Heat"], S.FAILED: False},
           {S.QUESTION_ID: "l", S.PREDICTION: "counter", S.PREDICTED_ANSWERS: ["counter"], S.FAILED: False}]
    rows, m = evaluate_rows(questions=qs, retrieved=[], generations=gen)
    assert m["task"] == "mixed" and m["accuracy"] == 0.0  # over the label question only
    assert rows[0]["correct"] is None and rows[0]["hit_at_1"] == 1.0
    _, only_entity = evaluate_rows(questions=qs[:1], retrieved=[], generations=gen[:1])
    assert only_entity["task"] == "entity" and "accuracy" not in only_entity
