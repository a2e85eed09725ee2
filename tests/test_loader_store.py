"""MetaQA loader on the real files, DuckDB round trip, and the CSR neighbourhood against igraph."""

from __future__ import annotations

import igraph as ig
import numpy as np
import pytest

from kgrag import schema as S
from kgrag.loaders.metaqa import load_metaqa
from kgrag.duckdb_io import read_tables, write_duckdb
from kgrag.store import KGStore
from tests.conftest import METAQA, MOVIES


@pytest.fixture(scope="module")
def metaqa():
    return load_metaqa(path=str(METAQA), hops=2, split="test", sample=30, seed=1)


def test_metaqa_real_files(metaqa):
    assert metaqa.triples.num_rows == 133_582
    assert metaqa.relations.num_rows == 9
    assert metaqa.questions.num_rows == 30
    assert metaqa.quarantine.num_rows == 0
    names = metaqa.entities.column(S.NAME).to_pylist()
    for q in metaqa.questions.to_pylist():
        assert q[S.TOPIC_IDS] and all(i is not None for i in q[S.TOPIC_IDS])
        topic = names[q[S.TOPIC_IDS][0]]
        assert f"[{topic}]" in q[S.TEXT]
        known = [(i, a) for i, a in zip(q[S.ANSWER_IDS], q[S.ANSWERS]) if i is not None]
        assert known and all(names[i] == a for i, a in known)


def test_sample_is_seeded():
    a = load_metaqa(path=str(METAQA), hops=1, split="test", sample=10, seed=3).questions
    b = load_metaqa(path=str(METAQA), hops=1, split="test", sample=10, seed=3).questions
    c = load_metaqa(path=str(METAQA), hops=1, split="test", sample=10, seed=4).questions
    assert a.column(S.QUESTION_ID).to_pylist() == b.column(S.QUESTION_ID).to_pylist()
    assert a.column(S.QUESTION_ID).to_pylist() != c.column(S.QUESTION_ID).to_pylist()


def test_malformed_lines_are_quarantined_with_file_and_line(tmp_path):
    (tmp_path / "kb.txt").write_bytes(b"A|r|B\nbroken line\nC|r|D|E\n\xff\xfe|r|X\nB|r|C\n")
    (tmp_path / "qa_1hop_test.txt").write_text("what is [A]\tB\nno topic here\tB\nno tab [A]\n")
    kg = load_metaqa(path=str(tmp_path), hops=1, split="test", sample=0, seed=0)
    assert kg.triples.num_rows == 2
    assert kg.questions.num_rows == 1
    q = kg.quarantine.to_pylist()
    assert {(r[S.ROW], r[S.TABLE].endswith("kb.txt")) for r in q} >= {(2, True), (3, True), (4, True)}
    assert any("UTF-8" in r[S.REASON] for r in q)
    assert {r[S.ROW] for r in q if r[S.TABLE].endswith("qa_1hop_test.txt")} == {2, 3}


def test_duckdb_round_trip(tmp_path, metaqa):
    tables = {"entities": metaqa.entities, "triples": metaqa.triples}
    write_duckdb(tmp_path / "kg.duckdb", tables)
    back = read_tables(tmp_path / "kg.duckdb", ("entities", "triples"))
    assert back["triples"].equals(metaqa.triples)
    assert back["entities"].equals(metaqa.entities)


def _reference_neighbourhood(kg: KGStore, seeds, hops):
    g = ig.Graph(n=kg.num_entities, edges=list(zip(kg.heads.tolist(), kg.tails.tolist())))
    nodes = set()
    for s in seeds:
        nodes |= set(g.neighborhood(s, order=hops))
    inner = set()
    for s in seeds:
        inner |= set(g.neighborhood(s, order=hops - 1)) if hops > 0 else set()
    edges = {i for i, (h, t) in enumerate(zip(kg.heads, kg.tails)) if h in inner or t in inner}
    return nodes, edges


@pytest.mark.parametrize("hops", [0, 1, 2, 3])
def test_neighbourhood_agrees_with_igraph(movies, hops):
    for seeds in ([movies.find_entities("[Al Pacino]")[0]], [0, 5]):
        nb = movies.neighbourhood(seeds, hops, max_edges=10**6)
        ref_nodes, ref_edges = _reference_neighbourhood(movies, seeds, hops)
        assert set(nb.nodes.tolist()) == ref_nodes
        assert set(nb.edges.tolist()) == ref_edges
        assert len(nb.edges) == len(set(nb.edges.tolist()))


def test_neighbourhood_cap_keeps_closest_hops(movies):
    seed = movies.find_entities("[Al Pacino]")
    full = movies.neighbourhood(seed, 2, max_edges=10**6)
    one = movies.neighbourhood(seed, 1, max_edges=10**6)
    cut = movies.neighbourhood(seed, 2, max_edges=len(one.edges) + 1)
    assert cut.truncated and not full.truncated
    assert len(cut.edges) == len(one.edges) + 1
    assert set(one.edges.tolist()) <= set(cut.edges.tolist())


def test_isolated_and_absent_topics(movies):
    assert len(movies.neighbourhood([10_000], 2, 100).nodes) == 0
    nb = movies.neighbourhood(movies.find_entities("[Island A]"), 3, 100)
    assert set(movies.names(nb.nodes)) == {"Island A", "Island B"}


def test_find_entities(movies):
    assert movies.names(movies.find_entities("who starred in [Heat]")) == ["Heat"]
    assert movies.names(movies.find_entities("which films did tom cruise star in")) == ["Tom Cruise"]
    assert movies.find_entities("nothing known") == []


def test_embedding_cache_is_keyed_by_the_set_of_texts(tmp_path, monkeypatch):
    """`$KGRAG_EMBED_CACHE`: a long list is encoded once per set of texts (order-free), a later call with the
    same texts in another order reads the file and returns each text's own vector; another set encodes anew;
    short lists and unset variable bypass the cache."""
    import numpy as np

    from kgrag import embed

    calls = []

    def fake(texts, model, batch_size, progress):  # a deterministic stand-in for the model: text -> vector
        calls.append(list(texts))
        return np.array([[len(t), sum(map(ord, t)) % 97, 1.0] for t in texts], dtype=np.float32)

    monkeypatch.setattr(embed, "_encode", fake)
    monkeypatch.setattr(embed, "CACHE_MIN_TEXTS", 3)
    texts = ["b", "aa", "ccc", "aa"]
    monkeypatch.delenv(embed.CACHE_ENV, raising=False)
    np.testing.assert_array_equal(embed.encode(texts, model="all-MiniLM-L6-v2"), fake(texts, "", 0, False))
    assert not list(tmp_path.iterdir())
    calls.clear()
    monkeypatch.setenv(embed.CACHE_ENV, str(tmp_path))
    first = embed.encode(texts, model="all-MiniLM-L6-v2")
    assert calls == [["aa", "b", "ccc"]] and len(list(tmp_path.glob("*.npy"))) == 1  # sorted distinct texts
    again = embed.encode(list(reversed(texts)), model="all-MiniLM-L6-v2")
    assert len(calls) == 1  # read from the cache
    np.testing.assert_array_equal(again, first[::-1])
    embed.encode(["x", "yy", "zzz"], model="all-MiniLM-L6-v2")
    assert len(calls) == 2 and len(list(tmp_path.glob("*.npy"))) == 2
    embed.encode(["x", "yy"], model="all-MiniLM-L6-v2")  # below CACHE_MIN_TEXTS
    assert len(calls) == 3 and len(list(tmp_path.glob("*.npy"))) == 2
