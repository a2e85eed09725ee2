"""Reasoner core: the batched driver, the baselines and the parsers (scripted LLM)."""

from __future__ import annotations

import json

import pytest

from kgrag import schema as S
from kgrag.llm.calls import LLMClient, LLMReply, LLMRequest
from kgrag.reasoning.reasoners import REASONERS, ReasonInput, Reasoning, Sampling, rows_of, run_batched
from kgrag.reasoning.reasoners.parsing import final_answer, majority, parse_choices, parse_score, parse_yes_no
from kgrag.types import Question


class Scripted:
    """Replies with a function of the last user message; records every batch it gets."""

    model_id = "scripted"

    def __init__(self, reply):
        self.reply, self.batches = reply, []

    def generate(self, requests):
        self.batches.append(len(requests))
        return [LLMReply(text=self.reply(r), tokens_in=5, tokens_out=2) for r in requests]


def _q(i: int) -> Question:
    return Question(f"q{i}", f"who directed [Film {i}]", (i,), (), (f"Director {i}",))


def steps_job(k: int):
    """A reasoner that makes ``k`` steps of 2 calls each, then answers with what the last step said."""
    last = ""
    for step in range(k):
        recs = yield [LLMRequest(messages=(("user", f"{k}-{step}-{j}"),)) for j in range(2)]
        last = recs[-1].reply.text
    return Reasoning(answer=last, depth=k)


def test_driver_sends_one_batch_per_step_for_all_active_questions():
    b = Scripted(lambda r: "echo " + r.messages[-1][1])
    out = run_batched(jobs=[steps_job(1), steps_job(3), steps_job(2), steps_job(0)], client=LLMClient(b, cache=None))
    # step 1: jobs 1, 2, 3 active (2 calls each); step 2: jobs 2, 3; step 3: job 2
    assert b.batches == [6, 4, 2]
    assert [r.answer for r, _ in out] == ["echo 1-0-1", "echo 3-2-1", "echo 2-1-1", ""]
    assert [len(c) for _, c in out] == [2, 6, 4, 0] and [r.depth for r, _ in out] == [1, 3, 2, 0]


def test_a_questions_time_is_its_own_steps_and_calls_not_a_share_of_the_batch():
    """GENERATE_MS: a question that makes no call gets its own (short) time, not the batch's mean; one whose
    step works longer gets that time; calls add their latencies."""
    import time as _time

    class Slow:
        model_id = "slow"

        def generate(self, requests):
            _time.sleep(0.2)
            return [LLMReply(text="x", tokens_in=5, tokens_out=1, latency_ms=100.0) for _ in requests]

    def busy_then_answer():
        _time.sleep(0.05)  # own work before answering, no call
        return Reasoning(answer="a")
        yield  # noqa: unreachable: a generator

    own: list[float] = []
    results = run_batched(jobs=[steps_job(0), busy_then_answer(), steps_job(1)], client=LLMClient(Slow(), cache=None),
                          own_ms=own)
    rows = rows_of(question_ids=["q0", "q1", "q2"], results=results, reasoner="answer", separator="|", seed=0,
                   per_q_ms=999.0, own_ms=own)
    ms = [r[S.GENERATE_MS] for r in rows]
    assert ms[0] < 20  # no call, no work: not the batch's 999 ms mean (nor its 200 ms of calls)
    assert 50 <= ms[1] < 150
    assert 200 <= ms[2] < 300  # its two calls' 100 ms latencies plus its own few ms


def test_driver_max_batch_chunks_a_step():
    b = Scripted(lambda r: "x")
    run_batched(jobs=[steps_job(1) for _ in range(5)], client=LLMClient(b, cache=None), max_batch=4)
    assert b.batches == [4, 4, 2]


@pytest.mark.parametrize("name,reply,want", [
    ("answer", "Director 0", "Director 0"),
    ("io", "Director 0", "Director 0"),
    ("cot", "Film 0 was directed by D.\nAnswer: Director 0", "Director 0"),
])
def test_baselines_answer(name, reply, want):
    b = Scripted(lambda r: reply)
    entry = REASONERS.get(name)
    job = entry.impl(inp=ReasonInput(question=_q(0), context="(Film 0, directed_by, Director 0)"),
                     params=entry.params())
    (res, calls), = run_batched(jobs=[job], client=LLMClient(b, cache=None))
    assert res.answer == want and len(calls) == 1 and res.unparseable == 0


def test_answer_uses_the_context_and_io_does_not():
    seen = []
    b = Scripted(lambda r: seen.append(r.messages[-1][1]) or "x")
    for name in ("answer", "io"):
        entry = REASONERS.get(name)
        run_batched(jobs=[entry.impl(inp=ReasonInput(question=_q(0), context="(Film 0, directed_by, D)"),
                                     params=entry.params())], client=LLMClient(b, cache=None))
    assert "directed_by" in seen[0] and "directed_by" not in seen[1]


def test_cot_sc_majority_over_seeded_samples():
    answers = iter(["Answer: A", "Answer: B", "Answer: B", "no answer line", "Answer: A"])
    b = Scripted(lambda r: next(answers))
    entry = REASONERS.get("cot-sc")
    job = entry.impl(inp=ReasonInput(question=_q(0), context="", sampling=Sampling(seed=7)),
                     params=entry.params(samples=5, temperature=0.7))
    (res, calls), = run_batched(jobs=[job], client=LLMClient(b, cache=None))
    # a 2-2 tie: the earliest answer wins (parsing.majority), not the later or the larger one
    assert b.batches == [5] and res.answer == "A" and res.unparseable == 1
    seeds = sorted(json.loads(json.dumps([c.key for c in calls])))
    assert len(set(seeds)) == 5  # distinct seeds: distinct calls


def test_rows_record_calls_trace_and_failure():
    class Failing:
        model_id = "f"

        def generate(self, requests):
            return [LLMReply(error="boom") for _ in requests]

    entry = REASONERS.get("answer")
    client = LLMClient(Failing(), cache=None, retries=1, backoff_s=0.0)
    results = run_batched(jobs=[entry.impl(inp=ReasonInput(question=_q(0), context=""), params=entry.params())],
                          client=client)
    (row,) = rows_of(question_ids=["q0"], results=results, reasoner="answer", separator="|", seed=0, per_q_ms=1.0)
    assert row[S.FAILED] and row[S.LLM_CALLS] == 2 and row[S.REQUESTS] == 1 and "boom" in row[S.ERROR]
    trace = json.loads(row[S.TRACE])
    assert trace["calls"][0]["error"] == "boom"


def test_parsers_are_robust():
    assert parse_choices("I pick {B}.", 3) == [1]
    assert parse_choices("{C} and {A} and {C}", 3, k=2) == [2, 0]
    assert parse_choices("Option B is best", 3) == [1]
    assert parse_choices("{Z}", 3) is None and parse_choices("", 3) is None
    assert parse_yes_no("Yes, it is.") is True and parse_yes_no("no") is False and parse_yes_no("maybe") is None
    assert parse_score("score: 0.8") == 0.8 and parse_score("7", 0, 1) == 1.0 and parse_score("none") is None
    assert final_answer("blah\nAnswer: X | Y") == "X | Y" and final_answer("nothing") is None
    assert majority(["a", "B", "b", ""]) == "B" and majority(["", " "]) == ""
