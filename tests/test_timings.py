"""Run records (kgrag.timings): wall times and call-cache use stay out of the DVC outputs, so the same results
give byte-identical outputs (and the same dvc.lock); the records are read back only while they describe the
outputs that are there."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import yaml

from kgrag import io, schema as S, timings
from kgrag.llm.calls import CallCache, LLMClient, LLMReply, LLMRequest
from kgrag.reasoning.reasoners import Reasoning, rows_of
from tests.conftest import METAQA, ROOT, metaqa_sample_store


def test_output_schemas_hold_no_run_record_column():
    run_cols = {S.RETRIEVE_MS, S.STAGE_MS, S.GENERATE_MS, S.CACHED, S.LLM_CALLS, S.CALL_CACHED, S.CALL_ATTEMPTS}
    assert not run_cols & set(S.RETRIEVED.names) and not run_cols & set(S.GENERATIONS.names)
    assert set(S.RETRIEVE_TIMINGS.names) == {S.QUESTION_ID, S.RETRIEVE_MS, S.STAGE_MS}
    assert set(S.GENERATE_TIMINGS.names) - {S.QUESTION_ID} <= run_cols


class _Echo:
    """A backend answering every prompt with a fixed text after a real (varying) delay."""

    model_id = "echo"

    def generate(self, requests):
        return [LLMReply(text="Michael Mann", tokens_in=7, tokens_out=2, latency_ms=float(np.random.rand()) + 1)
                for _ in requests]


def _answer_rows(client: LLMClient) -> list[dict]:
    req = LLMRequest(messages=(("user", "who directed Heat?"),), max_tokens=8)
    recs = client.generate([req, req])
    return rows_of(question_ids=["q0"], results=[(Reasoning(answer="Michael Mann"), recs)], reasoner="answer",
                   separator="|", seed=0, per_q_ms=3.0)


def test_generations_are_the_same_bytes_whether_the_calls_were_cached_or_not(tmp_path):
    """The first run calls the backend, the second gets every call from the call cache: the generations output
    is byte-identical, the run records say how each call was obtained."""
    client = LLMClient(_Echo(), cache=CallCache(tmp_path / "calls.sqlite"))
    first, second = _answer_rows(client), _answer_rows(client)
    outs = []
    for i, rows in enumerate((first, second)):
        path = tmp_path / f"gen{i}.parquet"
        io.write_parquet(path, pa.Table.from_pylist(rows, schema=S.GENERATIONS))
        outs.append(path.read_bytes())
        timings.write_questions("generate", rows, root=tmp_path / f"t{i}")
    assert outs[0] == outs[1]
    trace = json.loads(first[0][S.TRACE])
    assert len(trace["calls"]) == 2 and not {"cached", "attempts"} & set(trace["calls"][0])
    rec = [io.read_parquet(tmp_path / f"t{i}" / "generate" / "questions.parquet").to_pylist()[0] for i in (0, 1)]
    assert rec[0][S.CALL_CACHED] == [False, False] and rec[0][S.CALL_ATTEMPTS] == [1, 1] and rec[0][S.CACHED] == 0
    assert rec[1][S.CALL_CACHED] == [True, True] and rec[1][S.CACHED] == 1 and rec[1][S.LLM_CALLS] == 0
    assert rec[0][S.GENERATE_MS] != rec[1][S.GENERATE_MS]


def _record(root: Path, stage: str, out: Path, seconds: float) -> None:
    io.write_json(timings.stage_dir(stage, root) / timings.RECORD,
                  {"stage": stage, "seconds": seconds, "outputs": {out.as_posix(): io.file_hash(out)}})


def test_records_of_changed_outputs_are_stale_and_ignored(tmp_path):
    out = tmp_path / "retrieved.parquet"
    out.write_bytes(b"run 1")
    _record(tmp_path, "retrieve", out, 2.5)
    timings.write_questions("retrieve", [{S.QUESTION_ID: "q0", S.RETRIEVE_MS: 1.5}], root=tmp_path)
    assert timings.read_record("retrieve", tmp_path)["seconds"] == 2.5
    assert timings.read_questions("retrieve", tmp_path) == {"q0": {S.QUESTION_ID: "q0", S.RETRIEVE_MS: 1.5,
                                                                   S.STAGE_MS: None}}
    assert timings.stage_seconds(["ingest", "retrieve"], tmp_path) == {"retrieve": 2.5}
    out.write_bytes(b"run 2, another run's output checked out")
    assert timings.read_record("retrieve", tmp_path) is None
    assert timings.read_questions("retrieve", tmp_path) == {} and timings.stage_seconds(["retrieve"], tmp_path) == {}
    out.unlink()
    assert timings.read_record("retrieve", tmp_path) is None
    with pytest.raises(ValueError, match="no per-question run records"):
        timings.write_questions("evaluate", [], root=tmp_path)


def test_summary_covers_the_evaluated_questions_only():
    ret = {"q0": {S.RETRIEVE_MS: 1.0}, "q1": {S.RETRIEVE_MS: 3.0}, "q9": {S.RETRIEVE_MS: 1000.0}}
    gen = {"q0": {S.GENERATE_MS: 10.0, S.LLM_CALLS: 2, S.CACHED: 0},
           "q1": {S.GENERATE_MS: 20.0, S.LLM_CALLS: 0, S.CACHED: 1}}
    s = timings.summary(question_ids=["q0", "q1", "q2"], stage_seconds={"retrieve": 4.0}, retrieve=ret, generate=gen)
    assert s["retrieve_ms_median"] == 2.0 and s["generate_ms_median"] == 15.0
    assert s["llm_calls_per_question"] == 1.0 and s["llm_answers_from_cache"] == 1
    assert s["stage_seconds"] == {"retrieve": 4.0} and s["questions_timed"] == {"retrieve": 2, "generate": 2}
    empty = timings.summary(question_ids=["q0"], stage_seconds={}, retrieve={}, generate={})
    assert empty["retrieve_ms_median"] is None and empty["llm_calls_per_question"] is None
    assert "retrieval_modules_ms" not in s  # only for a multi-stage retriever


def test_module_times_leave_the_metrics_for_the_run_records_and_the_report_joins_them_back():
    """evaluate.stage_metrics rows split into the per-module results (reports/metrics.json, a DVC output) and their
    times (reports/timings.json); the report's module table shows the times from the run records."""
    from kgrag.reporting.report import render

    modules = [{"stage": "extract", "module": "ppr", "questions": 2, "precision": 0.5, "recall": 1.0, "f1": 0.6,
                "hit": 1.0, "nodes_mean": 3.0, "ms_mean": 12.5, "ms_median": 12.0, "llm_unparsed": 0,
                "llm_fallbacks": 0}]
    results, times = timings.split_module_times(modules)
    assert results == [{k: v for k, v in modules[0].items() if not k.startswith("ms_")}]
    assert times == [{"stage": "extract", "module": "ppr", "ms_mean": 12.5, "ms_median": 12.0}]
    run = timings.summary(question_ids=[], stage_seconds={}, retrieve={}, generate={}, retrieval_modules_ms=times)
    assert run["retrieval_modules_ms"] == times
    metrics = {"setup": {}, "retrieval_modules": results}
    line = next(x for x in render(metrics=metrics, rows=[], figure="f.png", examples=0, validation=None,
                                  timings=run).splitlines() if x.startswith("| extract | ppr |"))
    assert line.endswith("| 12.500 |")
    line = next(x for x in render(metrics=metrics, rows=[], figure="f.png", examples=0, validation=None)
                .splitlines() if x.startswith("| extract | ppr |"))
    assert line.endswith("| – |")  # no run records: no time


