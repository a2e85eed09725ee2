"""Constrained decoding (request fields, cache keys, grammars, backends' request bodies), the constrained
`answer` reasoner, Rouge-L, the LLM judge and the new aggregates of evaluate_rows."""

from __future__ import annotations

import json

import pytest

from kgrag import schema as S
from kgrag.llm.backends.openai import OpenAIBackend, OpenAIParams
from kgrag.llm.constrain import (
    choice_grammar, constrain_entities, constrain_letters, constrain_yes_no, context_entities, gbnf_literal,
    grammar_of, list_grammar, option_letters,
)
from kgrag.evaluation.evaluate import evaluate_rows, judge_request, judge_scores, lcs_length, parse_verdict, rouge_l
from kgrag.llm.prompts import DEMO_NAMES
from kgrag.llm.calls import CallCache, LLMClient, LLMReply, LLMRequest, call_key
from kgrag.params import load
from kgrag.reasoning.reasoners import ReasonInput, Sampling, run_batched
from kgrag.reasoning.reasoners.answer import answer
from kgrag.registry import NoParams
from kgrag.llm.textualize import csv_text, triples_text
from kgrag.types import Question


def test_call_key_of_unconstrained_requests_is_unchanged():
    # keys computed before `choices` / `grammar` existed: existing caches stay valid
    assert call_key("m", LLMRequest(messages=(("user", "hi"),))) == \
        "8e229827328aafd28029a575e61906b6f4be40dd7d60d973ad3a2a99ced30623"
    req = LLMRequest(messages=(("system", "s"), ("user", "q")), temperature=0.7, max_tokens=12, seed=3, stop=("\n",))
    assert call_key("llamacpp:x.gguf", req) == "82efe339004987b0a8822934b361b8bb9b45d7478476a21b301434efba8330d0"


def test_call_key_distinguishes_constraints():
    base = LLMRequest(messages=(("user", "hi"),))
    keys = {call_key("m", base), call_key("m", constrain_yes_no(base)), call_key("m", constrain_letters(base, 3)),
            call_key("m", LLMRequest(messages=(("user", "hi"),), grammar='root ::= "a"')),
            call_key("m", LLMRequest(messages=(("user", "hi"),), grammar=""))}
    assert len(keys) == 5
    assert not base.constrained and constrain_yes_no(base).constrained


def test_cache_row_of_unconstrained_request_has_no_new_fields(tmp_path):
    cache = CallCache(tmp_path / "c.sqlite")
    req = LLMRequest(messages=(("user", "hi"),))
    cache.put(call_key("m", req), "m", req, LLMReply("x"))
    row = cache._con().execute("SELECT request FROM llm_calls").fetchone()[0]
    assert set(json.loads(row)) == {"messages", "temperature", "top_p", "max_tokens", "seed", "stop"}


def test_gbnf_literal_escapes():
    assert gbnf_literal('a "b" \\ c\nd') == r'"a \"b\" \\ c\nd"'
    assert choice_grammar(["Yes", "No", "Yes"]) == 'root ::= "Yes" | "No"\n'
    assert list_grammar(["A", "B"]) == 'root ::= item (" | " item)*\nitem ::= "A" | "B"\n'
    assert list_grammar(["A"], max_items=3) == 'root ::= item (" | " item){0,2}\nitem ::= "A"\n'
    with pytest.raises(ValueError):
        choice_grammar([])


def test_constraint_helpers():
    r = LLMRequest(messages=(("user", "q"),))
    assert option_letters(3) == ("{A}", "{B}", "{C}")
    assert constrain_letters(r, 2).choices == ("{A}", "{B}")
    assert constrain_yes_no(r).choices == ("Yes", "No")
    assert grammar_of(constrain_yes_no(r)) == 'root ::= "Yes" | "No"\n'
    assert grammar_of(r) is None
    one = constrain_entities(r, ["Heat", "Al Pacino"], multiple=False)
    assert one.choices == ("Heat", "Al Pacino") and one.grammar is None
    many = constrain_entities(r, ["Heat", "Al Pacino"])
    assert many.grammar == 'root ::= item (" | " item)*\nitem ::= "Heat" | "Al Pacino"\n' and not many.choices
    assert constrain_entities(r, []) is r


class _KG:
    relation_names = ["directed_by", "starred_actors"]


