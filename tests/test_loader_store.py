"""MetaQA loader on the real files, DuckDB round trip, the KG's Parquet files and the DuckDB file derived from
them, and the CSR neighbourhood against igraph."""

from __future__ import annotations

import hashlib
import os

import igraph as ig
import numpy as np
import pyarrow as pa
import pytest

from kgrag import schema as S
from kgrag.kg.loaders.metaqa import load_metaqa
from kgrag.kg.duckdb_io import (DB_NAME, TABLES, ensure_duckdb, is_derived, kg_hash, read_tables, table_files,
                             write_duckdb, write_tables)
from kgrag.kg.store import KGStore
from tests.conftest import METAQA, MOVIES, ROOT, tiny_tables


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


def _sha(path) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def _tables(metaqa) -> dict[str, pa.Table]:
    return {"entities": metaqa.entities, "relations": metaqa.relations, "triples": metaqa.triples,
            "questions": metaqa.questions}


def test_kg_parquet_files_have_the_same_bytes_on_every_write(tmp_path, metaqa):
    """What DVC tracks (the stages' Parquet tables) is byte-identical across writes; the DuckDB file built from
    them is not (a header checksum and a random database id), which is why it is no DVC output."""
    a, b = write_tables(tmp_path / "a", _tables(metaqa)), write_tables(tmp_path / "b", _tables(metaqa))
    assert a == tmp_path / "a" / DB_NAME
    for name in TABLES:
        assert _sha(tmp_path / "a" / f"{name}.parquet") == _sha(tmp_path / "b" / f"{name}.parquet")
    assert kg_hash(a) == kg_hash(b)
    for name, table in read_tables(b).items():  # the derived file holds the tables, rows in order
        assert table.equals(read_tables(a)[name])
    assert read_tables(a, ("triples",))["triples"].equals(metaqa.triples)
    assert KGStore(a).num_triples == metaqa.triples.num_rows


def test_derived_duckdb_is_rebuilt_when_missing_or_stale(tmp_path):
    tables = tiny_tables(MOVIES)
    db = write_tables(tmp_path, tables)
    assert is_derived(db) and set(table_files(db).values()) == {tmp_path / f"{n}.parquet" for n in TABLES}
    first = os.stat(db).st_mtime_ns
    assert KGStore(db).num_triples == len(MOVIES) and os.stat(db).st_mtime_ns == first  # current: kept
    db.unlink()  # a fresh clone after `dvc pull`: the Parquet files only
    assert KGStore(str(db)).num_triples == len(MOVIES) and db.is_file()
    h = kg_hash(db)
    # another version of the Parquet files checked out (dvc checkout): the next open rebuilds
    write_tables(tmp_path / "other", tiny_tables(MOVIES[:3]))
    os.replace(tmp_path / "other" / "triples.parquet", tmp_path / "triples.parquet")
    assert KGStore(db).num_triples == 3
    assert read_tables(db, ("triples",))["triples"].num_rows == 3
    assert kg_hash(db) != h
    assert not list(tmp_path.glob(f"{DB_NAME}.*"))  # no temp file or WAL left beside it


def test_a_duckdb_file_without_parquet_tables_is_used_as_it_is(tmp_path):
    db = tmp_path / "kg.duckdb"
    write_duckdb(db, tiny_tables(MOVIES))
    before = _sha(db)
    assert not is_derived(db) and ensure_duckdb(db) == db and _sha(db) == before
    assert kg_hash(db) == before[:16]  # the file's own bytes
    assert KGStore(db).num_triples == len(MOVIES)


def test_dvc_ignores_the_derived_duckdb_files():
    """``.dvcignore`` keeps the derived DuckDB file (and its WAL / temp files) out of the hashes of the
    ``data/ingest`` and ``data/validated`` outputs, and nothing else of theirs."""
    from dvc.repo import Repo

    with Repo(str(ROOT)) as repo:
        for folder in ("data/ingest", "data/validated"):
            for name in (DB_NAME, f"{DB_NAME}.wal", f"{DB_NAME}.123.456.tmp"):
                assert repo.dvcignore.is_ignored_file(str(ROOT / folder / name)), name
            for name in (*(f"{n}.parquet" for n in TABLES), "summary.json"):
                assert not repo.dvcignore.is_ignored_file(str(ROOT / folder / name)), name


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

    from kgrag.index import encoder as embed
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
