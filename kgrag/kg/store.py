"""The KG on disk (a DuckDB file of the four tables) and the in-memory ``KGView`` retrieval works on.

``KGStore`` implements ``kgrag.kg.kgview.KGView`` (neighbourhoods, names, degrees, per-question graphs). It reads
the triples from DuckDB once and keeps a compressed adjacency (CSR, edges taken undirected) so that a k-hop
neighbourhood (``kgrag.kg.kgview.khop_walk``, shared with the DuckDB store) costs time proportional to its size,
not to the KG's.
"""

from __future__ import annotations

import functools
from pathlib import Path

import duckdb
import numpy as np

from kgrag import arrays
from kgrag import schema as S
from kgrag.kg.memory import available_memory
from kgrag.kg.duckdb_io import TABLES, ensure_duckdb, file_hash, read_tables, write_duckdb  # noqa: F401 (re-exported)
from kgrag.kg.duckdb_io import aliases_by_id, relation_aliases
from kgrag.kg.kgview import Incident, KGView, Neighbourhood, khop_walk, undirected_csr  # noqa: F401 (re-exported)
from kgrag.kg.kgview import range_sample_arrays
from kgrag.types import Question


def questions_from_table(table: pa.Table, *, declared_hops: bool = False) -> list[Question]:
    """Rows of a questions table as ``Question`` objects (null ids dropped).

    ``declared_hops``: keep the question file's declared hop count (``Question.hops``). Off by default: a
    user's questions come without one, so inference sees none; training code (relplan, finetune) and the
    ``retrieve.oracle_hops`` oracle ask for it."""
    out = []
    for r in table.to_pylist():
        out.append(
            Question(
                question_id=r[S.QUESTION_ID],
                text=r[S.TEXT],
                topic_ids=tuple(i for i in (r[S.TOPIC_IDS] or []) if i is not None),
                answer_ids=tuple(i for i in (r[S.ANSWER_IDS] or []) if i is not None),
                answers=tuple(r[S.ANSWERS] or []),
                graph_id=r.get(S.GRAPH_ID),
                choices=tuple(c for c in (r.get(S.CHOICES) or []) if c is not None),
                hops=r.get(S.HOPS) if declared_hops else None,
            )
        )
    return out



def questions_on(kg, tables, *, declared_hops: bool = True) -> list[Question]:
    """The questions of a loader's tables (``kgrag.types.KGTables``) with the topic and answer ids of the store
    ``kg``, mapped by name: a loader numbers entities itself (held-out splits read for relplan, finetune and
    G-Retriever's datasets); a null id or a name the store lacks is dropped."""
    from dataclasses import replace

    names = dict(zip(tables.entities[S.ENTITY_ID].to_pylist(), tables.entities[S.NAME].to_pylist()))
    return [replace(q, topic_ids=kg.ids_of([names[i] for i in q.topic_ids if i is not None]),
                    answer_ids=kg.ids_of([names[i] for i in q.answer_ids if i is not None]))
            for q in questions_from_table(tables.questions, declared_hops=declared_hops)]