def test_context_entities_from_triples_and_csv():
    triples = [("Heat", "directed_by", "Michael Mann"), ("Heat", "starred_actors", "Al Pacino"),
               ("Crosby, Stills, Nash & Young", "starred_actors", "Neil Young, Jr.")]
    want = ["Heat", "Michael Mann", "Al Pacino", "Crosby, Stills, Nash & Young", "Neil Young, Jr."]
    assert context_entities(triples_text(triples), _KG()) == want
    assert context_entities(triples_text(triples)) == want  # identifier-like relation found without the KG
    assert context_entities(csv_text(triples)) == want
    assert context_entities("") == []


def test_grouped_context_reads_back_as_the_triples_context():
    """Agreement: the ``grouped`` form (a line per head and relation) yields the same entities, pairs and
    distances as the ``triples`` form of the same triples, so rank's candidates do not depend on the form."""
    from kgrag.llm.constrain import context_distances
    from kgrag.llm.textualize import grouped_text

    triples = [("Heat", "starred_actors", "Al Pacino"), ("Heat", "directed_by", "Michael Mann"),
               ("Heat", "starred_actors", "Robert De Niro"), ("The Irishman", "starred_actors", "Al Pacino"),
               ("Crosby, Stills, Nash & Young", "starred_actors", "Neil Young, Jr."),
               ("Crosby, Stills, Nash & Young", "starred_actors", "Al Pacino")]
    g, t = grouped_text(triples), triples_text(triples)
    assert len(g.splitlines()) == 4
    for kg in (_KG(), None):
        assert sorted(context_entities(g, kg)) == sorted(context_entities(t, kg))
        assert context_distances(g, {"Michael Mann"}, kg) == context_distances(t, {"Michael Mann"}, kg)


def test_openai_body_carries_constraint_for_both_servers():
    b = OpenAIBackend(OpenAIParams())
    r = LLMRequest(messages=(("user", "q"),))
    assert b.constraint_fields(r) == {}
    assert b.constraint_fields(constrain_yes_no(r)) == {"grammar": 'root ::= "Yes" | "No"\n',
                                                       "guided_choice": ["Yes", "No"]}
    g = constrain_entities(r, ["A", "B"])
    assert b.constraint_fields(g) == {"grammar": g.grammar, "guided_grammar": g.grammar}
    only = OpenAIBackend(OpenAIParams(constraint="vllm"))
    assert only.constraint_fields(constrain_yes_no(r)) == {"guided_choice": ["Yes", "No"]}


class _Scripted:
    """Backend replying from a function of the request; records what it was sent."""

    model_id = "scripted"

    def __init__(self, fn):
        self.fn = fn
        self.sent: list[LLMRequest] = []

    def generate(self, requests):
        self.sent.extend(requests)
        return [LLMReply(text=self.fn(r), tokens_in=10, tokens_out=2) for r in requests]


def _q(text="who directed [Heat]", answers=("Michael Mann",)):
    return Question(question_id="q1", text=text, topic_ids=(0,), answers=tuple(answers), answer_ids=(1,))


def test_answer_reasoner_constrained_to_context_entities():
    ctx = triples_text([("Heat", "directed_by", "Michael Mann"), ("Heat", "starred_actors", "Al Pacino")])
    be = _Scripted(lambda r: "Michael Mann")
    client = LLMClient(be, cache=None)
    jobs = [answer(inp=ReasonInput(question=_q(), context=ctx, sampling=Sampling(), constrain_answer=c),
                   params=NoParams()) for c in (False, True)]
    (free, _), (con, _) = run_batched(jobs=jobs, client=client)
    assert free.answer == con.answer == "Michael Mann"
    assert not be.sent[0].constrained
    assert be.sent[1].grammar == list_grammar(["Heat", "Michael Mann", "Al Pacino"])
    assert con.trace["constrained_to"] == 3
    # the same prompt otherwise, but a constrained output needs (and shows) no worked example (issue 15 item 4)
    free_msgs, con_msgs = be.sent[0].messages, be.sent[1].messages
    assert con_msgs == (free_msgs[0], free_msgs[-1]) and len(free_msgs) == 4
    assert any(n in m for n in DEMO_NAMES for _, m in free_msgs)
    assert not any(n in m for n in DEMO_NAMES for _, m in con_msgs)


def test_constrain_answer_param_defaults_off():
    p = load("params.yaml")
    assert p.reason.constrain_answer is False and p.evaluate.judge is False
    assert p.evaluate.judge_backend.backend == "llamacpp"
    assert load("params.yaml", ["reason.constrain_answer=true"]).reason.constrain_answer is True


