"""KG access straight from DuckDB: k-hop neighbourhoods by one SQL query per hop, names fetched on demand.

``KGStore`` (``kgrag.kg.store``) reads every triple into numpy arrays; ``DuckKGStore`` answers the same calls
(``neighbourhood``, ``degree``, ``heads[edges]``, ``names``, ...) from the DuckDB file, so that memory and
start-up time do not grow with the KG: nothing of size O(triples) or O(entities) is held in Python, only
the rows the questions touch (cached).

It reads a *sidecar* DuckDB file built once per KG file (``build_adjacency``; cached under
``.kgrag_cache/duckstore/``, keyed by the KG file's path, size and mtime, so a rewritten KG gets a new one):

- ``adjacency(node, edge, head, relation, tail, head_degree, tail_degree)``: every triple twice, once from
  each end, sorted by ``(node, edge)`` and stored in small row groups, so that looking up a few nodes reads
  only the row groups that hold them (min-max zone maps); ``edge`` is the triple's row number in
  ``triples`` (= its index in ``KGStore``); the degrees are the ends' whole-KG undirected degrees (a self-loop
  counts twice, as in ``KGStore``), so a hop also brings the degrees PPR needs;
- ``degree(node, degree)``: the degree of every node with an edge;
- ``names(entity_id PRIMARY KEY, name)``: the entity names with an ART index, for point look-ups;
- beside it, the KG's *edge groups* (:mod:`kgrag.kg.groups`, written on first use by ``edge_groups``): every edge
  end grouped by (node, direction, relation) in ``.npy`` files, memory-mapped: relpath's hub step reads group sizes
  and the kept edges from them;
- ``name_lookup``: only when the KG file lacks its own (a file written before it held one): every name and alias
  by linking key, indexed (``kgrag.kg.duckdb_io.write_name_lookup``).

Entity linking (``find_entities``) looks a question's candidate spans up in the KG file's indexed ``name_lookup``
table (an IN list on the index: an index scan, not a scan of every name) and reads its candidates' relations and
degrees from ``adjacency`` / ``degree``: a few milliseconds a question on a KG of a million entities
(``bench/linking.py``).

A hop is one query, ``SELECT ... FROM adjacency WHERE node IN (<frontier>)`` (a semi join with the frontier
as an Arrow table when it is large), and ``KGStore.neighbourhood``'s rule on the rows it returns, so both
stores give the same nodes, edges and truncation (tested on real MetaQA and on synthetic KGs). Only the
kept edges and the neighbourhood's degrees are cached. (Cutting a hub's hop inside DuckDB, with DISTINCT,
a priority join and LIMIT, measured 3-4x slower per question than fetching the rows.)

Per-question graphs (``graph_id``) are not served here: a KG with them needs ``retrieve.store: memory``.
"""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path
from typing import Callable

import duckdb
import numpy as np
import pyarrow as pa

from kgrag import schema as S
from kgrag.kg.memory import available_memory
from kgrag.kg.duckdb_io import NAME_LOOKUP, relation_aliases, write_name_lookup
from kgrag.kg.groups import EdgeGroups, groups_folder, open_groups, write_groups
from kgrag.kg.kgview import RANGE_MIX, RANGE_MOD, Incident, Neighbourhood, khop_walk, undirected_csr

SIDECAR_VERSION = "4"  # bump when the sidecar's tables change
ROW_GROUP_SIZE = 16384  # rows per row group of the sidecar (zone-map granularity of a node lookup)
INLIST_MAX = 64  # frontiers (and name look-ups) up to this size are an IN list (pruned per value); larger: a join
CACHE_MAX = 500_000  # cached edges / degrees / names before the oldest are dropped
#: share of the memory available when a connection opens that DuckDB may hold before it spills to disk (its own
#: default, 80% of the machine, took the relplan stage to 17 GB at 100M triples: the mirror pass's self-join)
DUCKDB_MEMORY_SHARE = 0.5
HOP_COLS = ("node", "edge", S.HEAD, S.RELATION, S.TAIL, "head_degree", "tail_degree")


