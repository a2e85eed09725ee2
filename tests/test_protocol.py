"""The benchmark protocol (unanswerable questions kept and scored as misses), bootstrap intervals, and errors
that are not retried because retrying cannot change them."""

from __future__ import annotations

import numpy as np
import pytest

from kgrag import schema as S
from kgrag.evaluation.evaluate import evaluate_rows, rescore_rows
from kgrag.llm.calls import LLMClient, LLMReply, LLMRequest, PermanentLLMError, is_permanent
from kgrag.evaluation.metrics import bootstrap_ci


def _q(qid: str, answerable: bool | None) -> dict:
    q = {S.QUESTION_ID: qid, S.TEXT: f"who directed [{qid}]", S.ANSWERS: ["Michael Mann"], S.ANSWER_IDS: [1],
         S.TOPIC_IDS: [0], S.HOPS: 1, S.QTYPE: ""}
    if answerable is not None:
        q[S.ANSWERABLE] = answerable
    return q


def _gen(qid: str, answer: str) -> dict:
    return {S.QUESTION_ID: qid, S.PREDICTION: answer, S.PREDICTED_ANSWERS: [answer], S.FAILED: False}


def test_an_unanswerable_question_is_kept_and_counts_as_a_miss_everywhere():
    qs = [_q("a", True), _q("b", False), _q("c", None), _q("d", True)]
    gens = [_gen("a", "Michael Mann"), _gen("b", "Michael Mann"), _gen("c", "Michael Mann"), _gen("d", "Nobody")]
    rows, m = evaluate_rows(questions=qs, retrieved=[], generations=gens)
    by = {r[S.QUESTION_ID]: r for r in rows}
    assert m["questions"] == 4 and [r[S.ANSWERABLE] for r in rows] == [True, False, True, True]
    # "b" names the gold answer, but its answer is not in the KG: a miss in every answer metric
    assert all(by["b"][k] == 0.0 for k in ("hit_at_1", "hit_any", "em", "f1", "hit_gretriever", "em_tog", "rouge_l"))
    assert by["a"]["hit_at_1"] == by["c"]["hit_at_1"] == 1.0  # null = not checked = answerable
    assert m["hit_at_1"] == 0.5 and m["answerable_fraction"] == 0.75
    assert m["hit_at_1_answerable"] == pytest.approx(2 / 3) and m["hit_any_answerable"] == pytest.approx(2 / 3)
    # the papers' rules recomputed from predictions.parquet's rows agree
    again = rescore_rows(rows)
    assert again["hit_at_1"] == m["hit_at_1"] and again["em_tog"] == m["em_tog"] == 0.5


def test_a_question_linked_to_nothing_stays_through_ingest_and_validate_and_is_a_miss(tmp_path, monkeypatch):
    """The real ingest (``data.link_entities: true``) and validate stages on a small KG: a question that names no
    entity keeps its row with no topic, validate quarantines nothing and flags it answerable=false, and scoring
    counts it in the denominator as a miss even when the prediction names the gold answer."""
    import json

    import pyarrow.parquet as pq

    from stages import ingest, validate
    from tests.conftest import ROOT

    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "kg.tsv").write_text("Heat\tdirected_by\tMichael Mann\nHeat\tstarred_actors\tAl Pacino\n"
                                            "Collateral\tdirected_by\tMichael Mann\n")
    # the second question as a user may type it: no name of the KG in it
    qs = [{"id": "named", "question": "who directed [Heat]", "topic_entities": ["Heat"], "answers": ["Michael Mann"]},
          {"id": "unnamed", "question": "who directed the favourite heist film of the fans", "topic_entities": ["Heat"],
           "answers": ["Michael Mann"]}]
    (tmp_path / "in" / "q.jsonl").write_text("".join(json.dumps(q) + "\n" for q in qs))
    monkeypatch.chdir(tmp_path)
    args = ["--params", str(ROOT / "params.yaml"), "-S", "data.dataset=triples", "-S", f"data.input={tmp_path / 'in'}",
            "-S", f"data.triples.path={tmp_path / 'in' / 'kg.tsv'}",
            "-S", f"data.triples.questions={tmp_path / 'in' / 'q.jsonl'}",
            "-S", "data.sample=0", "-S", "data.link_entities=true"]
    ingest.main(args)
    validate.main(["--params", str(ROOT / "params.yaml")])
    assert pq.read_table(tmp_path / "data" / "quarantine" / "validate.parquet").num_rows == 0
    valid = pq.read_table(tmp_path / "data" / "validated" / "questions.parquet").to_pylist()
    by = {q[S.QUESTION_ID]: q for q in valid}
    assert set(by) == {"named", "unnamed"} and by["unnamed"][S.TOPIC_IDS] == []
    assert by["named"][S.ANSWERABLE] is True and by["unnamed"][S.ANSWERABLE] is False
    summary = json.loads((tmp_path / "data" / "validated" / "summary.json").read_text())
    assert summary["answerable"] == {"questions": 2, "not_answerable": 1, "no_topic": 1}
    gens = [_gen("named", "Michael Mann"), _gen("unnamed", "Michael Mann")]
    scored, m = evaluate_rows(questions=valid, retrieved=[], generations=gens)
    assert m["questions"] == 2 and m["hit_at_1"] == 0.5 and m["answerable_fraction"] == 0.5
    assert {r[S.QUESTION_ID]: r["hit_at_1"] for r in scored} == {"named": 1.0, "unnamed": 0.0}


