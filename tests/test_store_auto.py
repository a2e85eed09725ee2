"""retrieve.store: auto (issue 55 item 3): the store chosen by a memory budget from the KG's counts alone.

Through the real components: tiny KGs written to real DuckDB files (and Parquet tables beside them, as the
stages write them), ``KGStore`` and ``DuckKGStore`` opened for real. The one stand-in is a ``KGStore`` that fails
when built, to show that ``store: memory`` over the budget stops before any load.
"""

from __future__ import annotations

import gc
import tracemalloc

import numpy as np
import pyarrow as pa
import pytest

from kgrag import schema as S
from kgrag.kg import store as store_mod
from kgrag.kg.duckdb_io import DB_NAME, write_duckdb, write_tables
from kgrag.kg.store import (KGStore, StoreTooBig, check_memory, choose_store, kg_counts, memory_estimate, open_store,
                            resolve_store)
from kgrag.kg.store_duckdb import DuckKGStore
from kgrag.kg.synth import generate_kg
from kgrag.params import Params
from kgrag.retrieval.run import key_hash

TINY = 1e-6  # GiB: 1 KiB, under any KG's estimate
BIG = 64.0  # GiB: over any KG here


def synth_tables(n_triples: int, entities_per_triple: float = 0.3, seed: int = 0) -> dict[str, pa.Table]:
    """The four KG tables of a synthetic KG (``kgrag.kg.synth``), no questions."""
    kg = generate_kg(n_triples=n_triples, entities_per_triple=entities_per_triple, n_relations=8, n_types=3,
                     skew=1.0, relation_skew=1.0, seed=seed)
    return kg.tables()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """(DuckDB file of its own, folder of Parquet tables with the derived DuckDB file, tables) of a 2,000-triple KG."""
    folder = tmp_path_factory.mktemp("tiny")
    tables = synth_tables(2_000)
    own = folder / "own" / "kg.duckdb"
    write_duckdb(own, tables)
    derived = write_tables(folder / "derived", tables)
    return own, derived, tables


@pytest.fixture(autouse=True)
def _fresh(monkeypatch, tmp_path):
    """Each test in its own working directory (the DuckDB store's sidecar cache is relative) with fresh caches."""
    monkeypatch.chdir(tmp_path)
    store_mod._chosen.cache_clear()
    store_mod._open_store.cache_clear()
    yield
    store_mod._chosen.cache_clear()
    store_mod._open_store.cache_clear()


def test_counts_come_from_metadata(tiny, tmp_path):
    """Triple and entity counts from DuckDB's table statistics, or from the Parquet footers of a derived store
    whose DuckDB file is not built yet (and is still not built after)."""
    own, derived, tables = tiny
    want = (tables["triples"].num_rows, tables["entities"].num_rows)
    assert kg_counts(own) == want
    assert kg_counts(derived) == want
    fresh = tmp_path / "fresh" / DB_NAME
    write_tables(fresh.parent, tables)
    fresh.unlink()
    assert kg_counts(fresh) == want and not fresh.exists()


def test_auto_picks_memory_under_the_budget_and_duckdb_over_it(tiny):
    own, derived, _ = tiny
    for db in (own, derived):
        assert choose_store(db, "auto", BIG) == "memory"
        assert choose_store(db, "auto", TINY) == "duckdb"
        assert choose_store(db, "duckdb", BIG) == "duckdb"  # duckdb is never second-guessed
    mem = open_store(str(own), "auto", BIG)
    assert type(mem) is KGStore
    assert open_store(str(own), "memory", BIG) is mem  # auto resolved to memory is the memory store itself
    duck = open_store(str(own), "auto", TINY)
    assert type(duck) is DuckKGStore
    # the same neighbourhoods either way (the stores' agreement at large: tests/test_store_duckdb.py)
    hub = int(np.argmax(mem.degree(np.arange(mem.num_entities))))
    for seeds, hops in (([hub], 1), ([0, 5], 2)):
        a, b = mem.neighbourhood(seeds, hops, 500), duck.neighbourhood(seeds, hops, 500)
        assert np.array_equal(a.nodes, b.nodes) and np.array_equal(a.edges, b.edges) and a.truncated == b.truncated
    duck.close()


def test_memory_over_the_budget_stops_before_loading_with_a_short_error(tiny, tmp_path, monkeypatch):
    """store: memory on a KG over the budget: StoreTooBig, a few lines naming what, where and store: duckdb; no
    KGStore is built and a derived store's DuckDB file is not even written."""
    own, _, tables = tiny
    fresh = tmp_path / "fresh" / DB_NAME
    write_tables(fresh.parent, tables)
    fresh.unlink()

    class NoLoad:
        def __init__(self, *a, **k):
            raise AssertionError("the KG was loaded")

    monkeypatch.setattr(store_mod, "KGStore", NoLoad)
    for db in (own, fresh):
        with pytest.raises(StoreTooBig) as e:
            open_store(str(db), "memory", TINY)
        msg = str(e.value)
        assert "retrieve.store: memory" in msg and "store: duckdb" in msg and str(db) in msg
        assert f"{tables['triples'].num_rows:,} triples" in msg and "retrieve.memory_budget_gb" in msg
        assert len(msg.splitlines()) <= 3 and len(msg) < 400
    assert not fresh.exists()