class KGStore:
    """Read-only view of a global KG held in a DuckDB file."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(ensure_duckdb(path))  # a file derived from Parquet tables is rebuilt when stale
        con = duckdb.connect(self.path, read_only=True)
        try:
            t = con.execute(f"SELECT {S.HEAD}, {S.RELATION}, {S.TAIL} FROM triples").fetchnumpy()
            ent = con.execute(f"SELECT {S.ENTITY_ID}, {S.NAME} FROM entities ORDER BY {S.ENTITY_ID}").fetchnumpy()
            # other names of each entity / relation (a label table's), None when the KG has none
            self.entity_aliases = aliases_by_id(con, "entities", S.ENTITY_ID)
            rel = con.execute(f"SELECT {S.RELATION_ID}, {S.NAME} FROM relations ORDER BY {S.RELATION_ID}").fetchnumpy()
            self.relation_aliases = relation_aliases(con, "relations")
        finally:
            con.close()
        self.heads = np.asarray(t[S.HEAD], dtype=np.int64)
        self.relations = np.asarray(t[S.RELATION], dtype=np.int64)
        self.tails = np.asarray(t[S.TAIL], dtype=np.int64)
        ent_ids = np.asarray(ent[S.ENTITY_ID], dtype=np.int64)
        self.num_entities = int(ent_ids.max()) + 1 if len(ent_ids) else 0
        self.entity_names = np.empty(self.num_entities, dtype=object)
        self.entity_names[ent_ids] = list(ent[S.NAME])
        rel_ids = np.asarray(rel[S.RELATION_ID], dtype=np.int64)
        self.relation_names = np.empty(int(rel_ids.max()) + 1 if len(rel_ids) else 0, dtype=object)
        self.relation_names[rel_ids] = list(rel[S.NAME])
        self._build_csr()

    def _build_csr(self) -> None:
        self._indptr, self._nbr, self._edge = self._csr(np.arange(len(self.heads), dtype=np.int64))

    def _csr(self, edges: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Undirected CSR of triple indices ``edges`` (``kgview.undirected_csr``)."""
        return undirected_csr(self.heads, self.tails, edges, self.num_entities)

    @property
    def num_triples(self) -> int:
        """Number of triples."""
        return int(len(self.heads))

    def range_sample(self, k: int, seed: int) -> dict[tuple[int, bool], np.ndarray]:
        """Each relation's range sample per direction (:func:`kgrag.kg.kgview.range_sample_arrays`)."""
        return range_sample_arrays(self.heads, self.relations, self.tails, self.num_entities, k, seed)

    def degree(self, ids: np.ndarray) -> np.ndarray:
        """Undirected degree of each id."""
        ids = np.asarray(ids, dtype=np.int64)
        return self._indptr[ids + 1] - self._indptr[ids]

    def _incident(self, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        starts = self._indptr[nodes]
        lens = self._indptr[nodes + 1] - starts
        total = int(lens.sum())
        if total == 0:
            z = np.zeros(0, dtype=np.int64)
            return z, z
        offs = np.repeat(starts - np.cumsum(lens) + lens, lens) + np.arange(total)
        return self._nbr[offs], self._edge[offs]

    def neighbourhood(
        self, seeds: np.ndarray | list[int], hops: int, max_edges: int, relation_priority: np.ndarray | None = None
    ) -> Neighbourhood:
        """Nodes within ``hops`` (undirected) of ``seeds`` and the edges walked to reach them
        (``kgrag.kg.kgview.khop_walk``): past ``max_edges`` the farthest hop is cut, by descending
        ``relation_priority[relation]`` when given, else in edge order, and ``truncated`` set."""

        def incident(frontier: np.ndarray) -> Incident:
            _, eid = self._incident(frontier)
            return Incident(eid, self.heads[eid], self.relations[eid], self.tails[eid])

        return khop_walk(seeds, hops, max_edges, num_entities=self.num_entities, incident=incident,
                         relation_priority=relation_priority)

    def names(self, ids: np.ndarray) -> list[str]:
        """Entity names of ``ids``."""
        return [str(x) for x in self.entity_names[np.asarray(ids, dtype=np.int64)]]

    def named_triples(self, heads, relations, tails) -> list[tuple[str, str, str]]:
        """(head name, relation name, tail name) for id arrays."""
        return list(
            zip(
                self.names(heads),
                [str(x) for x in self.relation_names[np.asarray(relations, dtype=np.int64)]],
                self.names(tails),
            )
        )

    def ids_of(self, names: list[str]) -> tuple[int, ...]:
        """Entity ids of exact ``names`` (names not in the KG dropped)."""
        lookup = self._name_index()
        return tuple(lookup[n] for n in names if n in lookup)

    def find_entities(self, text: str, among: np.ndarray | None = None) -> list[int]:
        """Topic entities of a free-text question, best first (``kgrag.kg.linking.link``): its ``[bracketed]``
        names, else the entities named by non-overlapping spans of it (names and aliases, underscores read as
        spaces), ranked by exact case, relation fit, span length and degree; only entities of ``among`` when
        given (say, a question's own graph: ``question_nodes``). Callers that want one topic take the first."""
        return list(self.link(text, among=among).ids)

    def link(self, text: str, among: np.ndarray | None = None):
        """``kgrag.kg.linking.link`` with this store's look-ups (the ``Link``: ids, how, spans)."""
        from kgrag.kg.linking import link

        return link(text, lookup=self.names_lookup, relations_of=self.relations_of, degree_of=self.degree,
                    among=among)

    @functools.cached_property
    def _by_key(self) -> dict[str, list[tuple[int, str]]]:
        from kgrag.kg.linking import names_by_key

        return names_by_key(self.entity_names, self.entity_aliases)

    def names_lookup(self, keys) -> dict[str, list[tuple[int, str]]]:
        """{key: [(id, name or alias)]} of the ``keys`` (``kgrag.kg.linking.name_key``) that name an entity."""
        return {k: self._by_key[k] for k in keys if k in self._by_key}

    def relations_of(self, ids) -> dict[int, set[str]]:
        """{entity id: names of the relations of its edges}."""
        return {int(i): {str(self.relation_names[r]) for r in arrays.unique(self.relations[self._incident(
            np.asarray([i], dtype=np.int64))[1]]).tolist()} for i in ids}

    # ---- per-question graphs (triples with a graph_id; see kgrag.schema.GRAPH_ID) -------------------

    @functools.cached_property
    def graph_ids(self) -> np.ndarray:
        """Graph of each triple (object array aligned with ``heads``); None = the global KG.

        All None when the triples table has no ``graph_id`` column (a KG without per-question graphs).
        """
        con = duckdb.connect(self.path, read_only=True)
        try:
            cols = {r[0] for r in con.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = 'triples'").fetchall()}
            if S.GRAPH_ID not in cols:
                return np.full(self.num_triples, None, dtype=object)
            g = [r[0] for r in con.execute(f"SELECT {S.GRAPH_ID} FROM triples").fetchall()]
        finally:
            con.close()
        out = np.empty(self.num_triples, dtype=object)
        out[:] = g
        return out

    @functools.cached_property
    def _graph_index(self) -> dict[str | None, np.ndarray]:
        idx: dict[str | None, list[int]] = {}
        for i, g in enumerate(self.graph_ids.tolist()):
            idx.setdefault(g, []).append(i)
        return {g: np.asarray(v, dtype=np.int64) for g, v in idx.items()}

    @property
    def has_graphs(self) -> bool:
        """Whether any triple belongs to a per-question graph."""
        return any(g is not None for g in self._graph_index)

    def graph_edges(self, graph_id: str | None) -> np.ndarray:
        """Edge indices (into ``heads`` / ``relations`` / ``tails``) of graph ``graph_id``, in table order.

        ``None`` gives the global KG's edges (those without a graph); an unknown id gives no edge.
        """
        return self._graph_index.get(graph_id, np.zeros(0, dtype=np.int64))

    def graph_nodes(self, graph_id: str | None) -> np.ndarray:
        """Entity ids touched by graph ``graph_id``'s edges, sorted."""
        e = self.graph_edges(graph_id)
        return arrays.unique(np.concatenate([self.heads[e], self.tails[e]]))

    def graph_neighbourhood(
        self, seeds: np.ndarray | list[int], hops: int, max_edges: int, graph_id: str | None,
        include_global: bool = False, relation_priority: np.ndarray | None = None,
    ) -> Neighbourhood:
        """Like ``neighbourhood`` but walking only graph ``graph_id``'s edges (plus the global KG's when
        ``include_global``): nodes within ``hops`` (undirected) of ``seeds``, closest hop first; past
        ``max_edges`` the farthest hop is cut (by descending ``relation_priority[relation]`` when given,
        else in edge order) and ``truncated`` set."""
        allowed = self.graph_edges(graph_id)
        if include_global and graph_id is not None:
            allowed = np.sort(np.concatenate([allowed, self.graph_edges(None)]))
        h, t = self.heads[allowed], self.tails[allowed]

        def incident(frontier: np.ndarray) -> Incident:
            eid = allowed[np.isin(h, frontier) | np.isin(t, frontier)]
            return Incident(eid, self.heads[eid], self.relations[eid], self.tails[eid])

        return khop_walk(seeds, hops, max_edges, num_entities=self.num_entities, incident=incident,
                         relation_priority=relation_priority)

    # ---- what one question may see: its own graph, else the global KG ------------------------------

    def question_neighbourhood(
        self, seeds: np.ndarray | list[int], hops: int, max_edges: int, *, graph_id: str | None,
        relation_priority: np.ndarray | None = None,
    ) -> Neighbourhood:
        """The neighbourhood every retriever and graph reasoner walks for a question over ``graph_id``.

        A question with its own graph (``graph_id`` set) sees that graph's edges only; a global-KG question
        (``graph_id`` None) sees the global KG: all edges on a KG without per-question graphs (``neighbourhood``),
        else only the edges that belong to no per-question graph, so that no question reads another's graph.
        """
        if graph_id is None and not self.has_graphs:
            return self.neighbourhood(seeds, hops, max_edges, relation_priority=relation_priority)
        return self.graph_neighbourhood(seeds, hops, max_edges, graph_id, relation_priority=relation_priority)

    def question_degree(self, ids: np.ndarray, *, graph_id: str | None) -> np.ndarray:
        """Undirected degree of each id counting only the edges a question over ``graph_id`` sees
        (``question_neighbourhood``); ``degree`` on a KG without per-question graphs."""
        ids = np.asarray(ids, dtype=np.int64)
        if graph_id is None and not self.has_graphs:
            return self.degree(ids)
        e = self.graph_edges(graph_id)
        counts = np.bincount(np.concatenate([self.heads[e], self.tails[e]]), minlength=self.num_entities)
        return counts[ids] if len(ids) else np.zeros(0, dtype=np.int64)

    def question_adjacency(self, *, graph_id: str | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The undirected CSR ``(indptr, neighbour, edge index)`` of the edges a question over ``graph_id`` sees
        (``question_neighbourhood``), each edge in both ends' rows, rows over every entity id (read-only):
        the whole KG's; on a KG with per-question graphs, the global edges' (built once) or the question's
        graph's (built per call, in time proportional to the number of entities plus the graph's edges)."""
        if graph_id is None and not self.has_graphs:
            return self._indptr, self._nbr, self._edge
        if graph_id is None:
            return self._global_csr
        return self._csr(self.graph_edges(graph_id))

    @functools.cached_property
    def _global_csr(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return self._csr(self.graph_edges(None))

    def question_nodes(self, *, graph_id: str | None) -> np.ndarray | None:
        """Entity ids a question over ``graph_id`` may name (sorted): its graph's nodes; None = every entity
        (a global-KG question)."""
        return None if graph_id is None else self.graph_nodes(graph_id)

    @functools.cache
    def _name_index(self) -> dict[str, int]:
        return {str(n): i for i, n in enumerate(self.entity_names) if n is not None}


# ---- which store: the whole KG in memory, or SQL on the DuckDB file (retrieve.store) ----------------------

#: Bytes ``KGStore`` needs per triple and per entity: the peak of opening it (triples fetched from DuckDB, the
#: three int64 id arrays kept, 24 B, and the undirected CSR built from them, 32 B kept, with their temporaries)
#: and of its name look-ups (entity names as Python strings, the exact-name dict of ``ids_of`` and the linking
#: keys of ``find_entities``). Measured with tracemalloc (``bench/store_memory.py``: peak traced bytes of
#: ``KGStore(path)`` then ``ids_of`` and ``names_lookup``), 2026-12-02:
#:   MetaQA (133,582 triples, 43,234 entities): 27.3 MB measured, 37.9 MB estimated (1.39x);
#:   synth 400k triples / 20k entities: 53.2 MB measured, 60.8 MB estimated (1.14x);
#:   synth 200k triples / 120k entities: 70.3 MB measured, 83.2 MB estimated (1.18x).
#: The estimate is meant to be a little high (a store that just fits would leave nothing for the index and the
#: reasoner); the process's resident memory grows a little more than the traced bytes (allocator slack of
#: the many small name strings). Not counted: a KG's per-question graph ids (``graph_ids``, a Python object per
#: triple, read only on KGs with per-question graphs).
MEMORY_BYTES_PER_TRIPLE = 128
MEMORY_BYTES_PER_ENTITY = 480
#: Share of the memory available (at the time the store is chosen) that ``retrieve.memory_budget_gb: null`` allows
MEMORY_SHARE = 0.5
STORES = ("auto", "memory", "duckdb")
GIB = float(1 << 30)


class StoreTooBig(RuntimeError):
    """A KG over the memory budget where the store must hold it in memory (``retrieve.store: memory``, or a
    stage that has no DuckDB path yet); the message says what, where and the fix, in a few lines."""


def kg_counts(path: str | Path) -> tuple[int, int]:
    """(triples, entities) of the KG at DuckDB file ``path``, from metadata only: the Parquet files' footers when
    the file is derived from them (``kgrag.kg.duckdb_io.is_derived``; the DuckDB file need not exist yet), else
    DuckDB's table statistics (``duckdb_tables().estimated_size``, the row count of a table written once). No
    triple is read."""
    from kgrag.kg.duckdb_io import is_derived, table_files

    if is_derived(path):
        import pyarrow.parquet as pq

        files = table_files(path)
        return (int(pq.ParquetFile(files["triples"]).metadata.num_rows),
                int(pq.ParquetFile(files["entities"]).metadata.num_rows))
    con = duckdb.connect(str(path), read_only=True)
    try:
        rows = dict(con.execute("SELECT table_name, estimated_size FROM duckdb_tables() "
                                "WHERE database_name = current_database()").fetchall())
    finally:
        con.close()
    return int(rows.get("triples", 0)), int(rows.get("entities", 0))


def memory_estimate(triples: int, entities: int) -> int:
    """Bytes ``KGStore`` is estimated to need for a KG of ``triples`` and ``entities`` (see
    ``MEMORY_BYTES_PER_TRIPLE``)."""
    return int(MEMORY_BYTES_PER_TRIPLE * triples + MEMORY_BYTES_PER_ENTITY * entities)


def memory_budget(budget_gb: float | None) -> tuple[int, str]:
    """(bytes, how it was set) of the memory the in-memory store may use: ``budget_gb`` GiB, else
    ``MEMORY_SHARE`` of the memory available now."""
    if budget_gb is not None:
        return int(budget_gb * GIB), f"retrieve.memory_budget_gb: {budget_gb:g}"
    avail = available_memory()
    return int(MEMORY_SHARE * avail), (f"retrieve.memory_budget_gb: null = {MEMORY_SHARE:g} of the "
                                       f"{avail / GIB:.1f} GiB available")


def _has_graphs(path: str | Path) -> bool:
    """Whether any triple of the KG at ``path`` belongs to a per-question graph (a column scan, no triple loaded)."""
    from kgrag.kg.duckdb_io import ensure_duckdb

    con = duckdb.connect(str(ensure_duckdb(path)), read_only=True)
    try:
        cols = {r[0] for r in con.execute("SELECT column_name FROM duckdb_columns() WHERE database_name = "
                                          "current_database() AND table_name = 'triples'").fetchall()}
        return S.GRAPH_ID in cols and bool(con.execute(
            f"SELECT EXISTS (SELECT 1 FROM triples WHERE {S.GRAPH_ID} IS NOT NULL)").fetchone()[0])
    finally:
        con.close()


def _size(b: float) -> str:
    return f"{b / GIB:.2f} GiB" if b >= GIB / 10 else f"{b / (1 << 20):.1f} MiB"


def _too_big(path, triples: int, entities: int, need: int, budget: int, how: str) -> str:
    return (f"the KG at {path} ({triples:,} triples, {entities:,} entities) needs about {_size(need)} in memory, "
            f"over the budget of {_size(budget)} ({how})")


def choose_store(path: str | Path, mode: str = "auto", budget_gb: float | None = None) -> str:
    """The store ``retrieve.store`` ``mode`` means for the KG at DuckDB file ``path``: ``memory`` or ``duckdb``.

    ``auto``: ``memory`` when the KG's estimated in-memory size (:func:`memory_estimate` of :func:`kg_counts`,
    metadata only) fits the budget (:func:`memory_budget`), else ``duckdb``. ``memory`` over the budget raises
    :class:`StoreTooBig` at once, before anything is loaded; ``duckdb`` is returned as it is. A KG with
    per-question graphs over the budget raises too (the DuckDB store serves global KGs only).
    """
    return _choose(path, mode, budget_gb)[0]


def _choose(path, mode: str, budget_gb: float | None) -> tuple[str, float | None]:
    """(store, the budget in GiB it was chosen by; ``budget_gb`` for duckdb) of :func:`choose_store`."""
    if mode not in STORES:
        raise ValueError(f"unknown store mode {mode!r}; valid: {', '.join(STORES)}")
    if mode == "duckdb":
        return mode, budget_gb
    triples, entities = kg_counts(path)
    need = memory_estimate(triples, entities)
    budget, how = memory_budget(budget_gb)
    if need <= budget:
        return "memory", budget / GIB
    what = _too_big(path, triples, entities, need, budget, how)
    if mode == "memory":
        raise StoreTooBig(f"retrieve.store: memory: {what}.\n"
                          "Fix: set retrieve.store: duckdb (reads the KG from disk), or raise "
                          "retrieve.memory_budget_gb.")
    if _has_graphs(path):
        raise StoreTooBig(f"retrieve.store: auto: {what}, and it has per-question graphs, which only the memory "
                          "store serves.\nFix: raise retrieve.memory_budget_gb (or use a machine with more memory).")
    return "duckdb", budget_gb


def resolve_store(params, path: str | Path):
    """``params`` (a ``kgrag.params.Params``) with ``retrieve.store`` resolved for the KG at ``path`` (``memory``
    or ``duckdb``, :func:`choose_store`) and ``retrieve.memory_budget_gb`` the budget it was chosen by, for a
    stage's entry point: processes handed these params (the shard tasks) open the store chosen here, and none
    decides otherwise when the memory available has changed. A KG over the budget stops the stage with
    :class:`StoreTooBig`'s message alone (``SystemExit``), before anything is loaded."""
    from kgrag.kg.duckdb_io import is_derived

    rp = params.retrieve
    if not (is_derived(path) or Path(path).is_file()):
        return params  # no KG yet: opening it fails where it did
    try:
        store, budget = _choose(path, rp.store, rp.memory_budget_gb)
    except StoreTooBig as e:
        raise SystemExit(f"error: {e}") from None
    return params.model_copy(update={"retrieve": rp.model_copy(update={"store": store, "memory_budget_gb": budget})})


def check_memory(path: str | Path, budget_gb: float | None, what: str) -> None:
    """Stop (:class:`StoreTooBig`) before ``what`` (a stage that reads the KG into memory and has no DuckDB path
    yet: relplan) loads a KG over the memory budget (``retrieve.memory_budget_gb``), whatever ``retrieve.store``
    says."""
    triples, entities = kg_counts(path)
    need = memory_estimate(triples, entities)
    budget, how = memory_budget(budget_gb)
    if need > budget:
        raise StoreTooBig(f"{what} reads the whole KG into memory (it does not run on the DuckDB store yet): "
                          f"{_too_big(path, triples, entities, need, budget, how)}.\n"
                          "Fix: raise retrieve.memory_budget_gb (or use a machine with more memory).")


def open_store(path: str, mode: str = "memory", budget_gb: float | None = None):
    """A process-wide cached store for a DuckDB file, as ``retrieve.store`` ``mode`` chooses (:func:`choose_store`,
    once per process for each path, mode and budget: ``auto`` by the memory budget ``budget_gb``,
    ``retrieve.memory_budget_gb``): ``KGStore`` (memory: the whole KG in memory) or
    ``kgrag.kg.store_duckdb.DuckKGStore`` (duckdb: SQL per hop, for KGs too big for memory). ``auto`` and
    ``memory`` resolved alike share one store."""
    return _open_store(path, _chosen(path, mode, budget_gb))


@functools.lru_cache(maxsize=16)
def _chosen(path: str, mode: str, budget_gb: float | None) -> str:
    return choose_store(path, mode, budget_gb)


@functools.lru_cache(maxsize=4)
def _open_store(path: str, mode: str):
    if mode == "duckdb":
        from kgrag.kg.store_duckdb import DuckKGStore

        return DuckKGStore(path)
    return KGStore(path)