def test_report_shows_call_records_joined_back_and_a_dash_without_them():
    from kgrag.reporting.report import render_trace
    from kgrag.reporting.report_html import calls_table

    trace = json.dumps({"calls": [{"key": "k1", "tokens_in": 3, "tokens_out": 1, "error": None, "reply": "A"},
                                  {"key": "k2", "tokens_in": 4, "tokens_out": 1, "error": None, "reply": "B"}]})
    row = {S.QUESTION_ID: "q0", "question": "q?", S.TRACE: trace, "prediction": "A", "gold": ["A"]}
    joined = timings.with_records([row], {"q0": {S.QUESTION_ID: "q0", S.CALL_CACHED: [True, False],
                                                 S.CALL_ATTEMPTS: [0, 2], S.GENERATE_MS: 5.0}})[0]
    assert joined[S.GENERATE_MS] == 5.0 and S.CALL_CACHED not in row  # the input row is not changed
    assert timings.call_runs(joined) == [(True, 0), (False, 2)]
    md = "\n".join(render_trace(joined))
    assert "| 1 | `k1` | 3 / 1 | yes | 0 |" in md and "| 2 | `k2` | 4 / 1 | no | 2 |" in md
    assert "| 1 | `k1` | 3 / 1 | – | – |" in "\n".join(render_trace(row))
    html = calls_table(json.loads(trace)["calls"], timings.call_runs(joined))
    assert "<td>yes</td><td>0</td>" in html and "<td>no</td><td>2</td>" in html
    assert "<td>–</td><td>–</td>" in calls_table(json.loads(trace)["calls"])


