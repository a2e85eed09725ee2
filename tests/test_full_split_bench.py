"""bench/full_split.py's own arithmetic: where generate's time goes (``generate_cost``) and the cost ratios of a
whole split against its 200-question sample (``derive``), on a hand-made work copy."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bench.full_split import (PAUSED_MS, SAMPLE_ONLY_NOTE, answering_ms, derive, generate_cost, lift_paired,
                              llm_server_down, question_seconds, resumed, sample_only, whole_split)
from kgrag import schema as S


def _work(tmp_path, rows):
    """rows: (question id, candidates, tokens_in, generate_ms, cached[, calls made, 1 if not given])."""
    (tmp_path / "data" / "generate").mkdir(parents=True)
    (tmp_path / "data" / "timings" / "generate").mkdir(parents=True)
    pq.write_table(pa.table({
        S.QUESTION_ID: [r[0] for r in rows], S.TOKENS_IN: [r[2] for r in rows],
        S.TRACE: [json.dumps({"reasoner": "rank", "candidates": r[1]}) for r in rows]}),
        tmp_path / "data" / "generate" / "generations.parquet")
    pq.write_table(pa.table({
        S.QUESTION_ID: [r[0] for r in rows], S.GENERATE_MS: [r[3] for r in rows], S.CACHED: [r[4] for r in rows],
        S.CALL_CACHED: [[bool(r[4])] * (r[5] if len(r) > 5 else 1) for r in rows]}),
        tmp_path / "data" / "timings" / "generate" / "questions.parquet")
    return tmp_path


def test_generate_cost_buckets_by_candidates_and_leaves_cached_answers_out(tmp_path):
    work = _work(tmp_path, [("a", 1, 100, 100.0, 0), ("b", 1, 120, 100.0, 0), ("c", 4, 200, 300.0, 0),
                            ("d", 25, 800, 1500.0, 0), ("e", 25, 800, 9.0, 1)])  # e: from the call cache
    got = generate_cost(work)
    assert got["questions"] == 4 and got["seconds"] == 2.0 and got["candidates_mean"] == 7.75
    assert [(b["candidates"], b["questions"], b["ms_mean"], b["time_share"]) for b in got["by_candidates"]] == [
        ("1", 2, 100.0, 0.1), ("3-5", 1, 300.0, 0.15), ("20-49", 1, 1500.0, 0.75)]
    assert got["by_candidates"][0]["tokens_in_mean"] == 110.0
    assert generate_cost(tmp_path / "nothing") is None


def _run(q, gen_s, rep_s, qs_gen, resumed=False):
    stages = {s: {"seconds": v} for s, v in (("retrieve", 10.0), ("generate", gen_s), ("evaluate", 1.0),
                                             ("report", rep_s))}
    return {"questions": q, "stages": stages, "question_seconds": {"generate": qs_gen},
            **({"resumed": True} if resumed else {})}


def test_derive_leaves_a_resumed_splits_partial_stage_seconds_out():
    entry = {"sample_200": _run(200, 100.0, 2.0, 90.0), "full": _run(20000, 5000.0, 20.0, 8100.0)}
    derive(entry)
    assert entry["per_question_cost_ratio"]["generate"] == 0.5  # (5000 / 20000) / (100 / 200)
    assert entry["per_question_cost_ratio_answering"] == {"generate": 0.9}
    entry["full"]["resumed"] = True  # its generate seconds are its last part's only
    derive(entry)
    assert set(entry["per_question_cost_ratio"]) == {"evaluate", "report"}
    assert entry["per_question_cost_ratio"]["report"] == pytest.approx(0.1)
    assert entry["per_question_cost_ratio_answering"] == {"generate": 0.9}


def test_a_resumed_splits_rates_come_from_its_per_question_seconds():
    """Its stage seconds are the last part's (finished shards read, not computed): the rate of the stage time
    would be far too high; every part's per-question seconds give it."""
    full = _run(20000, 5000.0, 20.0, 8100.0)
    full["generate_questions_per_minute"] = 240.0  # 20000 questions over the last part's 5000 s
    full["retrieve_questions_per_minute"] = 120000.0  # 20000 over the last part's 10 s
    resumed(full)
    assert full["resumed"] and full["generate_questions_per_minute"] == pytest.approx(20000 / 8100.0 * 60, abs=0.1)
    assert "retrieve_questions_per_minute" not in full  # no per-question seconds for it: no rate claimed


