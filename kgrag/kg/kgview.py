"""The one way modules touch a KG: the ``KGView`` protocol, its ``Neighbourhood`` result, and the k-hop walk
every store shares.

Two stores implement ``KGView``: ``kgrag.kg.store.KGStore`` (the whole KG in memory as CSR arrays, per-question
graphs too) and ``kgrag.kg.store_duckdb.DuckKGStore`` (one SQL query per hop on a DuckDB file, for KGs too big
for memory). Retrievers, reasoners and scorers type against ``KGView`` and never know which one they got.
Both walk neighbourhoods with ``khop_walk``: a store only says which (edge, head, relation, tail) rows are
incident to a frontier of nodes, so the hop order, the edge cap and its relation-priority cut are the same
code for every store.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, NamedTuple, Protocol, Sequence, runtime_checkable

import numpy as np

from kgrag import arrays
from kgrag import ranking
@dataclass(frozen=True)
class Neighbourhood:
    """Nodes and edge indices (into the store's triple arrays) of a k-hop neighbourhood, closest first."""

    nodes: np.ndarray
    edges: np.ndarray
    truncated: bool


class Incident(NamedTuple):
    """Rows incident to a frontier: one row per (frontier node, edge); an edge may appear twice."""

    edges: np.ndarray
    heads: np.ndarray
    relations: np.ndarray
    tails: np.ndarray


def khop_walk(
    seeds: np.ndarray | Sequence[int], hops: int, max_edges: int, *, num_entities: int,
    incident: Callable[[np.ndarray], Incident], relation_priority: np.ndarray | None = None,
    on_hop: Callable[[Incident, np.ndarray], None] | None = None,
) -> Neighbourhood:
    """Nodes within ``hops`` (undirected) of ``seeds`` and the edges walked to reach them.

    The edges are those incident to a node at distance < ``hops``, so every edge lies on a walk of length
    ≤ ``hops`` from a seed; each hop's edges are in ascending edge index, its new nodes in ascending id. Past
    ``max_edges`` the farthest hop is cut and ``truncated`` set: its edges are kept by descending
    ``relation_priority[relation]`` when given (rounded to ``kgrag.ranking.COSINE_DECIMALS``, ties by edge
    index), else in edge order.

    Parameters
    ----------
    incident
        The store's adjacency: the rows incident to a frontier (node ids, ascending, distinct).
    on_hop
        Called with each hop's rows and the row index of every kept edge (a store may cache them).
    """
    seeds = arrays.unique(np.asarray(seeds, dtype=np.int64))
    seeds = seeds[(seeds >= 0) & (seeds < num_entities)]
    nodes = [seeds]
    edges: list[np.ndarray] = []
    n_edges, seen, frontier, truncated = 0, seeds, seeds, False
    for _ in range(hops):
        if len(frontier) == 0:
            break
        rows = incident(frontier)
        eid, first = np.unique(rows.edges, return_index=True)
        if edges:
            keep = ~np.isin(eid, np.concatenate(edges), assume_unique=True)
            eid, first = eid[keep], first[keep]
        if n_edges + len(eid) > max_edges:
            if relation_priority is not None:  # rounded cosine, ties by edge index (kgrag.ranking)
                best = ranking.order(relation_priority[rows.relations[first]], ids=eid,
                                     decimals=ranking.COSINE_DECIMALS)
                eid, first = eid[best], first[best]
            eid, first = eid[: max_edges - n_edges], first[: max_edges - n_edges]
            truncated = True
        ends = arrays.unique(np.concatenate([rows.heads[first], rows.tails[first]]))
        new = np.setdiff1d(ends, seen, assume_unique=True)
        edges.append(eid)
        nodes.append(new)
        n_edges += len(eid)
        if on_hop is not None:
            on_hop(rows, first)
        if truncated:
            break
        seen = np.union1d(seen, new)
        frontier = new
    all_edges = np.concatenate(edges) if edges else np.zeros(0, dtype=np.int64)
    return Neighbourhood(np.concatenate(nodes), all_edges, truncated)


def undirected_csr(heads: np.ndarray, tails: np.ndarray, edges: np.ndarray, num_entities: int
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Undirected CSR ``(indptr over all entities, neighbour, edge index)`` of the triples ``edges`` (indices
    into ``heads`` / ``tails``, ascending): each edge in both ends' rows, a row's edges where the node is head
    first, each part in edge order. One layout for every store, so whole-graph algorithms over it (LEGO
    ``ppr``'s push) give the same numbers whichever store holds the KG."""
    ends = np.concatenate([heads[edges], tails[edges]])
    other = np.concatenate([tails[edges], heads[edges]])
    edge = np.concatenate([edges, edges])
    order = np.argsort(ends, kind="stable")
    indptr = np.zeros(num_entities + 1, dtype=np.int64)
    np.cumsum(np.bincount(ends, minlength=num_entities), out=indptr[1:])
    return indptr, other[order], edge[order]


@runtime_checkable
class KGView(Protocol):
    """What modules may ask of a KG. ``heads`` / ``relations`` / ``tails`` are indexable by edge index
    (numpy arrays, or lazy columns in the DuckDB store); names are indexable by id."""

    path: str
    num_entities: int
    heads: np.ndarray
    relations: np.ndarray
    tails: np.ndarray
    entity_names: np.ndarray
    relation_names: np.ndarray

    @property
    def num_triples(self) -> int: ...

    @property
    def has_graphs(self) -> bool: ...

    def degree(self, ids: np.ndarray) -> np.ndarray: ...

    def neighbourhood(self, seeds: np.ndarray | list[int], hops: int, max_edges: int,
                      relation_priority: np.ndarray | None = None) -> Neighbourhood: ...

    def question_neighbourhood(self, seeds: np.ndarray | list[int], hops: int, max_edges: int, *,
                               graph_id: str | None, relation_priority: np.ndarray | None = None
                               ) -> Neighbourhood: ...

    def question_degree(self, ids: np.ndarray, *, graph_id: str | None) -> np.ndarray: ...

    def question_adjacency(self, *, graph_id: str | None) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """Undirected CSR ``(indptr, neighbour, edge index)`` of what a question over ``graph_id`` sees, or None
        where the store holds no adjacency in memory (whole-graph algorithms then use the neighbourhood)."""

    def question_nodes(self, *, graph_id: str | None) -> np.ndarray | None: ...

    def names(self, ids: np.ndarray) -> list[str]: ...

    def named_triples(self, heads, relations, tails) -> list[tuple[str, str, str]]: ...

    def ids_of(self, names: list[str]) -> tuple[int, ...]: ...

    def find_entities(self, text: str, among: np.ndarray | None = None) -> list[int]: ...


#: the range sample's entity order: Knuth's multiplicative hash of the id, plus the seed, mod 2^32 (ties by id); the
#: same integers in numpy and in DuckDB's SQL, so that both stores draw the same sample
RANGE_MIX = 2654435761
RANGE_MOD = 1 << 32


def range_order(ids: np.ndarray, seed: int) -> np.ndarray:
    """The range sample's sort key of entity ``ids`` (:data:`RANGE_MIX`)."""
    return (np.asarray(ids, dtype=np.int64) * RANGE_MIX + int(seed)) % RANGE_MOD


def range_sample_arrays(heads: np.ndarray, relations: np.ndarray, tails: np.ndarray, num_entities: int, k: int,
                        seed: int) -> dict[tuple[int, bool], np.ndarray]:
    """Each relation's *range sample*, per direction: ``(relation, True)`` -> the ``k`` distinct tails of its
    triples first in :func:`range_order`, ``(relation, False)`` -> the same of its heads: the entities a step of
    that relation reaches, a sample that does not depend on where the step starts (the answer type of a
    relation, read once per KG; ``relpath.answer_type: relation``)."""
    out: dict[tuple[int, bool], np.ndarray] = {}
    rel = np.asarray(relations, dtype=np.int64)
    n = max(int(num_entities), 1)
    for fwd, ends in ((True, tails), (False, heads)):
        keys = np.unique(rel * n + np.asarray(ends, dtype=np.int64))
        r, e = keys // n, keys % n
        order = np.lexsort((e, range_order(e, seed), r))
        r, e = r[order], e[order]
        starts = np.flatnonzero(np.r_[True, r[1:] != r[:-1]]) if len(r) else np.zeros(0, np.int64)
        for a, b in zip(starts, np.r_[starts[1:], len(r)]):
            out[(int(r[a]), fwd)] = e[a:min(b, a + k)]
    return out