def sidecar_path(db: str | Path, cache_dir: str | Path) -> Path:
    """Where the sidecar of KG file ``db`` lives (a new name whenever the file is rewritten)."""
    st = Path(db).stat()
    key = f"{os.path.realpath(db)}|{st.st_size}|{st.st_mtime_ns}|{SIDECAR_VERSION}"
    return Path(cache_dir) / f"adjacency-{hashlib.sha256(key.encode()).hexdigest()[:16]}.duckdb"


def bound_memory(con, spill: str | Path) -> None:
    """Cap what DuckDB holds on ``con`` at ``DUCKDB_MEMORY_SHARE`` of the memory available now, spilling larger
    sorts, joins and aggregates to the folder ``spill``."""
    Path(spill).mkdir(parents=True, exist_ok=True)
    mb = max(int(DUCKDB_MEMORY_SHARE * available_memory()) >> 20, 256)
    con.execute(f"SET memory_limit='{mb}MB'")
    con.execute(f"SET temp_directory='{Path(spill).resolve()}'")


def build_adjacency(db: str | Path, out: str | Path, *, row_group_size: int = ROW_GROUP_SIZE,
                    threads: int | None = None) -> Path:
    """Write the sidecar tables ``adjacency``, ``degree`` and ``names`` of KG file ``db`` to ``out`` (atomically)."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f"{out.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.unlink(missing_ok=True)
    con = duckdb.connect()
    try:
        bound_memory(con, out.parent / "duckdb-spill")
        _write_sidecar(con, db, tmp, row_group_size, threads)
    except BaseException:  # a full disk: no partial sidecar left behind
        con.close()
        for p in (tmp, Path(str(tmp) + ".wal")):
            p.unlink(missing_ok=True)
        raise
    con.close()
    os.replace(tmp, out)
    Path(str(tmp) + ".wal").unlink(missing_ok=True)
    return out


def _write_sidecar(con, db, tmp: Path, row_group_size: int, threads: int | None) -> None:
    """The sidecar tables of ``db`` into the file ``tmp``, through connection ``con``."""
    if threads:
        con.execute(f"SET threads={int(threads)}")
    con.execute(f"ATTACH '{tmp}' AS side (ROW_GROUP_SIZE {int(row_group_size)})")
    con.execute(f"ATTACH '{Path(db).resolve()}' AS kg (READ_ONLY)")
    con.execute(f"""CREATE TABLE side.degree AS
        SELECT node, count(*)::BIGINT AS degree FROM (
            SELECT {S.HEAD} AS node FROM kg.triples UNION ALL SELECT {S.TAIL} AS node FROM kg.triples)
        GROUP BY node ORDER BY node""")
    con.execute(f"""CREATE TABLE side.adjacency AS
        WITH e AS (SELECT t.rowid AS edge, t.{S.HEAD}, t.{S.RELATION}, t.{S.TAIL},
                          dh.degree AS head_degree, dt.degree AS tail_degree
                   FROM kg.triples t JOIN side.degree dh ON dh.node = t.{S.HEAD}
                                     JOIN side.degree dt ON dt.node = t.{S.TAIL})
        SELECT * FROM (SELECT {S.HEAD} AS node, * FROM e UNION ALL SELECT {S.TAIL} AS node, * FROM e)
        ORDER BY node, edge""")
    # a primary key is an ART index: name look-ups by id read a few rows, not the whole column
    con.execute(f"CREATE TABLE side.names ({S.ENTITY_ID} BIGINT PRIMARY KEY, {S.NAME} VARCHAR)")
    con.execute(f"INSERT INTO side.names SELECT {S.ENTITY_ID}, {S.NAME} FROM kg.entities ORDER BY {S.ENTITY_ID}")
    has_lookup = con.execute("SELECT count(*) FROM duckdb_tables() WHERE database_name = 'kg' "
                             f"AND table_name = '{NAME_LOOKUP}'").fetchone()[0]
    if not has_lookup:  # a KG file written before it held its own
        write_name_lookup(con, "kg.entities", f"side.{NAME_LOOKUP}")
    con.execute("CHECKPOINT side")


def ensure_adjacency(db: str | Path, cache_dir: str | Path) -> Path:
    """The sidecar of ``db``, built on first use."""
    path = sidecar_path(db, cache_dir)
    if not path.exists():
        build_adjacency(db, path)
    return path


def ensure_edge_groups(db: str | Path, cache_dir: str | Path) -> Path:
    """The edge groups of the KG file ``db`` (:meth:`DuckKGStore.edge_groups`), written on first use beside its sidecar;
    returns their folder. The retrieve stage calls it once before its shard tasks start
    (``kgrag.retrieval.run.prepare_store``)."""
    kg = DuckKGStore(db, cache_dir=cache_dir)
    try:
        kg.edge_groups()
        return groups_folder(kg.sidecar)
    finally:
        kg.close()


def distinct(a: np.ndarray) -> np.ndarray:
    """Sorted distinct values of an int array (``np.unique``'s result; sorting is far faster than its hash
    path for int64 in numpy 2.4)."""
    s = np.sort(np.asarray(a, dtype=np.int64).reshape(-1))
    return s[np.concatenate([[True], s[1:] != s[:-1]])] if len(s) else s


class _Cache:
    """Values by integer key, kept as the sorted chunks of recent query results (vectorized lookups, newest
    first); the oldest chunks are dropped past ``CACHE_MAX`` keys."""

    def __init__(self, n_values: int) -> None:
        self.n_values = n_values
        self.chunks: list[tuple[np.ndarray, np.ndarray]] = []
        self.size = 0

    def add(self, keys: np.ndarray, values: np.ndarray) -> None:
        if not len(keys):
            return
        k, first = np.unique(keys, return_index=True)
        self.chunks.insert(0, (k, values[first]))
        self.size += len(k)
        while self.size > CACHE_MAX and len(self.chunks) > 1:
            self.size -= len(self.chunks.pop()[0])

    def get(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(values, found mask) of ``keys``."""
        vals = np.zeros((len(keys), self.n_values), dtype=np.int64)
        found = np.zeros(len(keys), dtype=bool)
        for k, v in self.chunks:
            todo = np.flatnonzero(~found)
            if not len(todo):
                break
            pos = np.minimum(np.searchsorted(k, keys[todo]), len(k) - 1)
            hit = k[pos] == keys[todo]
            vals[todo[hit]] = v[pos[hit]]
            found[todo[hit]] = True
        return vals, found

    def lookup(self, keys: np.ndarray, fetch: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
        """Values of ``keys``: cached rows first, the others by one ``fetch(missing)`` (the distinct missing keys,
        sorted) that returns (keys sorted, their values), which are then cached. The answer comes from the fetch,
        not from the cache read again: adding its rows may drop the older chunks that held this call's other rows
        (``CACHE_MAX``), which would then read as zeros."""
        vals, found = self.get(keys)
        if not found.all():
            fetched, got = fetch(distinct(keys[~found]))
            vals[~found] = got[np.searchsorted(fetched, keys[~found])]
            self.add(fetched, got)
        return vals


class EdgeColumn:
    """``heads`` / ``relations`` / ``tails`` of a ``DuckKGStore``: indexable by triple indices like an array."""

    def __init__(self, store: "DuckKGStore", col: int) -> None:
        self._store, self._col = store, col

    def __getitem__(self, idx):
        arr = np.asarray(idx, dtype=np.int64)
        out = self._store.edge_triples(arr.reshape(-1))[:, self._col].reshape(arr.shape)
        return out if arr.ndim else int(out)

    def __len__(self) -> int:
        return self._store.num_triples


class LazyNames:
    """Entity (or relation) names by id, fetched from DuckDB on first use and cached; indexable like the
    object arrays of ``KGStore`` (an id, or an array of ids); one query per call with uncached ids."""

    def __init__(self, store: "DuckKGStore", table: str, id_col: str, size: int) -> None:
        self._store, self._table, self._id, self._size = store, table, id_col, size
        self._cache: dict[int, str | None] = {}

    def __len__(self) -> int:
        return self._size

    def __iter__(self):
        """Every name in id order, fetched in one query (as iterating ``KGStore``'s array; without this, Python's
        fallback iteration by ``__getitem__`` never meets an IndexError and never ends)."""
        ids = np.arange(self._size, dtype=np.int64)
        return iter(self[ids].tolist())

    def fetch(self, ids) -> None:
        """Load the names of ``ids`` that are not cached yet, in one query."""
        asked = set(np.asarray(ids, dtype=np.int64).reshape(-1).tolist())
        want = [i for i in asked if i not in self._cache]
        if not want:
            return
        if len(self._cache) + len(want) > CACHE_MAX:
            self._cache.clear()  # the ids asked for are read right after: all of them are fetched again
            want = sorted(asked)
        if len(want) <= INLIST_MAX:
            rows = self._store._query(f"SELECT {self._id}, {S.NAME} FROM {self._table} "
                                      f"WHERE {self._id} IN ({', '.join(map(str, want))})")
        else:
            rows = self._store._query(f"SELECT {self._id}, {S.NAME} FROM {self._table} "
                                      f"WHERE {self._id} IN (SELECT unnest($ids))", {"ids": want})
        got = dict(zip(rows[self._id].tolist(), rows[S.NAME].tolist()))
        for i in want:
            self._cache[i] = got.get(i)

    def __getitem__(self, idx):
        arr = np.asarray(idx, dtype=np.int64)
        self.fetch(arr)
        if arr.ndim == 0:
            return self._cache[int(arr)]
        out = np.empty(arr.shape, dtype=object)
        out.reshape(-1)[:] = [self._cache[i] for i in arr.reshape(-1).tolist()]
        return out


class DuckKGStore:
    """Read-only KG access by SQL on a DuckDB file (``KGStore``'s retrieval interface, nothing loaded whole)."""

    def __init__(self, path: str | Path, *, cache_dir: str | Path | None = None, threads: int = 1) -> None:
        from kgrag.kg.duckdb_io import ensure_duckdb
        from kgrag.io import CACHE

        self.path = str(ensure_duckdb(path))  # a file derived from Parquet tables is rebuilt when stale
        self.sidecar = ensure_adjacency(self.path, cache_dir or CACHE / "duckstore")
        self._lock = threading.RLock()
        self._con = duckdb.connect(str(self.sidecar), read_only=True)
        self._threads = int(threads)
        self._con.execute(f"SET threads={self._threads}")
        bound_memory(self._con, self.sidecar.parent / "duckdb-spill")
        # DuckDB shares one database instance among a process's connections to a file: a second store on the
        # same sidecar finds the KG attached already
        if not self._scalar("SELECT count(*) FROM duckdb_databases() WHERE database_name = 'kg'"):
            self._con.execute(f"ATTACH '{Path(self.path).resolve()}' AS kg (READ_ONLY)")
        n_ent = self._scalar(f"SELECT coalesce(max({S.ENTITY_ID}) + 1, 0) FROM kg.entities")
        n_rel = self._scalar(f"SELECT coalesce(max({S.RELATION_ID}) + 1, 0) FROM kg.relations")
        self.num_entities = int(n_ent)
        self._num_triples = int(self._scalar("SELECT count(*) FROM kg.triples"))
        cols = {r[0] for r in self._con.execute("SELECT column_name FROM duckdb_columns() "
                                                "WHERE database_name = 'kg' AND table_name = 'triples'").fetchall()}
        self._has_graph_col = S.GRAPH_ID in cols
        own = self._scalar("SELECT count(*) FROM duckdb_tables() WHERE database_name = 'kg' "
                           f"AND table_name = '{NAME_LOOKUP}'")
        self.name_lookup_table = f"kg.{NAME_LOOKUP}" if own else NAME_LOOKUP  # the KG file's, else the sidecar's
        self._has_graphs: bool | None = None
        self.heads, self.relations, self.tails = EdgeColumn(self, 0), EdgeColumn(self, 1), EdgeColumn(self, 2)
        self.entity_names = LazyNames(self, "names", S.ENTITY_ID, self.num_entities)  # the sidecar's, indexed
        self.relation_names = LazyNames(self, "kg.relations", S.RELATION_ID, int(n_rel))
        self.relation_aliases = relation_aliases(self._con, "kg.relations", "kg")  # few: read whole, or None
        self._edges = _Cache(3)
        self._degrees = _Cache(1)
        self._csr: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None  # question_adjacency, on first use
        self._groups: EdgeGroups | None = None  # edge_groups, on first use

    # ---- plumbing ----------------------------------------------------------------------------------

    def _scalar(self, sql: str):
        """The one value ``sql`` returns, its result read to the end (``fetchone`` leaves it open, and DuckDB then
        refuses to register a table on the connection)."""
        return self._con.execute(sql).fetchall()[0][0]

    def _query(self, sql: str, params: dict | None = None, tables: dict[str, pa.Table] | None = None) -> dict:
        """Run ``sql`` (with Arrow ``tables`` registered under their names) and fetch numpy columns."""
        with self._lock:
            try:
                for name, t in (tables or {}).items():
                    self._con.register(name, t)
                return self._con.execute(sql, params or {}).fetchnumpy()
            finally:
                for name in tables or {}:
                    self._con.unregister(name)

    def close(self) -> None:
        """Close the DuckDB connection."""
        with self._lock:
            self._con.close()

    @property
    def num_triples(self) -> int:
        """Number of triples."""
        return self._num_triples

    def range_sample(self, k: int, seed: int) -> dict[tuple[int, bool], np.ndarray]:
        """Each relation's range sample per direction, by SQL with no triple loaded (the same entities as
        :func:`kgrag.kg.kgview.range_sample_arrays`). A first pass reads only the entities whose order key is under
        a cut that leaves about ``8 k`` per relation; a relation with fewer than ``k`` there is read again whole
        (its ``k`` first are then exact: every entity under the cut precedes every entity over it)."""
        n_rel = max(len(self.relation_names), 1)
        cut = min(RANGE_MOD, max(1, RANGE_MOD * 8 * int(k) * n_rel // max(self.num_entities, 1)))
        def key(x: str) -> str:  # kgview.range_order in SQL
            return f"({x} * {RANGE_MIX} + {int(seed)}) % {RANGE_MOD}"

        out: dict[tuple[int, bool], np.ndarray] = {}
        for fwd, col in ((True, S.TAIL), (False, S.HEAD)):
            def sample(where: str) -> dict[int, np.ndarray]:
                rows = self._query(
                    f"SELECT r, e FROM (SELECT r, e, row_number() OVER (PARTITION BY r ORDER BY {key('e')}, e) AS rn "
                    f"FROM (SELECT DISTINCT {S.RELATION} AS r, {col} AS e FROM kg.triples WHERE {where})) "
                    f"WHERE rn <= {int(k)} ORDER BY r, {key('e')}, e")
                r, e = np.asarray(rows["r"], np.int64), np.asarray(rows["e"], np.int64)
                return {int(x): e[r == x] for x in np.unique(r)}
            got = sample(f"{key(col)} < {cut}")
            short = [r for r in range(len(self.relation_names)) if len(got.get(r, ())) < k]
            if short:
                got.update(sample(f"{S.RELATION} IN ({', '.join(map(str, short))})"))
            out.update({(r, fwd): e for r, e in got.items()})
        return out

    # ---- adjacency ---------------------------------------------------------------------------------

    def incident(self, nodes: np.ndarray) -> dict[str, np.ndarray]:
        """Every adjacency row of ``nodes`` (one SQL query): columns ``HOP_COLS`` as int64 arrays."""
        nodes = distinct(nodes)
        cols = ", ".join(HOP_COLS)
        if len(nodes) <= INLIST_MAX:
            rows = self._query(f"SELECT {cols} FROM adjacency WHERE node IN ({', '.join(map(str, nodes.tolist()))})")
        else:
            rows = self._query(f"SELECT {cols} FROM adjacency WHERE node IN (SELECT node FROM _frontier)",
                               tables={"_frontier": pa.table({"node": nodes})})
        return {c: np.asarray(rows[c], dtype=np.int64) for c in HOP_COLS}

    def edge_groups(self) -> EdgeGroups:
        """The KG's edge groups by (node, direction, relation) (:mod:`kgrag.kg.groups`), written once per KG file beside
        the sidecar (DuckDB sorts 2 x triples rows under the store's memory cap, on every core) and memory-mapped:
        relpath's hub step reads a frontier's group sizes and kept edges from them without a query."""
        with self._lock:
            if self._groups is None:
                folder = groups_folder(self.sidecar)
                if not (folder / "groups.json").exists():
                    cur = self._con.cursor()
                    try:
                        cur.execute(f"SET threads={os.cpu_count() or 1}")
                        write_groups(cur, folder, num_triples=self.num_triples, num_entities=self.num_entities,
                                     n_rel=len(self.relation_names))
                    finally:
                        cur.execute(f"SET threads={self._threads}")
                        cur.close()
                self._groups = open_groups(folder)
            return self._groups

    def _remember(self, rows: dict[str, np.ndarray], pick: np.ndarray) -> None:
        """Cache the triples and end degrees of rows ``pick`` (the kept edges)."""
        h, t = rows[S.HEAD][pick], rows[S.TAIL][pick]
        with self._lock:
            self._edges.add(rows["edge"][pick], np.stack([h, rows[S.RELATION][pick], t], axis=1))
            self._degrees.add(np.concatenate([h, t]),
                              np.concatenate([rows["head_degree"][pick], rows["tail_degree"][pick]]).reshape(-1, 1))

    def edge_triples(self, edges: np.ndarray) -> np.ndarray:
        """(head, relation, tail) of triple indices ``edges`` (cached rows first, the rest by one query)."""
        with self._lock:
            return self._edges.lookup(np.asarray(edges, dtype=np.int64), self._fetch_triples)

    def _fetch_triples(self, miss: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        rows = self._query(f"SELECT rowid AS edge, {S.HEAD}, {S.RELATION}, {S.TAIL} FROM kg.triples "
                           "WHERE rowid IN (SELECT unnest($ids))", {"ids": miss.tolist()})
        got = np.stack([np.asarray(rows[c], dtype=np.int64) for c in (S.HEAD, S.RELATION, S.TAIL)], axis=1)
        if len(got) != len(miss):
            raise IndexError(f"triple index out of range (the KG has {self.num_triples} triples)")
        keys = np.asarray(rows["edge"], dtype=np.int64)
        order = np.argsort(keys, kind="stable")
        return keys[order], got[order]

    def degree(self, ids: np.ndarray) -> np.ndarray:
        """Undirected whole-KG degree of each id (cached from hops, else one query)."""
        with self._lock:
            return self._degrees.lookup(np.asarray(ids, dtype=np.int64), self._fetch_degrees)[:, 0].astype(np.int64)

    def _fetch_degrees(self, miss: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if len(miss) <= INLIST_MAX:  # an IN list of literals: pruned per value by the zone maps
            lit = ", ".join(map(str, miss.tolist()))
            rows = self._query(f"SELECT node, degree FROM degree WHERE node IN ({lit})")
        else:
            rows = self._query("SELECT node, degree FROM degree WHERE node IN (SELECT unnest($ids))",
                               {"ids": miss.tolist()})
        d = dict(zip(rows["node"].tolist(), rows["degree"].tolist()))
        return miss, np.array([d.get(i, 0) for i in miss.tolist()], dtype=np.int64).reshape(-1, 1)

    def neighbourhood(
        self, seeds: np.ndarray | list[int], hops: int, max_edges: int, relation_priority: np.ndarray | None = None
    ) -> Neighbourhood:
        """``KGStore.neighbourhood`` with one adjacency query per hop (the same ``kgrag.kg.kgview.khop_walk``):
        nodes within ``hops`` (undirected) of ``seeds`` and the edges walked to reach them, the farthest hop
        cut past ``max_edges`` (by descending ``relation_priority[relation]`` when given, else edge order)
        with ``truncated`` set. The kept edges' triples and end degrees are cached."""
        hop_rows: dict[int, dict[str, np.ndarray]] = {}

        def incident(frontier: np.ndarray) -> Incident:
            rows = self.incident(frontier)
            got = Incident(rows["edge"], rows[S.HEAD], rows[S.RELATION], rows[S.TAIL])
            hop_rows[id(got)] = rows
            return got

        def on_hop(got: Incident, first: np.ndarray) -> None:
            self._remember(hop_rows.pop(id(got)), first)

        return khop_walk(seeds, hops, max_edges, num_entities=self.num_entities, incident=incident,
                         relation_priority=relation_priority, on_hop=on_hop)

    # ---- what one question may see (no per-question graphs here) -----------------------------------

    @property
    def has_graphs(self) -> bool:
        """Whether any triple belongs to a per-question graph."""
        if self._has_graphs is None:
            q = f"SELECT count(*) FROM kg.triples WHERE {S.GRAPH_ID} IS NOT NULL"
            with self._lock:
                self._has_graphs = self._has_graph_col and bool(self._scalar(q))
        return self._has_graphs

    def _global_only(self, graph_id: str | None) -> None:
        if graph_id is not None or self.has_graphs:
            raise NotImplementedError("DuckKGStore serves a global KG only; a KG with per-question graphs needs "
                                      "retrieve.store: memory")

    def question_neighbourhood(
        self, seeds: np.ndarray | list[int], hops: int, max_edges: int, *, graph_id: str | None,
        relation_priority: np.ndarray | None = None,
    ) -> Neighbourhood:
        """``KGStore.question_neighbourhood`` for a global-KG question (``neighbourhood``)."""
        self._global_only(graph_id)
        return self.neighbourhood(seeds, hops, max_edges, relation_priority=relation_priority)

    def question_degree(self, ids: np.ndarray, *, graph_id: str | None) -> np.ndarray:
        """``KGStore.question_degree`` for a global-KG question (``degree``)."""
        self._global_only(graph_id)
        return self.degree(ids)

    def question_adjacency(self, *, graph_id: str | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The whole KG's undirected CSR (``kgview.undirected_csr``, the layout ``KGStore`` holds), read from
        the triples table on first use and kept: 16 bytes per edge end in memory, the price of whole-graph
        algorithms (LEGO ``ppr``'s push) giving the same results on both stores. Global-KG questions only."""
        self._global_only(graph_id)
        with self._lock:
            if self._csr is None:
                rows = self._query(f"SELECT {S.HEAD}, {S.TAIL} FROM kg.triples ORDER BY rowid")
                heads = np.asarray(rows[S.HEAD], dtype=np.int64)
                tails = np.asarray(rows[S.TAIL], dtype=np.int64)
                self._csr = undirected_csr(heads, tails, np.arange(len(heads), dtype=np.int64), self.num_entities)
            return self._csr

    def question_nodes(self, *, graph_id: str | None) -> np.ndarray | None:
        """Entities a question may name: every entity (None) for a global-KG question."""
        self._global_only(graph_id)
        return None

    # ---- names -------------------------------------------------------------------------------------

    def names(self, ids: np.ndarray) -> list[str]:
        """Entity names of ``ids`` (one query for the uncached ones)."""
        return [str(x) for x in self.entity_names[np.asarray(ids, dtype=np.int64)]]

    def named_triples(self, heads, relations, tails) -> list[tuple[str, str, str]]:
        """(head name, relation name, tail name) for id arrays."""
        heads, tails = np.asarray(heads, dtype=np.int64), np.asarray(tails, dtype=np.int64)
        self.entity_names.fetch(np.concatenate([heads, tails]))
        rel = [str(x) for x in self.relation_names[np.asarray(relations, dtype=np.int64)]]
        return list(zip(self.names(heads), rel, self.names(tails)))

    def _lookup(self, names: list[str]) -> dict[str, int]:
        """Name → id of the names present (the largest id of a repeated name, as ``KGStore``'s name index)."""
        if not names:
            return {}
        rows = self._query(f"SELECT {S.NAME} AS n, max({S.ENTITY_ID}) AS i FROM kg.entities "
                           f"WHERE {S.NAME} IN (SELECT unnest($names)) GROUP BY {S.NAME}", {"names": list(names)})
        return dict(zip(rows["n"].tolist(), (int(i) for i in rows["i"].tolist())))

    def ids_of(self, names: list[str]) -> tuple[int, ...]:
        """Entity ids of exact ``names`` (names not in the KG dropped)."""
        got = self._lookup(names)
        return tuple(got[n] for n in names if n in got)

    def find_entities(self, text: str, among: np.ndarray | None = None) -> list[int]:
        """``KGStore.find_entities`` (``kgrag.kg.linking.link``): the candidate spans looked up in the indexed
        ``name_lookup`` table, the candidates' relations and degrees by SQL; only entities of ``among`` when
        given."""
        return list(self.link(text, among=among).ids)

    def link(self, text: str, among: np.ndarray | None = None):
        """``kgrag.kg.linking.link`` with this store's look-ups (the ``Link``: ids, how, spans)."""
        from kgrag.kg.linking import link

        return link(text, lookup=self.names_lookup, relations_of=self.relations_of, degree_of=self.degree,
                    among=among)

    def names_sql(self, keys) -> str:
        """The query ``names_lookup`` runs for ``keys``: an IN list of literals on the indexed key column (DuckDB
        turns it into an index scan; a list passed as a parameter would be a join reading every row)."""
        lit = ", ".join("'" + str(k).replace("'", "''") + "'" for k in keys)
        return (f"SELECT {S.NAME_KEY}, {S.ENTITY_ID}, {S.NAME} FROM {self.name_lookup_table} "
                f"WHERE {S.NAME_KEY} IN ({lit})")

    def names_lookup(self, keys) -> dict[str, list[tuple[int, str]]]:
        """{key: [(id, name or alias)]} of the ``keys`` (``kgrag.kg.linking.name_key``) that name an entity
        (one indexed query), ids ascending."""
        keys = sorted(set(keys))
        if not keys:
            return {}
        rows = self._query(self.names_sql(keys))
        out: dict[str, list[tuple[int, str]]] = {}
        for k, i, n in sorted(zip(rows[S.NAME_KEY].tolist(), rows[S.ENTITY_ID].tolist(), rows[S.NAME].tolist())):
            out.setdefault(k, []).append((int(i), str(n)))
        return out

    def relation_pair_counts(self) -> tuple[dict[int, int], dict[int, int], dict[tuple[int, int], int]]:
        """What finding mirrored relations needs, counted by SQL with no triple loaded: ({relation: triples},
        {relation: distinct (head, tail) pairs}, {(a, b) with a < b: pairs (h, t) of ``a`` whose reverse (t, h) is
        a pair of ``b``}); pairs of relations sharing no reversed pair are left out."""
        h, r, t = S.HEAD, S.RELATION, S.TAIL
        size = self._query(f"SELECT {r}, count(*) AS n FROM kg.triples GROUP BY {r}")
        pairs = self._query(f"""
            WITH p AS (SELECT DISTINCT {h}, {r}, {t} FROM kg.triples)
            SELECT {r}, count(*) AS n FROM p GROUP BY {r}""")
        common = self._query(f"""
            WITH p AS (SELECT DISTINCT {h}, {r}, {t} FROM kg.triples)
            SELECT a.{r} AS a, b.{r} AS b, count(*) AS n FROM p a JOIN p b
              ON a.{h} = b.{t} AND a.{t} = b.{h} AND a.{r} < b.{r}
            GROUP BY a.{r}, b.{r}""")
        return ({int(k): int(n) for k, n in zip(size[r].tolist(), size["n"].tolist())},
                {int(k): int(n) for k, n in zip(pairs[r].tolist(), pairs["n"].tolist())},
                {(int(a), int(b)): int(n) for a, b, n in zip(common["a"].tolist(), common["b"].tolist(),
                                                             common["n"].tolist())})

    def relations_of(self, ids) -> dict[int, set[str]]:
        """{entity id: names of the relations of its edges} (one query: the distinct relations of the ids'
        adjacency rows, so that a hub's edges are not fetched)."""
        ids = sorted({int(i) for i in ids})
        if not ids:
            return {}
        rows = self._query(f"SELECT DISTINCT node, {S.RELATION} FROM adjacency "
                           f"WHERE node IN ({', '.join(map(str, ids))})")
        out: dict[int, set[str]] = {i: set() for i in ids}
        rel = rows[S.RELATION]
        self.relation_names.fetch(rel)
        for node, r in zip(rows["node"].tolist(), rel.tolist()):
            out[int(node)].add(str(self.relation_names[r]))
        return out