def test_an_entry_re_made_keeps_no_note_or_ratio_of_the_run_it_replaced():
    """A hand note (an unstamped run's) goes with the run it spoke of: a sample-only run writes its own where no
    whole split is kept, and a whole split re-made drops the note and the old ratios before deriving new ones."""
    entry = {"note": "the whole split stopped at its start (an old hand note)",
             "sample_200": _run(200, 100.0, 2.0, 90.0), "per_question_cost_ratio": {"generate": 9.9}}
    sample_only(entry)
    assert entry["note"] == SAMPLE_ONLY_NOTE and "per_question_cost_ratio" not in entry
    whole_split(entry, _run(20000, 5000.0, 20.0, 8100.0))
    assert "note" not in entry and not any(k.startswith("per_question_cost_ratio") for k in entry)
    assert entry["full"]["questions"] == 20000
    sample_only(entry)  # a later sample-only run keeps the whole split, so writes no sample-only note
    assert "note" not in entry and entry["per_question_cost_ratio"]["generate"] == 0.5


def test_answering_time_leaves_out_questions_without_a_call_and_estimates_paused_and_cached_ones(tmp_path):
    """A question rank answers without a call counts 0 (old records held the shard's mean); one paused past
    PAUSED_MS (a SIGSTOPped background run) and one whose calls came from the cache count at the measured mean."""
    work = _work(tmp_path, [("a", 3, 200, 1000.0, 0), ("b", 4, 300, 3000.0, 0), ("c", 1, 50, 1500.0, 0, 0),
                            ("d", 5, 400, PAUSED_MS + 1.0, 0), ("e", 2, 100, 9.0, 1)])
    got = question_seconds(work)
    assert got["generate_questions"] == {"measured": 2, "paused": 1, "cached": 1, "no_call": 1}
    assert got["generate"] == 8.0  # 1 + 3 measured, paused and cached at their 2 s mean, c: 0
    assert answering_ms([]) == {"ms": 0.0, "measured": 0, "paused": 0, "cached": 0, "no_call": 0}
    cost = generate_cost(work)
    assert cost["questions"] == 2 and cost["seconds"] == 4.0  # only the measured answers, by candidates


def test_the_llm_lift_is_paired_per_question(tmp_path):
    """Wins and losses against each no-LLM candidate on the same questions; no lift when they agree."""
    (tmp_path / "reports").mkdir()
    pq.write_table(pa.table({"hit_at_1": [1.0, 1.0, 0.0, 1.0] * 50, "hit_baseline_first": [0.0, 1.0, 0.0, 1.0] * 50,
                             "hit_baseline_random": [1.0, 1.0, 0.0, 1.0] * 50}), tmp_path / "reports" / "predictions.parquet")
    got = lift_paired(tmp_path, resamples=200)
    assert (got["first"]["lift"], got["first"]["won"], got["first"]["lost"]) == (0.25, 50, 0)
    assert got["first"]["low"] < 0.25 < got["first"]["high"] and got["first"]["low"] > 0
    assert got["random"] == {"hit_at_1": 0.75, "lift": 0.0, "low": 0.0, "high": 0.0, "won": 0, "lost": 0}
    assert got["first"]["hit_at_1"] == 0.5  # the no-LLM candidate's own figure, beside the lift
    assert lift_paired(tmp_path / "none") is None


def test_a_run_pointed_at_an_llm_server_starts_only_when_the_server_answers():
    """The fault-server row's command (``--set generate.openai.base_url=...``) against the real fault server, then
    against the same port closed: refused before any stage runs, naming the URL and how to start the server."""
    import socket
    import threading
    from http.server import ThreadingHTTPServer

    from tests.fault_server import State, make_handler

    server = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(State(faults=False, slow_s=0.0, delay_s=0.0)))
    port = server.server_address[1]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    sets = [f"generate.openai.base_url=http://127.0.0.1:{port}/v1", "reason.method=answer"]
    try:
        assert llm_server_down(sets) is None
    finally:
        server.shutdown()
        server.server_close()
    with socket.socket() as s:  # nothing listens on a port just released
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    why = llm_server_down([f"generate.openai.base_url=http://127.0.0.1:{closed}/v1"])
    assert why and f"http://127.0.0.1:{closed}/v1/models" in why and "tests.fault_server" in why
    assert llm_server_down(["reason.rank.max_candidates=1"]) is None  # the embedded LLM: nothing to reach
