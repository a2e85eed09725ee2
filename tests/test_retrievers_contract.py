"""Contract tests over every registered retriever: schema, determinism, empty and disconnected graphs."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

from kgrag import io
from kgrag.index.embed import EmbeddingIndex, encode
from kgrag.params import RetrieveParams
from kgrag.registry import RETRIEVERS
from kgrag.retrieval.run import STORE_CHOICE_KEYS, retrieve_one, retrieve_rows
from kgrag import schema as S
from kgrag.types import Question

MODEL = "all-MiniLM-L6-v2"


@pytest.fixture(scope="module")
def index_factory():
    cache = {}

    def make(kg):
        key = id(kg)
        if key not in cache:
            cache[key] = EmbeddingIndex(
                model=MODEL,
                entity_vectors=encode(kg.names(np.arange(kg.num_entities)), model=MODEL),
                relation_vectors=encode([str(r).replace("_", " ") for r in kg.relation_names], model=MODEL),
            )
        return cache[key]

    return make


def _q(kg, text, topic_name=None, answers=()):
    topic = kg.find_entities(f"[{topic_name}]") if topic_name else []
    ans = tuple(kg.find_entities(f"[{a}]")[0] for a in answers)
    return Question(question_id="q", text=text, topic_ids=tuple(topic), answer_ids=ans, answers=tuple(answers))


def _keys(x) -> set[str]:
    if isinstance(x, dict):
        return set(x) | set().union(*map(_keys, x.values()))
    return set().union(*map(_keys, x)) if isinstance(x, list) else set()


def _output_bytes(rows: list[dict], path) -> bytes:
    """The rows as the retrieve stage writes its DVC output (``schema.RETRIEVED``: no run-record column)."""
    io.write_parquet(path, pa.Table.from_pylist(rows, schema=S.RETRIEVED))
    return path.read_bytes()


@pytest.mark.parametrize("method", RETRIEVERS.names())
def test_schema_and_determinism(method, movies, index_factory, tmp_path):
    """Two runs give the same output bytes: the trace (part of retrieved.parquet) holds no wall time, which
    would change dvc.lock on every run; the times are the run-record columns (``schema.RETRIEVE_TIMINGS``)."""
    index = index_factory(movies)
    params = RetrieveParams(method=method)
    q = _q(movies, "who directed the movies starred by [Al Pacino]", "Al Pacino", ["Michael Mann", "Martin Scorsese"])
    rows1 = retrieve_rows(questions=[q], kg=movies, index=index, params=params)
    rows2 = retrieve_rows(questions=[q], kg=movies, index=index, params=params)
    assert set(rows1[0]) == set(S.RETRIEVED.names) | set(S.RETRIEVE_TIMINGS.names)  # output + run record
    assert _output_bytes(rows1, tmp_path / "a.parquet") == _output_bytes(rows2, tmp_path / "b.parquet")
    assert not {k for k in _keys(json.loads(rows1[0][S.TRACE])) if k == "ms" or k.endswith(("_ms", "seconds"))}
    stages = json.loads(rows1[0][S.TRACE]).get("stages")
    if stages:  # a multi-stage retriever (LEGO): one wall time per stage, in the run record
        assert len(rows1[0][S.STAGE_MS]) == len(stages) and rows1[0][S.STAGE_MS] != rows2[0][S.STAGE_MS]
    else:
        assert rows1[0][S.STAGE_MS] is None
    sub, _ = retrieve_one(question=q, query_vec=index.encode([q.text])[0], kg=movies, index=index, params=params)
    assert len(sub.heads) == len(sub.relations) == len(sub.tails)
    # every retrieved triple is a KG triple, and its ends are among the retrieved nodes
    kg_triples = set(zip(movies.heads.tolist(), movies.relations.tolist(), movies.tails.tolist()))
    assert set(zip(sub.heads.tolist(), sub.relations.tolist(), sub.tails.tolist())) <= kg_triples
    assert set(sub.heads.tolist()) | set(sub.tails.tolist()) <= set(sub.node_ids.tolist())


@pytest.mark.parametrize("method", RETRIEVERS.names())
@pytest.mark.parametrize("topic", [None, "Island A", "1986"])
def test_absent_isolated_or_disconnected_topic(method, topic, movies, index_factory):
    index = index_factory(movies)
    q = _q(movies, "what is related", topic)
    sub, _ = retrieve_one(question=q, query_vec=index.encode([q.text])[0], kg=movies, index=index,
                          params=RetrieveParams(method=method))
    names = set(movies.names(sub.node_ids))
    if topic is None:
        assert len(sub) == 0 and len(sub.node_ids) == 0
    elif topic == "Island A":  # its component has two nodes: nothing from the rest may leak in
        assert names <= {"Island A", "Island B"}


def test_pcst_finds_the_answers_on_the_tiny_kg(movies, index_factory):
    index = index_factory(movies)
    q = _q(movies, "who directed the movies starred by [Al Pacino]", "Al Pacino", ["Michael Mann", "Martin Scorsese"])
    params = RetrieveParams(method="pcst", pcst={"topk": 3, "topk_e": 3, "cost_e": 0.5})
    sub, _ = retrieve_one(question=q, query_vec=index.encode([q.text])[0], kg=movies, index=index, params=params)
    assert "Al Pacino" in movies.names(sub.node_ids)  # rooted at the topic
    assert len(sub) > 0


def test_none_retrieves_nothing(movies, index_factory):
    index = index_factory(movies)
    q = _q(movies, "who starred in [Heat]", "Heat")
    sub, _ = retrieve_one(question=q, query_vec=index.encode([q.text])[0], kg=movies, index=index,
                          params=RetrieveParams(method="none"))
    assert len(sub) == 0


def test_relpath_reads_hops_and_the_edge_cap_only_through_its_fallback(movies, index_factory):
    """retrieve.hops / max_neighbourhood_edges: relpath hands them to its fallback retriever only. With
    ``fallback: null`` its output does not depend on them and they leave its cache key (shards re-used); with
    the default fallback (khop, which reads them) they stay in it, as in pcst's; the default key is unchanged."""
    from kgrag.params import section_hash
    from kgrag.retrieval.run import key_hash

    index = index_factory(movies)
    q = _q(movies, "who directed the movies starred by [Al Pacino]", "Al Pacino")
    vec = index.encode([q.text])[0]

    def params(method="relpath", fallback=None, **kw):
        return RetrieveParams(method=method, **({"relpath": {"fallback": fallback}} if method == "relpath" else {}),
                              **kw)

    few, many = params(hops=1, max_neighbourhood_edges=1), params(hops=4, max_neighbourhood_edges=9000)
    subs = [retrieve_one(question=q, query_vec=vec, kg=movies, index=index, params=p)[0] for p in (few, many)]
    triples = [(s.heads.tolist(), s.relations.tolist(), s.tails.tolist()) for s in subs]
    assert len(subs[0]) > 0 and triples[0] == triples[1]
    assert key_hash(few) == key_hash(many) != key_hash(params(hops=1, max_neighbourhood_edges=1, shard_size=7))
    for kw in ({"fallback": "khop"}, {"method": "pcst"}, {"method": "khop"}):
        assert key_hash(params(hops=1, **kw)) != key_hash(params(hops=3, **kw)), kw
    assert key_hash(params(fallback="none", hops=1)) == key_hash(params(fallback="none", hops=3))
    # the default experiment's shards stay: its key is the section's hash less the keys that only choose the store
    assert key_hash(RetrieveParams()) == section_hash(RetrieveParams(), drop=STORE_CHOICE_KEYS)
    assert key_hash(RetrieveParams(memory_budget_gb=1.0)) == key_hash(RetrieveParams())
