"""Data by reference at scale: 20,000 questions with 100-triple retrieved rows through the real Prefect engine.

Every flow-run parameter (as the Prefect API stores it) and every task-run parameter (as the task runner
receives it) serializes to <= 64 KB, although the rows themselves are tens of megabytes: flows and tasks get
file paths, hashes and row ranges. The shard tasks' bodies are replaced by ones that read their slice of the
input files through the same ``kgrag.io`` calls and write a minimal shard (answering 20,000 questions is a
bench, not a test); the flows, the Prefect engine, the shard files and the stage's streaming join are real.
"""

from __future__ import annotations

import json
import uuid

import numpy as np
import pyarrow as pa
import pytest
from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.task_runners import ThreadPoolTaskRunner

from kgrag import io, schema as S
from kgrag.params import GenerateParams, RetrieveParams
from tests.conftest import experiment_params

N = 20_000
TRIPLES = 100
LIMIT = 64 * 1024


class RecordingRunner(ThreadPoolTaskRunner):
    """Prefect's thread-pool runner, recording the serialized size of every task's parameters."""

    sizes: list[tuple[str, int]] = []

    def submit(self, task, parameters, wait_for=None, dependencies=None):  # noqa: D102
        RecordingRunner.sizes.append((task.name, len(json.dumps(parameters, default=str))))
        return super().submit(task, parameters, wait_for=wait_for, dependencies=dependencies)


def _inputs(folder) -> dict:
    """20,000 questions and their retrieved rows of 100 triples each, as the stages write them."""
    rng = np.random.default_rng(0)
    ids = [f"q{i:05d}" for i in range(N)]
    questions = pa.table({
        S.QUESTION_ID: ids, S.SPLIT: ["test"] * N, S.HOPS: pa.nulls(N, pa.int32()),
        S.TEXT: [f"which film is question {i} about, and who directed it?" for i in range(N)],
        S.QTYPE: [""] * N, S.TOPIC_IDS: [[0]] * N, S.ANSWER_IDS: [[1]] * N, S.ANSWERS: [["Michael Mann"]] * N,
        S.GRAPH_ID: pa.nulls(N, pa.string()), S.CHOICES: pa.nulls(N, pa.list_(pa.string()))}, schema=S.QUESTIONS)
    offsets = pa.array(np.arange(0, (N + 1) * TRIPLES, TRIPLES, dtype=np.int32))

    def lists(high: int) -> pa.Array:
        return pa.ListArray.from_arrays(offsets, pa.array(rng.integers(0, high, N * TRIPLES)))

    retrieved = pa.table({
        S.QUESTION_ID: ids, S.MODULE: ["test"] * N, S.TRIPLE_HEADS: lists(13), S.TRIPLE_RELATIONS: lists(3),
        S.TRIPLE_TAILS: lists(13), S.NODE_IDS: lists(13), S.CONTEXT_TRIPLES: ["(a, r, b)" * TRIPLES] * N,
        S.CONTEXT_CSV: [""] * N, S.NEIGHBOURHOOD_NODES: [13] * N, S.NEIGHBOURHOOD_EDGES: [TRIPLES] * N,
        S.TRACE: ["{}"] * N}, schema=S.RETRIEVED)
    out = {"questions": str(folder / "questions.parquet"), "retrieved": str(folder / "retrieved.parquet")}
    io.write_parquet(out["questions"], questions, row_group_size=io.ROW_GROUP)
    io.write_parquet(out["retrieved"], retrieved, row_group_size=io.ROW_GROUP)
    return out


@task(name="generate_shard", cache_policy=NO_CACHE, persist_result=False)
def _generate_shard(*, out, questions, start, stop, retrieved, retrieved_rows, **_):
    qs = io.read_rows(questions, start, stop, [S.QUESTION_ID])
    got = io.take_rows(retrieved, retrieved_rows, [S.QUESTION_ID, S.TRIPLE_HEADS])
    assert got.column(S.QUESTION_ID).to_pylist() == qs.column(S.QUESTION_ID).to_pylist()
    assert all(len(h) == TRIPLES for h in got.column(S.TRIPLE_HEADS).to_pylist())
    n = qs.num_rows
    rows = pa.table({S.QUESTION_ID: qs.column(S.QUESTION_ID), S.PREDICTION: ["unknown"] * n,
                     S.FAILED: [False] * n, S.CACHED: [0] * n})
    io.write_arrow(out, pa.Table.from_pylist(rows.to_pylist(), schema=S.GENERATE_SHARD))
    return {"path": out, "failed": 0}


@task(name="retrieve_shard", cache_policy=NO_CACHE, persist_result=False)
def _retrieve_shard(*, out, questions, start, stop, **_):
    qs = io.read_rows(questions, start, stop, [S.QUESTION_ID])
    io.write_arrow(out, pa.Table.from_pylist([{S.QUESTION_ID: q} for q in qs.column(0).to_pylist()],
                                             schema=S.RETRIEVE_SHARD))
    return out


def _flow_run_parameters(state) -> int:
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        run = client.read_flow_run(state.state_details.flow_run_id)
    return len(json.dumps(run.parameters, default=str))


@pytest.mark.slow
def test_every_prefect_parameter_stays_small_at_20000_questions(tmp_path, monkeypatch, movies_db):
    import flows.generate
    import flows.retrieve

    files = _inputs(tmp_path)
    rows_bytes = sum((tmp_path / f).stat().st_size for f in ("questions.parquet", "retrieved.parquet"))
    monkeypatch.setattr(flows.generate, "generate_shard", _generate_shard)
    monkeypatch.setattr(flows.retrieve, "retrieve_shard", _retrieve_shard)
    RecordingRunner.sizes = []
    runner = RecordingRunner(max_workers=1)
    shard_dir = str(tmp_path / "shards")

    state = flows.generate.generate_flow.with_options(task_runner=runner)(
        questions=files["questions"], retrieved=files["retrieved"], db_path=str(movies_db),
        params=experiment_params(generate=GenerateParams(shard_size=500)), cache_path=str(tmp_path / "calls.sqlite"),
        shard_dir=shard_dir, inputs_hash=uuid.uuid4().hex, return_state=True)
    result = state.result()
    flow_sizes = [_flow_run_parameters(state)]
    assert len(result["shards"]) == N // 500 and result["failed"] == 0
    out = tmp_path / "generations.parquet"
    assert io.stream_shards(result["shards"], {out: S.GENERATIONS}) == N
    assert io.read_column(out, S.QUESTION_ID) == io.read_column(files["questions"], S.QUESTION_ID)

    state = flows.retrieve.retrieve_flow.with_options(task_runner=runner)(
        questions=files["questions"], db_path=str(movies_db), db_hash=uuid.uuid4().hex, index_dir=str(tmp_path),
        index_hash="i", params=experiment_params(retrieve=RetrieveParams(shard_size=500), index_model="m"),
        shard_dir=shard_dir,
        return_state=True)
    assert len(state.result()) == N // 500
    flow_sizes.append(_flow_run_parameters(state))

    tasks = RecordingRunner.sizes
    assert {name for name, _ in tasks} == {"generate_shard", "retrieve_shard"} and len(tasks) == 2 * N // 500
    largest = max([s for _, s in tasks] + flow_sizes)
    print(f"{N} questions, {rows_bytes / 1e6:.1f} MB of input files: largest flow-run parameters "
          f"{max(flow_sizes)} B, largest task-run parameters {max(s for _, s in tasks)} B")
    assert rows_bytes > 10 * LIMIT  # the rows would not have fit
    assert largest <= LIMIT, (flow_sizes, sorted(s for _, s in tasks)[-3:])