@pytest.fixture
def retrieve_project(tmp_path, monkeypatch):
    """A project folder with 4 real MetaQA 2-hop questions: validated KG, entity / relation index, params."""
    from kgrag.index.build import build_index

    kg, _ = metaqa_sample_store(tmp_path / "data" / "validated", sample=4)
    # the index stage's default: relation vectors; entity names encoded when the stage first reads them
    build_index(kg, tmp_path / "data" / "index", model="all-MiniLM-L6-v2", entities="lazy")
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["data"].update(path=str(METAQA), input=str(METAQA), sample=4)
    params["retrieve"]["shard_size"] = 2
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.slow
@pytest.mark.parametrize("method", ["pcst", "lego"])
def test_retrieve_stage_twice_gives_byte_identical_output(method, retrieve_project, monkeypatch):
    """The retrieve stage run twice, each shard computed again (no task cache): the DVC output is the same bytes;
    the wall times, which differ, are in the run records, which name the output they describe. LEGO's per-stage
    times (``retrieve.lego.trace_ms``, on by default) are a run-record column too, one per trace stage."""
    import shutil

    from stages import retrieve as stage

    out = Path("data/retrieve/retrieved.parquet")
    runs = []
    for _ in range(2):
        shutil.rmtree(io.SHARDS, ignore_errors=True)  # every shard runs again instead of coming from its file
        stage.main(["--set", f"retrieve.method={method}"])
        record = io.read_json(timings.stage_dir("retrieve") / timings.RECORD)
        runs.append((out.read_bytes(), timings.read_questions("retrieve"), record))
    (bytes1, times1, rec1), (bytes2, times2, rec2) = runs
    assert bytes1 == bytes2
    table = io.read_parquet(out)
    assert table.num_rows == 4 and S.RETRIEVE_MS not in table.column_names
    assert sum(len(h) for h in table.column(S.TRIPLE_HEADS).to_pylist()) > 0  # something was retrieved
    assert sorted(times1) == sorted(times2) == sorted(table.column(S.QUESTION_ID).to_pylist())
    # both runs computed their shards: their wall times differ
    assert [times1[q][S.RETRIEVE_MS] for q in times1] != [times2[q][S.RETRIEVE_MS] for q in times1]
    assert rec1["outputs"] == rec2["outputs"] == {out.as_posix(): io.file_hash(out)}
    assert rec1["seconds"] > 0 and rec1["questions"] == 4
    traces = {q: json.loads(t) for q, t in zip(table.column(S.QUESTION_ID).to_pylist(),
                                               table.column(S.TRACE).to_pylist())}
    if method == "lego":
        assert all(not any("ms" in st for st in tr["stages"]) for tr in traces.values())
        assert all(len(times1[q][S.STAGE_MS]) == len(tr["stages"]) > 0 for q, tr in traces.items())
        assert [times1[q][S.STAGE_MS] for q in traces] != [times2[q][S.STAGE_MS] for q in traces]
    else:
        assert all(times1[q][S.STAGE_MS] is None for q in traces)
