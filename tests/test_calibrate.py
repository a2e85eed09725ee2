"""``rank``'s contextual calibration (``reason.rank.calibrate``; Zhao et al. 2021): a candidate's score minus its
score after the content-free prompt. Scripted scores for the rule, the calls and failures; the real SmolLM2 for
the arithmetic on real scores."""

from __future__ import annotations

import pytest

from kgrag.llm.calls import CallCache, LLMClient, LLMReply, score_reply_text, scores_of
from kgrag.llm.prompts import build_request
from kgrag.reasoning.reasoners import REASONERS, ReasonInput, Sampling, run_batched
from kgrag.reasoning.reasoners.rank import RankParams
from kgrag.types import Question

CONTEXT = ("(Heat, directed_by, Michael Mann)\n(Heat, starred_actors, Al Pacino)\n"
           "(The Irishman, starred_actors, Al Pacino)\n(The Irishman, directed_by, Martin Scorsese)")
LABEL_Q = Question("q2", "Argument: a. Belief: b. support or counter?", topic_ids=(), choices=("support", "counter"))
ENTITY_Q = Question("q1", "who directed the movies starred by [Al Pacino]", topic_ids=())


def _content_free(req) -> bool:
    return "Question: N/A" in req.messages[-1][1]


class TwoTables:
    """Scores each continuation from one table after the question's prompt and another after the content-free
    one; ``fail_cf``: the content-free call fails. Records the requests."""

    model_id = "script"

    def __init__(self, real, cf, fail_cf=False):
        self.real, self.cf, self.fail_cf, self.requests = real, cf, fail_cf, []

    def generate(self, requests):
        self.requests += list(requests)
        out = []
        for r in requests:
            if _content_free(r) and self.fail_cf:
                out.append(LLMReply(error="boom: backend down"))
            else:
                table = self.cf if _content_free(r) else self.real
                out.append(LLMReply(text=score_reply_text([(table.get(c, -9.0), 1) for c in r.continuations])))
        return out


def _run(q, params, backend, cache=None, context=CONTEXT):
    job = REASONERS.get("rank").impl(inp=ReasonInput(question=q, context=context, sampling=Sampling()), params=params)
    (res, recs), = run_batched(jobs=[job], client=LLMClient(backend, cache=cache, retries=0))
    return res, recs


def test_label_prior_is_taken_off():
    """Raw scores prefer 'support' (-0.5 vs -1.0), but the model says 'support' to a content-free input too (-0.1
    vs -2.0): calibrated, 'counter' wins (+1.0 vs -0.4)."""
    real, cf = {"support": -0.5, "counter": -1.0}, {"support": -0.1, "counter": -2.0}
    res, recs = _run(LABEL_Q, RankParams(), TwoTables(real, cf))
    assert res.answer == "support" and len(recs) == 1  # calibrate: none, one call
    b = TwoTables(real, cf)
    res, recs = _run(LABEL_Q, RankParams(calibrate="labels"), b)
    assert res.answer == "counter"
    assert [_content_free(r) for r in b.requests] == [True, False]  # the content-free call first
    cf_req = b.requests[0]
    assert cf_req.continuations == ("support", "counter")
    assert cf_req.messages == build_request(question="N/A", context="", temperature=0.0, top_p=1.0, max_tokens=48,
                                            seed=0, choices=LABEL_Q.choices).messages  # choices kept, no facts
    assert res.trace["top"] == [["counter", 1.0], ["support", -0.4]]
    assert res.trace["content_free"] == [["counter", -2.0], ["support", -0.1]] and res.trace["calibrate"] == "labels"


