"""Edge groups (kgrag/kg/groups.py): the DuckDB store's memory-mapped files agree with the in-memory build, row by
row, whatever the streaming batch; a second open reads the same files; a build that fails leaves nothing behind."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from kgrag.kg import groups as G
from kgrag.kg.store_duckdb import DuckKGStore
from tests.conftest import tiny_tables, write_duckdb


def _kg(tmp_path, seed: int = 0):
    """A random KG of 400 triples over 60 entities and 5 relations, with self-loops, repeated (head, relation) pairs
    and one hub (entity e0 with 120 edges of relation r0)."""
    rng = np.random.default_rng(seed)
    rows = [(f"e{rng.integers(60)}", f"r{rng.integers(5)}", f"e{rng.integers(60)}") for _ in range(270)]
    rows += [(f"e{i}", "r1", f"e{i}") for i in range(0, 60, 6)]  # self-loops
    rows += [("e0", "r0", f"e{rng.integers(1, 60)}") for _ in range(120)]  # a hub
    write_duckdb(tmp_path / "kg.duckdb", tiny_tables(rows))
    return DuckKGStore(tmp_path / "kg.duckdb", cache_dir=tmp_path / "duck")


def _arrays(store):
    t = store.edge_triples(np.arange(store.num_triples))
    return t[:, 0], t[:, 1], t[:, 2]


def _sha(folder) -> dict:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


@pytest.mark.parametrize("batch", [7, G.BATCH_ROWS])
def test_disk_groups_equal_the_in_memory_build(tmp_path, monkeypatch, batch):
    """Keys, starts and edges as :meth:`EdgeGroups.from_arrays` builds them from the triples; each row's ``other`` is
    the node its edge reaches from the group's node; a batch of 7 rows splits groups across batches."""
    monkeypatch.setattr(G, "BATCH_ROWS", batch)
    store = _kg(tmp_path)
    h, r, t = _arrays(store)
    want = G.EdgeGroups.from_arrays(h, r, t, len(store.relation_names))
    got = store.edge_groups()
    assert isinstance(got.edge, np.memmap) and isinstance(got.other, np.memmap)
    assert np.array_equal(got.keys, want.keys) and np.array_equal(got.starts, want.starts)
    assert np.array_equal(got.edge, want.edge)
    fwd = np.repeat((got.keys // got.n_rel) % 2 == 0, np.diff(got.starts))
    e = np.asarray(got.edge, dtype=np.int64)
    assert np.array_equal(got.other, np.where(fwd, t[e], h[e]))
    # the hub's group: 120 edges and more of r0 forward from e0 (its random edges too), by edge id
    e0 = store.ids_of(["e0"])[0]
    r0 = list(store.relation_names).index("r0")
    g = int(np.flatnonzero(got.keys == (e0 * 2) * got.n_rel + r0)[0])
    rows = np.asarray(got.edge[got.starts[g]:got.starts[g + 1]])
    assert len(rows) >= 120 and np.all(np.diff(rows) > 0)


def test_a_second_open_reads_the_same_files(tmp_path):
    store = _kg(tmp_path)
    store.edge_groups()
    folder = G.groups_folder(store.sidecar)
    before = _sha(folder)
    store.close()
    again = DuckKGStore(tmp_path / "kg.duckdb", cache_dir=tmp_path / "duck")
    assert G.groups_folder(again.sidecar) == folder
    got = again.edge_groups()
    assert _sha(folder) == before and len(got.edge) == 2 * again.num_triples


def test_a_failed_build_leaves_no_folder(tmp_path, monkeypatch):
    """A write that dies half way (a full disk) leaves neither the folder nor its temporary; the next call builds it
    whole."""
    store = _kg(tmp_path)
    real = G._write

    def dies(con, folder, *a):
        real(con, folder, *a)
        (folder / "edge.npy").write_bytes(b"half")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(G, "_write", dies)
    with pytest.raises(OSError):
        store.edge_groups()
    folder = G.groups_folder(store.sidecar)
    assert not folder.exists() and not list(folder.parent.glob(f"{folder.name}*"))
    monkeypatch.setattr(G, "_write", real)
    got = store.edge_groups()
    assert (folder / "groups.json").exists() and len(got.edge) == 2 * store.num_triples


def test_a_second_writer_of_the_same_groups_returns_the_first_ones(tmp_path):
    """Two processes that open the store at once (a Dask run's workers) both write the groups; the one whose rename
    comes second finds the folder whole and uses it instead of failing its shard, and leaves no temporary behind."""
    store = _kg(tmp_path)
    store.edge_groups()
    folder = G.groups_folder(store.sidecar)
    before = _sha(folder)
    cur = store._con.cursor()
    try:  # what the later worker does: it had not seen the folder, writes its own and renames onto the first
        got = G.write_groups(cur, folder, num_triples=store.num_triples, num_entities=store.num_entities,
                             n_rel=len(store.relation_names))
    finally:
        cur.close()
    assert got == folder and _sha(folder) == before
    assert [p.name for p in folder.parent.glob(f"{folder.name}*")] == [folder.name]


def test_the_retrieve_stage_writes_the_groups_once_before_its_shards(tmp_path):
    """``prepare_store`` (the retrieve stage, before any shard task) writes the edge groups for relpath with hub
    sampling on the DuckDB store, the ones a store then opens; nothing for another retriever, for relpath without hub
    sampling or for the in-memory store."""
    from kgrag.params import RetrieveParams
    from kgrag.retrieval.run import prepare_store

    store = _kg(tmp_path)
    db, cache = tmp_path / "kg.duckdb", tmp_path / "duck"
    folder = G.groups_folder(store.sidecar)
    cases = [({"store": "memory"}, False), ({"store": "duckdb", "method": "lego"}, False),
             ({"store": "duckdb", "relpath": {"hub_edges": None}}, False), ({"store": "duckdb"}, True)]
    for params, writes in cases:
        prepare_store(RetrieveParams(**params), db, cache)
        assert (folder / "groups.json").exists() == writes, params
    before = _sha(folder)
    assert store.edge_groups().keys.size and _sha(folder) == before  # opened, not written again


def test_groups_sorted_in_passes_over_node_ranges_are_the_same_bytes(tmp_path, monkeypatch):
    """Under a memory limit too small for one sort (DuckDB ran out of memory sorting 2 x 100M rows under 5.4 GiB),
    the rows are sorted in passes over node ranges of about equal size: the same files, byte for byte, as one pass."""
    store = _kg(tmp_path)
    one = tmp_path / "one"
    cur = store._con.cursor()
    try:
        rows = 2 * store.num_triples
        cur.execute("SET memory_limit='300MB'")
        assert G.memory_limit(cur) == int(286.1 * 2**20)  # DuckDB reports '286.1 MiB'
        assert G.node_ranges(cur, "kg.triples", rows, None) == [(None, None)]
        assert G.node_ranges(cur, "kg.triples", rows, G.memory_limit(cur)) == [(None, None)]  # fits: one pass
        G.write_groups(cur, one, num_triples=store.num_triples, num_entities=store.num_entities,
                       n_rel=len(store.relation_names))
        limit = 2 * rows * G.SORT_ROW_BYTES // 5  # five passes' worth
        ranges = G.node_ranges(cur, "kg.triples", rows, limit)
        assert len(ranges) >= 3 and ranges[0][0] is None and ranges[-1][1] is None
        assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))  # contiguous: every node in one range
        monkeypatch.setattr(G, "memory_limit", lambda con: limit)
        passes = tmp_path / "passes"
        G.write_groups(cur, passes, num_triples=store.num_triples, num_entities=store.num_entities,
                       n_rel=len(store.relation_names))
    finally:
        cur.close()
    assert _sha(passes) == _sha(one)
