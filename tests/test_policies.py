"""The three policies the graph reasoners share (kgrag.reasoning.reasoners.policies): a decision generated and parsed
or scored, the answer ranked or generated with its fallback, no demonstrations; each as the reasoners rely on it
(the reasoners' own tests check them in place: test_tog_fasttog, test_decide_*, test_agent_explore)."""

from __future__ import annotations

import pytest

from kgrag.llm.calls import CallRecord, LLMReply, LLMRequest, score_reply_text
from kgrag.reasoning.reasoners import REASONERS, ReasonInput, Sampling
from kgrag.reasoning.reasoners import policies as P
from kgrag.types import Question


def rec(text: str) -> CallRecord:
    return CallRecord(key="k", reply=LLMReply(text=text), cached=False, attempts=1)


def scores(*lps: float) -> CallRecord:
    return rec(score_reply_text([(lp, 1) for lp in lps]))


def drive(gen, replies):
    """Run a policy's generator: each yielded batch answered by the next of ``replies``; (batches, result)."""
    batches = []
    try:
        batch = next(gen)
        while True:
            batches.append(batch)
            batch = gen.send(replies[len(batches) - 1])
    except StopIteration as stop:
        return batches, stop.value


def inp(**q) -> ReasonInput:
    return ReasonInput(question=Question("q", "who directed [Heat]", (0,), **q), context="", sampling=Sampling())


def test_generate_decider_reads_letters_and_falls_back_to_the_pre_rank():
    d = P.GenerateDecider()
    paper = LLMRequest(messages=(("user", "pick"),))
    assert d.request(["a", "b"], ask=lambda: "never asked", paper=lambda: paper) is paper
    assert d.choose(rec("{B} {A}"), 3, 2) == P.Choice([1, 0], True, "{B} {A}")
    # no readable letter: the first k, counted unparseable by the caller
    assert d.choose(rec("no idea"), 3, 2) == P.Choice([0, 1], False, "no idea")
    # with a "none of them" option (the 4th letter here): chosen first, it chooses nothing
    assert d.choose(rec("{D}"), 3, 1, none=True) == P.Choice([], True, "{D}")
    assert d.choose(rec("{C} {D}"), 3, 1, none=True).positions == [2]


def test_score_decider_scores_the_options_and_takes_the_best():
    d = P.ScoreDecider(Sampling(seed=7), "sum")
    req = d.request(["a", "b", "c"], ask=lambda: "which?", paper=None, system="SYS")
    assert req.continuations == ("a", "b", "c") and req.messages == (("system", "SYS"), ("user", "which?"))
    assert req.seed == 7 and req.max_tokens == 1
    got = d.choose(scores(-3.0, -1.0, -2.0), 3, 2)
    assert got.positions == [1, 2] and got.scores == [-3.0, -1.0, -2.0] and got.parsed and got.reply == ""
    # "none of them" scored best: nothing chosen; a failed call: the pre-rank's first, no scores
    assert d.choose(scores(-3.0, -2.0, -0.5), 2, 1, none=True).positions == []
    assert d.choose(rec(""), 3, 2) == P.Choice([0, 1], True, "", None)


@pytest.mark.parametrize("decide, answer, adapted", [("generate", "generate", False), ("score", "generate", True),
                                                     ("generate", "rank", True), ("score", "rank", True)])
def test_the_factory_builds_what_the_params_say(decide, answer, adapted):
    params = REASONERS.get("tog").params(decide=decide, answer=answer)
    pol = P.policies_of(params, inp(), ["Heat"])
    assert pol.decide.scored == (decide == "score") and pol.answer.ranks == (answer == "rank")
    assert pol.scored_check == (decide == "score" and answer == "rank")
    assert isinstance(pol.demos, P.NoDemos) and not pol.demos.active
    assert pol.demos.best({("r",): [1]}) == (None, None) and pol.demos.best_state(["s"], "d") == "d"
    trace: dict = {}
    pol.stamp(trace)
    pol.demos.stamp(trace)
    assert trace == ({"decide": decide, "answer": answer} if adapted else {})


def test_rank_answers_one_name_without_a_call_and_many_with_one():
    ans = P.RankAnswerer(inp(), margin=0.0)
    trace: dict = {}
    batches, got = drive(ans.rank(facts=["(Heat, directed_by, Michael Mann)"], ids={"Michael Mann": 3},
                                  trace=trace), [])
    assert batches == [] and got == P.Ranked("Michael Mann", [["Michael Mann", None]], ("Michael Mann",), 0)
    assert trace["no_call"]
    batches, got = drive(ans.rank(facts=[], ids={"A": 1, "B": 2}, trace={}), [[scores(-2.0, -1.0)]])
    assert [r.continuations for (r,) in batches] == [("A", "B")]
    assert got.answer == "B" and got.picked == ("B",) and got.calls == 1
    res = P.ranked(got, depth=2, trace=(t := {}), unparseable=1, stop="answered")
    assert list(t) == ["stop", "answer_from", "rank_top"] and res.answers == ("B",) and res.depth == 2


def test_the_fallback_is_io_as_is_or_chain_of_thought_read():
    ans = P.GenerateAnswerer(inp())
    batches, got = drive(ans.fallback("io"), [[rec(" Michael Mann \n")]])
    assert got == P.Fallback("Michael Mann", 0, " Michael Mann \n")
    assert "Answer:" in batches[0][0].messages[-1][1]
    _, got = drive(ans.fallback("cot", facts="(Heat, directed_by, Michael Mann)"), [[rec("so\nAnswer: Michael Mann")]])
    assert got.answer == "Michael Mann" and got.unparseable == 0
    _, got = drive(ans.fallback("cot"), [[rec("thinking\nMichael Mann")]])
    assert got.answer == "Michael Mann" and got.unparseable == 1  # no Answer: line, its last line


def test_final_ranks_what_was_reached_else_the_generated_answer_else_none():
    gen, rank = P.GenerateAnswerer(inp()), P.RankAnswerer(inp())
    kw = dict(facts=["(Heat, directed_by, Michael Mann)"], trace={}, depth=3, unparseable=0)
    # generate: the generated answer without a call, or None (the reasoner's fallback answers)
    batches, res = drive(gen.final(ids={"A": 1, "B": 2}, generated="Al", **kw), [])
    assert batches == [] and res.answer == "Al" and res.depth == 3
    assert drive(gen.final(ids={"A": 1}, generated=None, **kw), []) == ([], None)
    # rank: one call over the names reached; nothing reached (and no choices): as generate
    batches, res = drive(rank.final(ids={"A": 1, "B": 2}, generated="Al", **kw), [[scores(-1.0, -2.0)]])
    assert len(batches) == 1 and res.answer == "A" and res.trace["answer_from"] == "rank"
    assert drive(rank.final(ids={}, generated=None, **kw), []) == ([], None)
    # a label task ranks its choices even when nothing was reached
    labelled = P.RankAnswerer(inp(choices=("yes", "no")))
    batches, res = drive(labelled.final(ids={}, generated=None, **kw), [[scores(-3.0, -1.0)]])
    assert batches[0][0].continuations == ("yes", "no") and res.answer == "no"
