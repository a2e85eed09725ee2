"""The ``rank`` reasoner and continuation scoring: ranking rules (scripted scores), the reasoner's candidates and
calls (scripted client), and agreement of the llama.cpp multi-sequence scorer with a from-scratch computation on
the real SmolLM2."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from kgrag.llm.prompts import build_request
from kgrag.llm.calls import CallCache, LLMClient, LLMReply, call_key, score_reply_text, scores_of
from kgrag.reasoning.reasoners import REASONERS, ReasonInput, Sampling, run_batched
from kgrag.reasoning.reasoners.rank import RankParams, rank_candidates
from kgrag.types import Question

CONTEXT = ("(Heat, directed_by, Michael Mann)\n(Heat, starred_actors, Al Pacino)\n"
           "(The Irishman, starred_actors, Al Pacino)\n(The Irishman, directed_by, Martin Scorsese)")


def test_rank_candidates_normalization_rounding_and_ties():
    names = ["b", "a", "c", "d"]
    scores = [(-2.0, 2), (-1.00001, 1), (-3.0, 1), (-1.0, 1)]
    # mean: b -1.0, a -1.0 (rounded), c -3, d -1.0: ties broken by id, then by name
    got = rank_candidates(names, scores, normalize="mean", ids={"d": 5, "b": 7, "a": 9})
    assert [n for n, _ in got] == ["d", "b", "a", "c"]
    got = rank_candidates(names, scores, normalize="sum")
    assert [n for n, _ in got] == ["a", "d", "b", "c"]
    assert got[0][1] == -1.0


class ScoringScript:
    """Scores each continuation by a fixed table; records the requests."""

    model_id = "script"

    def __init__(self, table):
        self.table, self.requests = table, []

    def generate(self, requests):
        self.requests += list(requests)
        return [LLMReply(text=score_reply_text([(self.table.get(c, -9.0), 1) for c in r.continuations]))
                if r.scoring else LLMReply(error="not a scoring request") for r in requests]


def _run(question, params=RankParams(), table=None, cache=None, proposed=()):
    backend = ScoringScript(table or {})
    client = LLMClient(backend, cache=cache)
    job = REASONERS.get("rank").impl(inp=ReasonInput(question=question, context=CONTEXT, sampling=Sampling(),
                                                     proposed=proposed), params=params)
    (res, recs), = run_batched(jobs=[job], client=client)
    return res, recs, backend


def test_rank_reports_the_entities_it_chose_not_a_reparse_of_them():
    """The candidates rank chose are the question's parsed answers as they are: names that read as list bullets,
    or end in a full stop are not cut by parse_answers (one candidate, no call, too)."""
    from kgrag import schema as S
    from kgrag.reasoning.reasoners import rows_of

    ctx = "(Item, value, 33.82)\n(Item, winner, 3. Paris)\n(Item, actor, Robert Downey Jr.)"
    q = Question("q1", "what is the value of [Item]", topic_ids=())
    table = {"3. Paris": -0.1, "Robert Downey Jr.": -0.2, "33.82": -0.4, "Item": -9.0}
    job = REASONERS.get("rank").impl(inp=ReasonInput(question=q, context=ctx, sampling=Sampling()),
                                     params=RankParams(top_k=3))
    (res, recs), = run_batched(jobs=[job], client=LLMClient(ScoringScript(table), cache=None))
    (row,) = rows_of(question_ids=["q1"], results=[(res, recs)], reasoner="rank", separator="|", seed=0,
                     per_q_ms=0.0)
    assert row[S.PREDICTED_ANSWERS] == ["3. Paris", "Robert Downey Jr.", "33.82"]
    assert row[S.PREDICTION] == "3. Paris | Robert Downey Jr. | 33.82"  # the text, as before
    one = REASONERS.get("rank").impl(inp=ReasonInput(question=q, context="(Item, winner, 3. Paris)",
                                                     sampling=Sampling()), params=RankParams())
    (res1, recs1), = run_batched(jobs=[one], client=LLMClient(ScoringScript({}), cache=None))
    assert recs1 == [] and res1.answers == ("3. Paris",)


def test_rank_reasoner_candidates_topic_excluded_and_top_k():
    q = Question("q1", "who directed the movies starred by [Al Pacino]", topic_ids=())
    res, recs, b = _run(q, RankParams(top_k=2), {"Michael Mann": -0.5, "Martin Scorsese": -0.7, "Al Pacino": 0.0})
    (req,) = b.requests
    assert "Al Pacino" not in req.continuations  # the topic entity is no candidate
    assert set(req.continuations) == {"Heat", "Michael Mann", "The Irishman", "Martin Scorsese"}
    assert res.answer == "Michael Mann | Martin Scorsese"
    # the prompt is the answer reasoner's
    assert req.messages == build_request(question=q.text, context=CONTEXT, temperature=0.0, top_p=1.0,
                                         max_tokens=48, seed=0).messages
    res2, _, b2 = _run(q, RankParams(candidates="context"), {"Al Pacino": 0.0})
    assert "Al Pacino" in b2.requests[0].continuations and res2.answer == "Al Pacino"


def test_rank_top_k_auto_outputs_every_candidate_within_the_margin():
    """top_k auto: the candidates within `margin` of the best, best first (a many-answer question gets them
    all); F1 both ways: the list's F1 and the first answer's (``f1_top1``)."""
    from kgrag.evaluation.evaluate import answer_scores

    q = Question("q1", "who directed the movies starred by [Al Pacino]", topic_ids=())
    table = {"Michael Mann": -0.5, "Martin Scorsese": -1.5, "Heat": -3.0, "The Irishman": -2.6}
    res, _, _ = _run(q, RankParams(top_k="auto", margin=1.0), table)
    assert res.answer == "Michael Mann | Martin Scorsese"
    res, _, _ = _run(q, RankParams(top_k="auto", margin=0.5), table)
    assert res.answer == "Michael Mann"
    res, _, _ = _run(q, RankParams(top_k="auto", margin=10.0), table)
    assert res.answer.split(" | ") == ["Michael Mann", "Martin Scorsese", "The Irishman", "Heat"]
    sc = answer_scores(prediction="", predicted=["Michael Mann", "Martin Scorsese"],
                       gold=["Michael Mann", "Martin Scorsese"])
    assert sc["f1"] == 1.0 and sc["f1_top1"] == pytest.approx(2 / 3)  # P 1, R 1/2
    assert answer_scores(prediction="", predicted=["Heat", "Michael Mann"], gold=["Michael Mann"])["f1_top1"] == 0.0


def test_rank_reasoner_distance_keeps_the_answer_ring():
    """distance=2: only entities two hops from the topic in the context's graph (the directors, not the films);
    a distance nobody is at keeps every candidate."""
    q = Question("q3", "who directed the movies starred by [Al Pacino]", topic_ids=())
    table = {"Heat": -0.1, "The Irishman": -0.2, "Martin Scorsese": -0.7, "Michael Mann": -0.9}
    res, _, b = _run(q, RankParams(distance=2, top_k=1), table)
    assert set(b.requests[0].continuations) == {"Michael Mann", "Martin Scorsese"}
    assert res.answer == "Martin Scorsese"
    res1, _, b1 = _run(q, RankParams(distance=1, top_k=1), table)
    assert set(b1.requests[0].continuations) == {"Heat", "The Irishman"} and res1.answer == "Heat"
    _, _, b5 = _run(q, RankParams(distance=5), table)
    assert len(b5.requests[0].continuations) == 4


def test_rank_reasoner_never_reads_the_questions_hop_count():
    """The default distance is 0 and a declared hop count changes nothing: the same candidates and answer with
    hops 1, 2 or none; an invalid distance is refused."""
    table = {"Heat": -0.1, "The Irishman": -0.2, "Martin Scorsese": -0.7, "Michael Mann": -0.9}
    text = "who directed the movies starred by [Al Pacino]"
    assert RankParams().distance == 0
    seen = []
    for hops in (None, 1, 2):
        res, _, b = _run(Question(f"h{hops}", text, topic_ids=(), hops=hops), RankParams(top_k=1), table)
        seen.append((tuple(b.requests[0].continuations), res.answer))
    assert len(set(seen)) == 1 and len(seen[0][0]) == 4 and seen[0][1] == "Heat"
    with pytest.raises(ValueError):
        RankParams(distance=-1)
    with pytest.raises(ValueError):
        RankParams(distance="hops")  # the oracle ring is gone: retrieve.oracle_hops is the one switch
    assert RankParams(distance="2").distance == 2  # a -S override arrives as text


def test_rank_candidates_ends_are_the_retrievers_proposed_answers():
    """candidates=ends (the default): the proposed answers the context shows, in proposed order; topic entities
    and names the context does not show are left out; nothing proposed = the context without the topic."""
    table = {"Heat": -0.1, "The Irishman": -0.2, "Martin Scorsese": -0.7, "Michael Mann": -0.9}
    q = Question("e", "who directed the movies starred by [Al Pacino]", topic_ids=())
    res, _, b = _run(q, RankParams(), table, proposed=("Michael Mann", "Nobody", "Al Pacino", "Martin Scorsese"))
    assert b.requests[0].continuations == ("Michael Mann", "Martin Scorsese")
    assert res.answer == "Martin Scorsese | Michael Mann"  # top_k auto: both within the margin, best first
    _, _, b0 = _run(q, RankParams(), table)
    assert set(b0.requests[0].continuations) == set(table)


def test_questions_from_table_carry_the_declared_hops_only_when_asked():
    import pyarrow as pa

    from kgrag import schema as S
    from kgrag.kg.store import questions_from_table

    rows = [{S.QUESTION_ID: "a", S.SPLIT: "test", S.HOPS: 2, S.TEXT: "t", S.QTYPE: None, S.TOPIC_IDS: [1],
             S.ANSWER_IDS: [2], S.ANSWERS: ["x"], S.GRAPH_ID: None, S.CHOICES: None},
            {S.QUESTION_ID: "b", S.SPLIT: "test", S.HOPS: None, S.TEXT: "t", S.QTYPE: None, S.TOPIC_IDS: [1],
             S.ANSWER_IDS: [2], S.ANSWERS: ["x"], S.GRAPH_ID: None, S.CHOICES: None}]
    table = pa.Table.from_pylist(rows, schema=S.QUESTIONS)
    assert [q.hops for q in questions_from_table(table, declared_hops=True)] == [2, None]
    assert [q.hops for q in questions_from_table(table)] == [None, None]  # inference sees none


def test_context_distances_on_the_facts_graph():
    from kgrag.llm.constrain import context_distances

    d = context_distances(CONTEXT + "\n(Other, directed_by, Someone)", {"Al Pacino"})
    assert d == {"Al Pacino": 0, "Heat": 1, "The Irishman": 1, "Michael Mann": 2, "Martin Scorsese": 2}
    assert context_distances(CONTEXT, {"Nobody"}) == {}


def test_rank_reasoner_label_task_scores_the_choices():
    q = Question("q2", "Argument: a. Belief: b. support or counter?", topic_ids=(), choices=("support", "counter"))
    res, _, b = _run(q, table={"counter": -0.1, "support": -2.0})
    assert b.requests[0].continuations == ("support", "counter") and res.answer == "counter"


def test_scoring_calls_are_cached_under_their_own_key(tmp_path):
    q = Question("q1", "who directed the movies starred by [Al Pacino]", topic_ids=())
    cache = CallCache(tmp_path / "c.sqlite")
    _, recs, _ = _run(q, cache=cache)
    _, again, b = _run(q, cache=cache)
    assert not recs[0].cached and again[0].cached and b.requests == []
    req = build_request(question=q.text, context=CONTEXT, temperature=0.0, top_p=1.0, max_tokens=48, seed=0)
    assert recs[0].key != call_key("script", req)  # a generation of the same prompt is another call
    assert len(scores_of(again[0])) == 4


def test_failed_scoring_gives_an_empty_answer():
    class Unsupported:
        model_id = "x"

        def generate(self, requests):
            return [LLMReply(error="ScoringUnsupported: no") for _ in requests]

    job = REASONERS.get("rank").impl(inp=ReasonInput(question=Question("q", "who [Heat]", ()), context=CONTEXT),
                                     params=RankParams())
    (res, recs), = run_batched(jobs=[job], client=LLMClient(Unsupported(), cache=None, retries=0))
    assert res.answer == "" and recs[0].failed and "ScoringUnsupported" in recs[0].reply.error


def test_one_candidate_is_the_answer_without_a_call():
    """A question with one candidate has no choice for the LLM to make: every setting would output it, so no
    scoring call is made (none recorded, none cached, the backend never asked); with two, the call is made."""
    q = Question("q1", "who directed the movies starred by [Al Pacino]", topic_ids=())
    for params in (RankParams(), RankParams(top_k=1), RankParams(calibrate="all")):
        res, recs, b = _run(q, params, {"Michael Mann": -30.0}, proposed=("Michael Mann", "Nobody"))
        assert res.answer == "Michael Mann" and recs == [] and b.requests == []
        assert res.trace["candidates"] == 1 and res.trace["top"] == [["Michael Mann", None]] and res.trace["no_call"]
    res, recs, b = _run(q, RankParams(), {"Michael Mann": -30.0}, proposed=("Michael Mann", "Martin Scorsese"))
    assert len(recs) == 1 and b.requests[0].continuations == ("Michael Mann", "Martin Scorsese")


# --- real SmolLM2 -------------------------------------------------------------------------------------------

def _direct_scores(path, prompt, conts):
    """Each continuation evaluated from scratch after the prompt in a fresh single-sequence context (all
    logits kept): the reference of the shared-KV scorer."""
    from llama_cpp import Llama

    llm = Llama(model_path=path, n_ctx=1024, n_threads=1, n_batch=512, logits_all=True, verbose=False, seed=0)
    out = []
    try:
        for c in conts:
            llm.reset()
            llm.eval(prompt + c)
            lp = llm.logits_to_logprobs(np.asarray(llm.scores[: len(prompt) + len(c)], dtype=np.float64))
            out.append((float(sum(lp[len(prompt) - 1 + t, tok] for t, tok in enumerate(c))), len(c)))
    finally:
        llm.close()
    return out


@pytest.mark.slow
@pytest.mark.parametrize("exact", [True, False], ids=["kv-streams", "kv-shared"])
def test_shared_kv_scores_equal_direct_per_candidate_computation(exact):
    from kgrag.llm.backends.llamacpp import LlamaCppBackend, LlamaCppParams
    from kgrag.llm.backends.llamacpp_engine import ScoreEngine, chat_tokens, continuation_tokens

    b = LlamaCppBackend(LlamaCppParams(n_ctx=1024, n_threads=1))
    req = build_request(question="who directed the movies starred by [Al Pacino]", context=CONTEXT,
                        temperature=0.0, top_p=1.0, max_tokens=16, seed=0)
    names = ["Michael Mann", "Heat", "The Irishman", "Amélie", "x"]
    prompt = chat_tokens(b.llm, req.as_messages())
    conts = [continuation_tokens(b.llm, n) for n in names]
    # a small engine: 4 sequences and 8-token batches (prompt in chunks; candidates in groups of 2: kv-streams pads
    # each to 4 tokens, kv-shared keeps one scratch sequence)
    eng = ScoreEngine(b.llm, n_ctx=1024, n_batch=8, n_threads=1, n_seq_max=4, exact=exact)
    try:
        got = eng.score(prompt, conts)
        again = eng.score(prompt, conts)  # prompt from the KV cache (all but its last 2 tokens reused)
        assert eng.reused == len(prompt) - 2
        single = eng.score(prompt, conts[:1])  # one candidate alone: a padded batch
    finally:
        eng.close()
    ref = _direct_scores(b.path, prompt, conts)
    assert [n for _, n in got] == [n for _, n in ref] == [len(c) for c in conts]
    # tolerance 1e-3 nats: float32 logits of other batch shapes (measured: |diff| <= 1.2e-4; with flash
    # attention on in one context and off in the other it was up to 0.2)
    np.testing.assert_allclose([s for s, _ in got], [s for s, _ in ref], atol=1e-3, rtol=0)
    np.testing.assert_allclose([s for s, _ in again], [s for s, _ in got], atol=1e-3, rtol=0)
    np.testing.assert_allclose(single[0][0], got[0][0], atol=1e-3, rtol=0)
    if exact:  # one stream per candidate: bit-identical, not just close
        assert again == got and single[0] == got[0]
    # the same through the backend (the default engine) and the client
    rec = LLMClient(LlamaCppBackend(LlamaCppParams(n_ctx=1024, n_threads=1, exact_scores=exact)), cache=None
                    ).score(req, names)
    np.testing.assert_allclose([s for s, _ in scores_of(rec)], [s for s, _ in ref], atol=1e-3, rtol=0)
    assert json.loads(rec.reply.text)[0][1] == len(conts[0])


@pytest.mark.slow
def test_a_score_does_not_depend_on_the_candidates_beside_it():
    """kv-streams scoring (the default): each candidate's score after a prompt is bit-identical whether it is
    scored with 13 others, alone, or alone in a fresh engine, over several prompts in one engine (prefix reuse,
    stream growth past the first 512 cells). The kv-shared layout fails this (bench/multiseq.py: 10 of 155
    pairs differ by up to 0.28 nats on these names)."""
    from kgrag.llm.backends.llamacpp import LlamaCppBackend, LlamaCppParams
    from kgrag.llm.backends.llamacpp_engine import MIN_STREAM_CELLS, ScoreEngine, chat_tokens, continuation_tokens

    b = LlamaCppBackend(LlamaCppParams(n_ctx=2048, n_threads=1))
    long_context = "\n".join(f"(Film {i}, directed_by, Director {i})" for i in range(60))
    questions = [("who starred in [Heat]", CONTEXT), ("which genre is [Heat]", CONTEXT),
                 ("who directed [Film 7]", long_context), ("who directed the movies starred by [Al Pacino]", CONTEXT)]
    prompts = [chat_tokens(b.llm, build_request(question=q, context=c, temperature=0.0, top_p=1.0, max_tokens=16,
                                                seed=0).as_messages()) for q, c in questions]
    assert len(prompts[2]) > MIN_STREAM_CELLS > len(prompts[0])  # the third prompt makes the streams grow
    names = ["Michael Mann", "Heat", "The Irishman", "Al Pacino", "Robert De Niro", "Crime", "1995", "x",
             "Martin Scorsese", "Director 7", "The Godfather Part II", "Dog Day Afternoon", "Serpico", "Amélie"]
    conts = [continuation_tokens(b.llm, n) for n in names]
    eng = ScoreEngine(b.llm, n_ctx=2048, n_batch=32, n_threads=1, n_seq_max=5)  # 14 candidates: 3+ groups
    try:
        for prompt in prompts:
            together = eng.score(prompt, conts)
            alone = [eng.score(prompt, [c])[0] for c in conts]
            fresh = ScoreEngine(b.llm, n_ctx=2048, n_batch=512, n_threads=1)
            try:
                from_scratch = [fresh.score(prompt, [c])[0] for c in reversed(conts)][::-1]
            finally:
                fresh.close()
            assert together == alone == from_scratch
    finally:
        eng.close()
