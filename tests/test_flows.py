"""Prefect flows: shard tasks read their slice of the input files and write a shard file named by its key, so a
re-run (or a resumed run) skips the finished shards; no flow or task parameter carries rows."""

from __future__ import annotations

import dataclasses
import uuid

import numpy as np
import pyarrow as pa
import pytest

from kgrag import schema as S
from kgrag.params import RetrieveParams
from kgrag.registry import RETRIEVERS
from kgrag.kg.store import KGStore
from tests.conftest import MOVIES, experiment_params, flow_inputs, shard_rows, tiny_tables, write_index

MODEL = "all-MiniLM-L6-v2"


@pytest.fixture
def tiny_project(tmp_path, movies_db):
    kg = KGStore(movies_db)
    write_index(tmp_path / "index", kg, MODEL)
    topic = kg.find_entities("[Al Pacino]")
    rows = [
        {S.QUESTION_ID: f"q{i}", S.SPLIT: "test", S.HOPS: 2, S.TEXT: f"who directed films of [Al Pacino] {i}",
         S.QTYPE: "", S.TOPIC_IDS: topic, S.ANSWER_IDS: [], S.ANSWERS: []}
        for i in range(5)
    ]
    return {"db": str(movies_db), "index": str(tmp_path / "index"), "rows": rows, "tmp": tmp_path}


@pytest.mark.slow
def test_retrieve_flow_caches_shards(tiny_project, monkeypatch):
    from flows.retrieve import retrieve_flow

    calls = []
    entry = RETRIEVERS.get("pcst")

    def counting(**kw):
        calls.append(kw["question"].question_id)
        return entry.impl(**kw)

    monkeypatch.setitem(RETRIEVERS._entries, "pcst", dataclasses.replace(entry, impl=counting))
    params = RetrieveParams(method="pcst", shard_size=2)
    run_id = uuid.uuid4().hex  # a fresh input hash: no cache from earlier test sessions
    kw = dict(**flow_inputs(tiny_project["tmp"] / "a", tiny_project["rows"]), db_path=tiny_project["db"],
              db_hash=run_id, index_dir=tiny_project["index"], index_hash="i",
              params=experiment_params(retrieve=params, index_model=MODEL))
    first = shard_rows(retrieve_flow(**kw))
    assert len(calls) == 5 and [r[S.QUESTION_ID] for r in first] == [f"q{i}" for i in range(5)]
    second = shard_rows(retrieve_flow(**kw))
    assert len(calls) == 5, "a re-run must come from the shard files"
    assert [r[S.TRIPLE_HEADS] for r in second] == [r[S.TRIPLE_HEADS] for r in first]
    # one more question: only its new shard runs, the finished shards are reused
    extra = dict(tiny_project["rows"][0], **{S.QUESTION_ID: "q5"})
    more = flow_inputs(tiny_project["tmp"] / "b", tiny_project["rows"] + [extra])
    retrieve_flow(**{**kw, "questions": more["questions"]})
    assert calls[5:] == ["q4", "q5"]
    # a changed param is a new key: everything runs again
    retrieve_flow(**{**kw, "params": experiment_params(
        retrieve=RetrieveParams(method="pcst", shard_size=2, pcst={"topk": 4}), index_model=MODEL)})
    assert len(calls) == 12


def test_shards_are_gathered_in_shard_order_whatever_finishes_first(tiny_project, monkeypatch):
    """Shards run concurrently (3 threads) and the first one finishes last: rows still come in question order."""
    import threading

    from prefect.task_runners import ThreadPoolTaskRunner

    from flows.retrieve import retrieve_flow

    entry = RETRIEVERS.get("pcst")
    finished: list[str] = []
    lock = threading.Lock()

    others_done = threading.Event()  # q0 waits for the event (the other 4 finished), not for a clock
    waited: list[bool] = []

    def slow_first(**kw):
        qid = kw["question"].question_id
        if qid == "q0":
            waited.append(others_done.wait(timeout=120))
        out = entry.impl(**kw)
        with lock:
            finished.append(qid)
            if len(finished) == 4 and "q0" not in finished:
                others_done.set()
        return out

    monkeypatch.setitem(RETRIEVERS._entries, "pcst", dataclasses.replace(entry, impl=slow_first))
    rows = shard_rows(retrieve_flow.with_options(task_runner=ThreadPoolTaskRunner(max_workers=3))(
        **flow_inputs(tiny_project["tmp"], tiny_project["rows"]), db_path=tiny_project["db"],
        db_hash=uuid.uuid4().hex, index_dir=tiny_project["index"], index_hash="i",
        params=experiment_params(retrieve=RetrieveParams(method="pcst", shard_size=1), index_model=MODEL)))
    assert waited == [True] and finished[-1] == "q0", (waited, finished)  # q0 did finish last
    assert [r[S.QUESTION_ID] for r in rows] == [f"q{i}" for i in range(5)]


def test_generate_reads_the_kg_through_the_store_retrieve_store_names(tiny_project, monkeypatch):
    """`retrieve.store: duckdb` holds past retrieval: the generate flow's shards open the KG through
    `DuckKGStore` (a real DuckDB file, SQL per lookup), and answer as with the in-memory store."""
    from flows.generate import generate_flow
    from flows.retrieve import retrieve_flow
    from kgrag import io
    from kgrag.params import GenerateParams, ReasonParams
    from kgrag.kg.store_duckdb import DuckKGStore
    from tests.test_reliability import FaultServer

    tmp = tiny_project["tmp"]
    files = flow_inputs(tmp / "in", tiny_project["rows"])
    shards = retrieve_flow(questions=files["questions"], db_path=tiny_project["db"], db_hash=uuid.uuid4().hex,
                           index_dir=tiny_project["index"], index_hash="i",
                           params=experiment_params(retrieve=RetrieveParams(method="khop", shard_size=2),
                                                    index_model=MODEL), shard_dir=files["shard_dir"])
    retrieved = tmp / "retrieved.parquet"
    io.stream_shards(shards, {retrieved: S.RETRIEVED})
    opened: list[str] = []
    real_init = DuckKGStore.__init__

    def spy(self, path, *a, **kw):  # the real store, its openings counted
        opened.append(str(path))
        real_init(self, path, *a, **kw)

    monkeypatch.setattr(DuckKGStore, "__init__", spy)
    srv = FaultServer()  # replies with the tail of the context's first triple: the context must reach the prompt
    try:
        got = {}
        for store in ("duckdb", "memory"):
            res = generate_flow(questions=files["questions"], retrieved=str(retrieved), db_path=tiny_project["db"],
                                params=experiment_params(
                                    generate=GenerateParams(backend="openai", openai={"base_url": srv.url},
                                                            shard_size=2),
                                    reason=ReasonParams(method="answer"), store=store),
                                cache_path=str(tmp / f"calls-{store}.sqlite"), shard_dir=str(tmp / f"gen-{store}"))
            got[store] = [r[S.PREDICTION] for r in shard_rows(res["shards"])]
            if store == "duckdb":
                assert opened and set(opened) == {tiny_project["db"]}, opened
                n_opened = len(opened)
        assert len(opened) == n_opened  # the memory run opened no DuckKGStore
    finally:
        srv.stop()
    assert got["duckdb"] == got["memory"] and len(got["duckdb"]) == 5
    assert all(p and p != "unknown" for p in got["duckdb"]), got  # each prompt held its retrieved triples
