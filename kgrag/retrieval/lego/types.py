"""Data passed between the LEGO stages: the local graph, an extracted subgraph, paths and the question context.

Every stage works on local indices of one ``LocalGraph`` (the topic's k-hop neighbourhood, or the graph an
extractor that works on the whole KG returns: ``ppr``'s push); ids of the global KG appear only when the
retriever builds its ``Subgraph``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
from kgrag import arrays
from kgrag.kg.kgview import KGView


def _csr(n: int, src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Undirected CSR of local edges: (indptr, neighbour, edge position), edges in position order per node."""
    m = len(src)
    ends = np.concatenate([src, dst])
    other = np.concatenate([dst, src])
    pos = np.concatenate([np.arange(m), np.arange(m)])
    # a stable sort of 16-bit keys is a radix sort (linear): most neighbourhoods have < 65536 nodes
    order = np.argsort(ends.astype(np.uint16) if n <= 1 << 16 else ends, kind="stable")
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(ends, minlength=n), out=indptr[1:])
    return indptr, other[order].astype(np.int64), pos[order].astype(np.int64)


@dataclass(frozen=True)
class LocalGraph:
    """A piece of the KG with local node indices 0..n-1 and local edge positions 0..m-1 (edges undirected)."""

    nodes: np.ndarray  # global entity id of each local node, sorted
    edges: np.ndarray  # global triple index of each local edge
    src: np.ndarray  # local head of each edge
    dst: np.ndarray  # local tail of each edge
    relations: np.ndarray  # relation id of each edge
    degree: np.ndarray  # undirected degree of each local node in what the question sees (whole KG, or its own graph)
    edge_subset: np.ndarray | None = None  # edge positions the adjacency holds (None = all)

    @functools.cached_property
    def _adjacency(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(indptr, neighbour, edge position), built on first use (PPR needs no adjacency lists)."""
        if self.edge_subset is None:
            return _csr(self.n, self.src, self.dst)
        sub = self.edge_subset
        indptr, nbr, eid = _csr(self.n, self.src[sub], self.dst[sub])
        return indptr, nbr, sub[eid] if len(eid) else eid

    @property
    def indptr(self) -> np.ndarray:
        """CSR row pointer of the undirected adjacency."""
        return self._adjacency[0]

    @property
    def nbr(self) -> np.ndarray:
        """CSR neighbours."""
        return self._adjacency[1]

    @property
    def eid(self) -> np.ndarray:
        """CSR edge positions (parallel to ``nbr``)."""
        return self._adjacency[2]

    @staticmethod
    def build(*, kg: KGView, nodes: np.ndarray, edges: np.ndarray, graph_id: str | None = None) -> "LocalGraph":
        """The graph of ``edges`` (triple indices of ``kg``) over ``nodes`` (must hold every edge end); node
        degrees count the edges a question over ``graph_id`` sees (``KGStore.question_degree``)."""
        nodes = arrays.unique(np.asarray(nodes, dtype=np.int64))
        edges = np.asarray(edges, dtype=np.int64)
        src = np.searchsorted(nodes, kg.heads[edges]).astype(np.int64)
        dst = np.searchsorted(nodes, kg.tails[edges]).astype(np.int64)
        return LocalGraph(nodes, edges, src, dst, kg.relations[edges].astype(np.int64),
                          kg.question_degree(nodes, graph_id=graph_id) if len(nodes) else np.zeros(0, dtype=np.int64))

    @property
    def n(self) -> int:
        """Number of local nodes."""
        return int(len(self.nodes))

    def local(self, ids: np.ndarray | list[int]) -> np.ndarray:
        """Local indices of global entity ids (those absent dropped)."""
        ids = np.asarray(ids, dtype=np.int64)
        if not len(self.nodes):
            return np.zeros(0, dtype=np.int64)
        pos = np.searchsorted(self.nodes, ids)
        ok = self.nodes[np.minimum(pos, len(self.nodes) - 1)] == ids
        return pos[ok].astype(np.int64)

    def restrict(self, edge_pos: np.ndarray) -> "LocalGraph":
        """Same nodes, only the edges at ``edge_pos`` (positions keep their meaning through ``edge_map``)."""
        return LocalGraph(self.nodes, self.edges, self.src, self.dst, self.relations, self.degree,
                          np.asarray(edge_pos, dtype=np.int64))

    def induced(self, node_mask: np.ndarray) -> np.ndarray:
        """Positions of the edges with both ends in ``node_mask``."""
        return np.nonzero(node_mask[self.src] & node_mask[self.dst])[0].astype(np.int64)

    def incident(self, u: int) -> tuple[np.ndarray, np.ndarray]:
        """(neighbours, edge positions) of local node ``u``."""
        a, b = self.indptr[u], self.indptr[u + 1]
        return self.nbr[a:b], self.eid[a:b]


@dataclass(frozen=True)
class Extracted:
    """Output of subgraph extraction: local nodes best first (seeds first), their scores, induced edges."""

    nodes: np.ndarray
    scores: np.ndarray
    edges: np.ndarray

    def rank(self, n: int) -> np.ndarray:
        """Rank of each of ``n`` local nodes in ``nodes`` (n for nodes not extracted)."""
        r = np.full(n, n, dtype=np.int64)
        r[self.nodes] = np.arange(len(self.nodes))
        return r


@dataclass(frozen=True)
class Path:
    """A walk from a seed: ``edges[i]`` (local edge position) joins ``nodes[i]`` and ``nodes[i + 1]``."""

    nodes: tuple[int, ...]
    edges: tuple[int, ...]


@dataclass(frozen=True)
class Context:
    """What scorers and LLM stages need about the question, read-only."""

    question: str
    query_vec: np.ndarray
    kg: KGView
    index: Any
    topic_names: tuple[str, ...] = ()
    llm: Callable[[], Any] | None = field(default=None, repr=False)  # lazily built LLMClient
    # what LLM stages could not use, by key (llm_unparsed, llm_fallbacks); the retriever moves them into the
    # trace entry of the stage that counted them (``take_counts``)
    counts: dict[str, int] = field(default_factory=dict, repr=False, compare=False)

    def count(self, key: str, n: int = 1) -> None:
        """Add ``n`` to counter ``key`` (stages count unparsed LLM replies and fallbacks here)."""
        if n:
            self.counts[key] = self.counts.get(key, 0) + int(n)

    def take_counts(self) -> dict[str, int]:
        """The counters since the last call, cleared."""
        out = dict(self.counts)
        self.counts.clear()
        return out

    def client(self) -> Any:
        """The LLM client; raises when the retriever was configured without one."""
        if self.llm is None:
            raise RuntimeError("this LEGO stage needs an LLM but no LLM client was configured")
        return self.llm()


def relation_text(name: str) -> str:
    """A relation name as words (``directed_by`` → ``directed by``)."""
    return str(name).replace("_", " ").replace(".", " ")


def path_text(path: Path, graph: LocalGraph, kg: KGView) -> str:
    """``A -> rel -> B <- rel <- C``: arrows follow the triple's direction."""
    names = kg.entity_names
    parts = [str(names[graph.nodes[path.nodes[0]]])]
    for i, e in enumerate(path.edges):
        rel = relation_text(kg.relation_names[graph.relations[e]])
        nxt = str(names[graph.nodes[path.nodes[i + 1]]])
        forward = graph.src[e] == path.nodes[i]
        parts.append(f"-> {rel} -> {nxt}" if forward else f"<- {rel} <- {nxt}")
    return " ".join(parts)


def edge_text(e: int, graph: LocalGraph, kg: KGView) -> str:
    """``head relation tail`` of local edge ``e``."""
    names = kg.entity_names
    return (f"{names[graph.nodes[graph.src[e]]]} {relation_text(kg.relation_names[graph.relations[e]])} "
            f"{names[graph.nodes[graph.dst[e]]]}")