def test_labels_mode_leaves_entity_questions_alone_and_all_calibrates_them():
    real = {"Michael Mann": -1.0, "Martin Scorsese": -1.5, "Heat": -3.0, "The Irishman": -3.0}
    cf = {"Michael Mann": -0.2, "Martin Scorsese": -4.0}
    b = TwoTables(real, cf)
    res, recs = _run(ENTITY_Q, RankParams(calibrate="labels", top_k=1), b)
    assert res.answer == "Michael Mann" and len(b.requests) == 1 and "content_free" not in res.trace
    b = TwoTables(real, cf)
    res, _ = _run(ENTITY_Q, RankParams(calibrate="all", top_k=1), b)
    # Scorsese: -1.5 - (-4.0) = 2.5; Mann: -1.0 - (-0.2) = -0.8; Heat / The Irishman: -3 - (-9) = 6 (a name the
    # model never says unprompted gains most: what calibration does, measured on dev before it is chosen)
    assert [n for n, _ in res.trace["top"]][:3] == ["Heat", "The Irishman", "Martin Scorsese"]
    assert len(b.requests) == 2 and _content_free(b.requests[0]) and not b.requests[0].messages[-1][1].startswith(
        "Knowledge graph facts")


def test_mean_normalization_applies_to_both_scores():
    class Lengths(TwoTables):
        def generate(self, requests):
            self.requests += list(requests)
            return [LLMReply(text=score_reply_text(
                [((self.cf if _content_free(r) else self.real)[c], 2) for c in r.continuations])) for r in requests]

    res, _ = _run(LABEL_Q, RankParams(calibrate="labels", normalize="mean"),
                  Lengths({"support": -1.0, "counter": -3.0}, {"support": -4.0, "counter": -1.0}))
    assert res.trace["top"] == [["support", 1.5], ["counter", -1.0]]  # (-1 + 4) / 2, (-3 + 1) / 2


def test_a_failed_calibration_call_fails_the_question_not_silently_raw():
    b = TwoTables({"support": -0.5, "counter": -1.0}, {}, fail_cf=True)
    res, recs = _run(LABEL_Q, RankParams(calibrate="labels"), b)
    assert res.answer == "" and len(recs) == 1 and recs[-1].failed  # the driver records the question as failed
    assert len(b.requests) == 1  # the question's own call is not made


def test_a_label_tasks_content_free_call_is_made_once(tmp_path):
    cache = CallCache(tmp_path / "calls.sqlite")
    b = TwoTables({"support": -0.5, "counter": -1.0}, {"support": -0.1, "counter": -2.0})
    other = Question("q3", "Argument: c. Belief: d. support or counter?", topic_ids=(), choices=("support", "counter"))
    _run(LABEL_Q, RankParams(calibrate="labels"), b, cache=cache)
    res, recs = _run(other, RankParams(calibrate="labels"), b, cache=cache)
    assert recs[0].cached and not recs[1].cached  # the same content-free call: from the cache
    assert [_content_free(r) for r in b.requests] == [True, False, False]
    assert res.answer == "counter"


def test_calibrate_is_a_checked_param():
    with pytest.raises(ValueError):
        RankParams(calibrate="yes")


def test_real_smollm2_calibrated_scores_are_raw_minus_content_free():
    """The embedded model: each shown score is the question prompt's score minus the content-free one, both
    computed again here with the same client."""
    from kgrag.llm.backends.llamacpp import LlamaCppBackend, LlamaCppParams

    client = LLMClient(LlamaCppBackend(LlamaCppParams(n_ctx=1024)), cache=None)
    job = REASONERS.get("rank").impl(inp=ReasonInput(question=LABEL_Q, context="(a, causes, b)", sampling=Sampling()),
                                     params=RankParams(calibrate="labels"))
    (res, recs), = run_batched(jobs=[job], client=client)
    assert len(recs) == 2 and not any(r.failed for r in recs)
    raw = dict(zip(LABEL_Q.choices, scores_of(recs[1])))
    cf = dict(zip(LABEL_Q.choices, scores_of(recs[0])))
    assert all(s < 0 for s, _ in [*raw.values(), *cf.values()])
    for name, score in res.trace["top"]:
        assert score == pytest.approx(round(raw[name][0] - cf[name][0], 4), abs=1e-4)
    assert res.answer == res.trace["top"][0][0]