def _reference_ci(values, resamples, seed, chunk=100):
    """The same resampling, one resample at a time (the agreement reference of ``bootstrap_ci``)."""
    v = np.asarray(values, dtype=float)
    rng = np.random.default_rng(seed)
    means = []
    for start in range(0, resamples, chunk):
        idx = rng.integers(0, len(v), size=(min(chunk, resamples - start), len(v)), dtype=np.int32)
        means += [float(v[row].mean()) for row in idx]
    lo, hi = np.quantile(means, [0.025, 0.975])
    return [round(float(lo), 4), round(float(hi), 4)]


def test_bootstrap_interval_is_seeded_covers_the_mean_and_narrows_with_more_questions():
    rng = np.random.default_rng(1)
    small = (rng.random(200) < 0.6).astype(float)
    large = (rng.random(15000) < 0.6).astype(float)
    lo, hi = bootstrap_ci(small)
    assert bootstrap_ci(small) == [lo, hi] == _reference_ci(small, 1000, 0)
    assert bootstrap_ci(small, seed=1) != [lo, hi]
    assert lo < small.mean() < hi and 0.10 < hi - lo < 0.16  # about ±0.068 at p = 0.6, n = 200
    llo, lhi = bootstrap_ci(large)
    assert llo < large.mean() < lhi and (lhi - llo) < (hi - lo) / 5
    assert bootstrap_ci([1.0] * 50) == [1.0, 1.0]


def test_metrics_carry_intervals_and_compare_prints_them():
    from kgrag.reporting.compare import Experiment, flatten, render

    qs = [_q(f"q{i}", True) for i in range(40)]
    gens = [_gen(f"q{i}", "Michael Mann" if i % 2 else "x") for i in range(40)]
    _, m = evaluate_rows(questions=qs, retrieved=[], generations=gens)
    ci = m["ci95"]
    assert set(ci) >= {"hit_at_1", "hit_any", "f1"} and ci["hit_at_1"]["low"] < 0.5 < ci["hit_at_1"]["high"]
    exp = Experiment(name="a", rev="abcdef0", baseline="a", kind="experiment", metrics=flatten(m))
    md = render([exp], metrics=["hit_at_1"])
    assert f"0.500 [{ci['hit_at_1']['low']:.3f}, {ci['hit_at_1']['high']:.3f}]" in md and "bootstrap 95%" in md


class _Backend:
    model_id = "scripted"

    def __init__(self, error: str, permanent: bool) -> None:
        self.calls, self.error, self.permanent = 0, error, permanent

    def generate(self, requests):
        self.calls += len(requests)
        return [LLMReply(error=self.error, permanent=self.permanent) for _ in requests]


@pytest.mark.parametrize("permanent, attempts", [(True, 1), (False, 3)])
def test_an_error_that_cannot_change_is_not_retried(permanent, attempts):
    backend = _Backend("PermanentLLMError: prompt of 25181 tokens does not fit n_ctx=4096", permanent)
    client = LLMClient(backend, cache=None, retries=2, backoff_s=0.0, sleep=lambda s: None)
    rec = client.generate([LLMRequest(messages=(("user", "q"),), temperature=0.0, top_p=1.0, max_tokens=4, seed=0)])[0]
    assert backend.calls == attempts and rec.attempts == attempts and rec.reply.error


def test_which_errors_are_permanent():
    import httpx

    def status(code):
        req = httpx.Request("POST", "http://127.0.0.1/v1/chat/completions")
        return httpx.HTTPStatusError("x", request=req, response=httpx.Response(code, request=req))

    assert is_permanent(PermanentLLMError("does not fit")) and is_permanent(status(400))
    assert not any(is_permanent(e) for e in (status(500), status(429), status(408), TimeoutError(), ValueError()))
