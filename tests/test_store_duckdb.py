"""DuckKGStore (SQL per hop on the DuckDB file) agrees with KGStore (the whole KG in memory): the same
neighbourhoods, degrees and triples on real MetaQA and on a synthetic KG, and the same LEGO lego-00 result."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from kgrag import schema as S
from kgrag.kg.duckdb_io import write_duckdb
from kgrag.index.embed import EmbeddingIndex, encode
from kgrag.kg.loaders.triples import load_triples
from kgrag.params import RetrieveParams
from kgrag.retrieval.run import retrieve_rows
from kgrag.kg.store import KGStore, questions_from_table
from kgrag.kg.store_duckdb import DuckKGStore, sidecar_path
from kgrag.kg.synth import write_synth
from tests.conftest import metaqa_sample_store

MODEL = "all-MiniLM-L6-v2"


@pytest.fixture(scope="module")
def metaqa(tmp_path_factory):
    folder = tmp_path_factory.mktemp("metaqa")
    mem, questions = metaqa_sample_store(folder, sample=12, seed=3)
    duck = DuckKGStore(mem.path, cache_dir=folder / "cache")
    yield mem, duck, questions
    duck.close()


@pytest.fixture(scope="module")
def synth(tmp_path_factory):
    folder = tmp_path_factory.mktemp("synth")
    write_synth(out=folder / "s", n_triples=60_000, entities_per_triple=0.25, n_relations=12, n_types=4, skew=1.0,
                relation_skew=1.0, questions=20, hops=(1, 2), max_answers=20, graph_extra=5, bad_lines=0, seed=2)
    t = load_triples(path=str(folder / "s" / "triples.tsv"), questions=str(folder / "s" / "questions.jsonl"))
    write_duckdb(folder / "kg.duckdb", {"entities": t.entities, "relations": t.relations, "triples": t.triples,
                                        "questions": t.questions})
    mem = KGStore(folder / "kg.duckdb")
    duck = DuckKGStore(folder / "kg.duckdb", cache_dir=folder / "cache")
    yield mem, duck, questions_from_table(t.questions)
    duck.close()


def _same_neighbourhoods(mem, duck, rng, n: int) -> None:
    hubs = np.argsort(-mem.degree(np.arange(mem.num_entities)))[:20]
    for i in range(n):
        pool = hubs if i % 5 == 0 else np.arange(mem.num_entities)
        seeds = rng.choice(pool, size=1 + i % 3)
        hops = i % 4  # 0..3
        cap = [50, 500, 5000, 10**9][i % 4]
        prio = rng.random(len(mem.relation_names)) if i % 2 else None
        a = mem.neighbourhood(seeds, hops, cap, relation_priority=prio)
        b = duck.neighbourhood(seeds, hops, cap, relation_priority=prio)
        assert np.array_equal(a.nodes, b.nodes), i
        assert np.array_equal(a.edges, b.edges), i
        assert a.truncated == b.truncated, i
        assert np.array_equal(mem.degree(a.nodes), duck.degree(a.nodes)), i
        for col in ("heads", "relations", "tails"):
            assert np.array_equal(getattr(mem, col)[a.edges], getattr(duck, col)[a.edges]), (i, col)


def test_neighbourhoods_agree_on_real_metaqa(metaqa):
    mem, duck, _ = metaqa
    assert (duck.num_entities, duck.num_triples) == (mem.num_entities, mem.num_triples)
    _same_neighbourhoods(mem, duck, np.random.default_rng(0), 40)


def test_neighbourhoods_agree_on_synth(synth):
    mem, duck, _ = synth
    _same_neighbourhoods(mem, duck, np.random.default_rng(1), 40)


def test_truncation_happens_in_the_checks(synth):
    mem, duck, _ = synth
    hub = int(np.argmax(mem.degree(np.arange(mem.num_entities))))
    nb = duck.neighbourhood([hub], 2, 100, relation_priority=np.arange(len(mem.relation_names), dtype=float))
    assert nb.truncated and len(nb.edges) == 100


def test_names_degrees_and_lookups_agree(metaqa):
    mem, duck, _ = metaqa
    ids = np.random.default_rng(2).choice(mem.num_entities, 200, replace=False)
    assert duck.names(ids) == mem.names(ids)
    assert duck.entity_names[int(ids[0])] == mem.entity_names[int(ids[0])]
    assert np.array_equal(duck.degree(ids), mem.degree(ids))
    e = np.random.default_rng(3).choice(mem.num_triples, 100, replace=False)  # not cached by any hop: SQL
    h, r, t = duck.heads[e], duck.relations[e], duck.tails[e]
    assert duck.named_triples(h, r, t) == mem.named_triples(mem.heads[e], mem.relations[e], mem.tails[e])
    names = mem.names(ids[:5]) + ["no such entity"]
    assert duck.ids_of(names) == mem.ids_of(names)
    assert duck.find_entities("who directed [Heat]") == mem.find_entities("who directed [Heat]")
    text = "what films did Tom Hanks star in"
    assert duck.find_entities(text) == mem.find_entities(text) != []


def test_lookups_past_the_cache_cap_are_right(synth, tmp_path, monkeypatch):
    """A lookup whose uncached rows, once added, push the same call's cached rows out of the cache (CACHE_MAX)
    still returns every row (triples, degrees, names) from the KG: the scale bench's 1M-triple run had read evicted rows as zeros (head 0,
    tail 0), which the LEGO push extractor then mapped through uninitialized local indices."""
    import kgrag.kg.store_duckdb as D

    mem, _, _ = synth
    duck = DuckKGStore(mem.path, cache_dir=tmp_path / "cache")
    monkeypatch.setattr(D, "CACHE_MAX", 50)
    try:
        rng = np.random.default_rng(7)
        old = rng.choice(mem.num_triples, 40, replace=False)
        new = np.setdiff1d(rng.choice(mem.num_triples, 60, replace=False), old)
        ask = np.concatenate([old, new])
        assert np.array_equal(duck.heads[old], mem.heads[old])  # cached (40 rows)
        # the 60 new rows exceed the cap: the chunk holding `old` is dropped while answering this call
        assert np.array_equal(duck.heads[ask], mem.heads[ask])
        assert np.array_equal(duck.tails[ask], mem.tails[ask]) and np.array_equal(duck.relations[ask], mem.relations[ask])
        nodes = rng.choice(mem.num_entities, 40, replace=False)
        more = np.setdiff1d(rng.choice(mem.num_entities, 60, replace=False), nodes)
        assert np.array_equal(duck.degree(nodes), mem.degree(nodes))
        both = np.concatenate([nodes, more])
        assert np.array_equal(duck.degree(both), mem.degree(both))
        # names too: the 100M retrieve stage failed with a KeyError when a call's new names cleared the cache of its
        # cached ones (LazyNames.fetch)
        assert duck.names(nodes) == mem.names(nodes)
        assert duck.names(both) == mem.names(both)
    finally:
        duck.close()


def test_names_are_fetched_lazily(synth, tmp_path):
    _, _, questions = synth
    fresh = DuckKGStore(synth[0].path, cache_dir=tmp_path / "c")
    nb = fresh.neighbourhood(list(questions[0].topic_ids), 2, 5000)
    fresh.names(questions[0].topic_ids)
    cached = len(fresh.entity_names._cache)
    assert 0 < cached <= len(nb.nodes) < fresh.num_entities  # the neighbourhood's names only, not the KG's
    fresh.close()


def test_a_question_with_its_own_graph_needs_the_memory_store(synth):
    _, duck, _ = synth
    with pytest.raises(NotImplementedError, match="store: memory"):
        duck.question_neighbourhood([0], 2, 10, graph_id="q1")


def test_sidecar_is_rebuilt_for_a_rewritten_kg(tmp_path, synth):
    mem = synth[0]
    import shutil

    db = tmp_path / "kg.duckdb"
    shutil.copy(mem.path, db)
    first = sidecar_path(db, tmp_path / "c")
    DuckKGStore(db, cache_dir=tmp_path / "c").close()
    assert first.exists()
    os.utime(db, ns=(1, 1))  # rewritten (mtime changes): a new sidecar
    assert sidecar_path(db, tmp_path / "c") != first


def _index(kg, model=MODEL):
    rel = [str(x).replace("_", " ") for x in kg.relation_names[np.arange(len(kg.relation_names))]]
    vecs = encode(rel, model=model)
    return EmbeddingIndex(model=model, entity_vectors=np.zeros((0, vecs.shape[1]), np.float32), relation_vectors=vecs)


def _untimed(rows):
    """Rows without their run-record columns (wall times); the traces hold none."""
    out = []
    for r in rows:
        r = {k: v for k, v in r.items() if k not in (S.RETRIEVE_MS, S.STAGE_MS)}
        out.append({**r, "trace": json.loads(r.pop(S.TRACE))})
    return out


@pytest.mark.parametrize("method", ["push", "power"])
@pytest.mark.parametrize("which", ["metaqa", "synth"])
def test_lego_00_gives_the_same_subgraphs_on_both_stores(which, method, metaqa, synth):
    """Same subgraphs from both stores: ppr's power iteration on the same k-hop neighbourhood, its push on the
    same whole-KG adjacency (the DuckDB store reads it from the triples table once, in KGStore's layout)."""
    mem, duck, questions = metaqa if which == "metaqa" else synth
    params = RetrieveParams(method="lego", hops=2, max_neighbourhood_edges=2000, store="duckdb",
                            lego={"preset": "lego-00", "extract": {"name": "ppr", "params": {"method": method}}})
    index = _index(mem)
    b = retrieve_rows(questions=questions, kg=duck, index=index, params=params)
    a = retrieve_rows(questions=questions, kg=mem, index=index, params=params)
    for x, y in zip(mem.question_adjacency(graph_id=None), duck.question_adjacency(graph_id=None)):
        np.testing.assert_array_equal(x, y)
    assert _untimed(a) == _untimed(b)
    assert sum(len(r[S.TRIPLE_HEADS]) for r in b) > 0
    recalls = [json.loads(r[S.TRACE])["answer_recall"] for r in b]
    assert np.mean([x for x in recalls if x is not None]) > 0.3


def test_lazy_names_iterate_to_their_end(movies_db):
    """Iterating a DuckKGStore's names gives exactly the in-memory store's (it used to go on past the last id:
    Python's fallback iteration by __getitem__ met no IndexError, and context parsing with the duckdb store
    looped for ever). Bounded by islice so that a regression fails instead of hanging."""
    import itertools

    from kgrag.llm.constrain import context_entities

    mem, duck = KGStore(movies_db), DuckKGStore(movies_db)
    n = len(mem.relation_names)
    assert list(itertools.islice(iter(duck.relation_names), n + 5)) == [str(r) for r in mem.relation_names]
    assert list(itertools.islice(iter(duck.entity_names), mem.num_entities + 5)) == list(mem.names(
        np.arange(mem.num_entities)))
    ctx = "(Heat, directed_by, Michael Mann)\n(Heat, starred_actors, Al Pacino)"
    assert context_entities(ctx, duck) == context_entities(ctx, mem) == ["Heat", "Michael Mann", "Al Pacino"]