def test_a_stage_resolves_the_store_once(tiny):
    """resolve_store (the stages' entry points): auto becomes memory or duckdb with the budget it was chosen by,
    so shard tasks open the same store; memory over the budget exits with the short message; the shard key of
    auto resolved to memory is that of store: memory (the budget is not in it)."""
    own, _, _ = tiny
    base = Params()
    assert base.retrieve.store == "auto" and base.retrieve.memory_budget_gb is None

    def with_store(store, budget):
        return base.model_copy(update={"retrieve": base.retrieve.model_copy(
            update={"store": store, "memory_budget_gb": budget})})

    small = resolve_store(with_store("auto", TINY), own).retrieve
    assert (small.store, small.memory_budget_gb) == ("duckdb", TINY)
    resolved = resolve_store(with_store("auto", None), own)
    fits = resolved.retrieve
    assert fits.store == "memory" and fits.memory_budget_gb > 0  # null: a share of the memory available now
    # what a shard task reads back (the budget as chosen: free memory may differ by the time a task runs)
    assert Params.model_validate_json(resolved.model_dump_json(by_alias=True)).retrieve == fits
    assert key_hash(fits) == key_hash(with_store("memory", None).retrieve) == key_hash(
        with_store("memory", 3.0).retrieve)
    assert key_hash(small) != key_hash(fits)  # the store chosen stays in the key, as store did
    with pytest.raises(SystemExit) as e:
        resolve_store(with_store("memory", TINY), own)
    assert "store: duckdb" in str(e.value.code)


def test_relplan_stops_over_the_budget(tiny):
    """A stage part that has no DuckDB path (relplan.source: labelled walks the KG in memory) stops over the budget,
    whatever the store (tests/test_relplan_duckdb.py runs the stage)."""
    own, _, _ = tiny
    check_memory(own, BIG, "relplan")
    with pytest.raises(StoreTooBig, match="relplan reads the whole KG into memory"):
        check_memory(own, TINY, "relplan")


def test_the_estimate_is_within_a_factor_2_of_the_measured_size(tmp_path):
    """memory_estimate against the peak bytes KGStore takes (tracemalloc: opening it, then the name look-ups
    ids_of and find_entities build) on generated KGs of two shapes (few and many entities per triple)."""
    for n, epe in ((60_000, 0.05), (30_000, 0.6)):
        db = tmp_path / f"kg{n}.duckdb"
        write_duckdb(db, synth_tables(n, epe, seed=1))
        triples, entities = kg_counts(db)
        gc.collect()
        tracemalloc.start()
        try:
            kg = KGStore(db)
            kg.ids_of(["synth_person_0000001"])
            kg.names_lookup(["x"])
            measured = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        est = memory_estimate(triples, entities)
        assert 0.5 <= est / measured <= 2.0, (n, epe, est, measured)


def test_the_default_retriever_gives_the_same_rows_on_the_store_auto_picks(tmp_path):
    """retrieve_rows (the retrieve stage's shard work) with the default retriever (relpath, zero-shot) on the store
    auto picks under a tiny budget (DuckDB) and under a large one (memory): the same rows, on a generated KG with
    questions whose answers are known."""
    from kgrag.index.embed import EmbeddingIndex, encode
    from kgrag.kg.loaders.triples import load_triples
    from kgrag.kg.store import questions_from_table
    from kgrag.kg.synth import write_synth
    from kgrag.params import RetrieveParams
    from kgrag.retrieval.run import retrieve_rows
    from tests.test_store_duckdb import MODEL, _untimed

    write_synth(out=tmp_path / "s", n_triples=20_000, entities_per_triple=0.25, n_relations=8, n_types=3, skew=1.0,
                relation_skew=1.0, questions=12, hops=(1, 2), max_answers=20, graph_extra=0, bad_lines=0, seed=4)
    t = load_triples(path=str(tmp_path / "s" / "triples.tsv"), questions=str(tmp_path / "s" / "questions.jsonl"))
    db = tmp_path / "kg.duckdb"
    write_duckdb(db, {"entities": t.entities, "relations": t.relations, "triples": t.triples, "questions": t.questions})
    questions = questions_from_table(t.questions)
    duck, mem = open_store(str(db), "auto", TINY), open_store(str(db), "auto", BIG)
    assert (type(duck), type(mem)) == (DuckKGStore, KGStore)
    rel = [str(x).replace("_", " ") for x in mem.relation_names]
    vecs = encode(rel, model=MODEL)
    index = EmbeddingIndex(model=MODEL, entity_vectors=np.zeros((0, vecs.shape[1]), np.float32), relation_vectors=vecs)
    params = RetrieveParams()
    assert params.method == "relpath"
    a = retrieve_rows(questions=questions, kg=mem, index=index, params=params)
    b = retrieve_rows(questions=questions, kg=duck, index=index, params=params)
    assert _untimed(a) == _untimed(b)
    assert sum(len(r[S.TRIPLE_HEADS]) for r in a) > 0
    duck.close()