def test_lcs_and_rouge_l_hand_computed():
    assert lcs_length("a b c d e".split(), "a c e f".split()) == 3
    # prediction: michael mann and martin scorsese (5 words); reference: michael mann al pacino (4)
    # LCS = "michael mann" = 2 → P = 2/5, R = 2/4, F1 = 2·0.4·0.5 / 0.9 = 4/9
    assert rouge_l("Michael Mann and Martin Scorsese", "Michael Mann | Al Pacino") == pytest.approx(4 / 9)
    assert rouge_l("Al Pacino", "Al Pacino") == 1.0
    assert rouge_l("", "Al Pacino") == 0.0 and rouge_l("x", "") == 0.0


def test_parse_verdict():
    assert parse_verdict("Yes") is True
    assert parse_verdict("**No**.") is False
    assert parse_verdict("The answer is correct.") is True
    assert parse_verdict("Incorrect") is False
    assert parse_verdict("maybe") is None and parse_verdict("") is None


def test_judge_scores_count_unparseable_as_no():
    replies = {"A": "Yes, it matches.", "B": "No", "C": "hmm"}
    be = _Scripted(lambda r: replies[r.messages[1][1].split("Model Answer: ")[1][0]])
    got = judge_scores(client=LLMClient(be, cache=None),
                       items=[("q", ["A"], "A"), ("q", ["A"], "B"), ("q", ["A"], "C"), ("q", ["A"], "  ")])
    assert [g["judge"] for g in got] == [1.0, 0.0, 0.0, 0.0]
    assert [g["judge_parsed"] for g in got] == [True, True, False, True]
    assert len(be.sent) == 3  # no call for the empty prediction
    req = judge_request(question="who directed [Heat]", gold=["Michael Mann", "X"], prediction="Michael Mann")
    assert "Question: who directed Heat" in req.messages[1][1]
    assert "Ground Truth Answer: Michael Mann | X\nModel Answer: Michael Mann" in req.messages[1][1]


def _rows():
    questions = [{S.QUESTION_ID: f"q{i}", S.TEXT: f"question {i}", S.ANSWERS: [a], S.ANSWER_IDS: [i], S.QTYPE: "t",
                  S.HOPS: 2} for i, a in enumerate(["Michael Mann", "Al Pacino"])]
    gens = [{S.QUESTION_ID: "q0", S.PREDICTION: "Michael Mann", S.PREDICTED_ANSWERS: ["Michael Mann"],
             S.TOKENS_IN: 100, S.TOKENS_OUT: 4, S.LLM_CALLS: 1, S.REQUESTS: 1, S.DEPTH: 0},
            {S.QUESTION_ID: "q1", S.PREDICTION: "Robert De Niro", S.PREDICTED_ANSWERS: ["Robert De Niro"],
             S.TOKENS_IN: 300, S.TOKENS_OUT: 8, S.LLM_CALLS: 3, S.REQUESTS: 2, S.DEPTH: 2}]
    return questions, gens


def test_evaluate_rows_aggregates_rouge_depth_calls_tokens(tmp_path):
    questions, gens = _rows()
    rows, m = evaluate_rows(questions=questions, retrieved=[], generations=gens)
    assert [r["rouge_l"] for r in rows] == [1.0, 0.0]
    assert m["rouge_l"] == 0.5 and m["hit_at_1"] == 0.5
    assert m["depth_mean"] == 1.0 and m["reasoner_calls_per_question"] == 1.5
    # backend attempts depend on the call cache's state: a run record (kgrag.timings), no metric
    assert "llm_calls_per_question" not in m and S.LLM_CALLS not in rows[0]
    assert m["tokens_per_question"] == (104 + 308) / 2
    assert "judge" not in m and "judge" not in rows[0]
    be = _Scripted(lambda r: "Yes" if "Model Answer: Michael Mann" in r.messages[1][1] else "No")
    cache = CallCache(tmp_path / "llm.sqlite")
    rows, m = evaluate_rows(questions=questions, retrieved=[], generations=gens,
                            judge=LLMClient(be, cache=cache))
    assert [r["judge"] for r in rows] == [1.0, 0.0] and m["judge"] == 0.5 and m["judge_unparseable"] == 0
    assert len(cache) == 2  # judge calls go through the call cache: a re-run repeats none
    evaluate_rows(questions=questions, retrieved=[], generations=gens, judge=LLMClient(be, cache=cache))
    assert len(be.sent) == 2


def test_report_headline_has_new_metrics():
    from kgrag.reporting.report import names, timing_names

    NAMES, TIMING_NAMES = names(), timing_names()

    for k in ("rouge_l", "judge", "judge_unparseable", "depth_mean", "reasoner_calls_per_question",
              "tokens_per_question"):
        assert k in NAMES
    assert "llm_calls_per_question" in TIMING_NAMES and not set(NAMES) & set(TIMING_NAMES)
