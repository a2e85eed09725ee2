"""``shortest``: all shortest paths from each topic to every other extracted node."""

from __future__ import annotations

import numpy as np
from pydantic import Field

from kgrag import arrays
from kgrag.config.base import Strict
from kgrag.retrieval.lego.registries import FILTERS
from kgrag.retrieval.lego.types import Context, Extracted, LocalGraph, Path


class ShortestParams(Strict):
    """Params of the ``shortest`` filter (the paper sets none; the caps only guard against path explosions)."""

    max_per_target: int = Field(64, ge=1, description="shortest paths kept per (topic, target) pair")
    max_paths: int = Field(10_000, ge=1, description="paths kept in all (targets taken best-extracted first)")


def shortest_path_dag(graph: LocalGraph, source: int) -> tuple[np.ndarray, list[list[tuple[int, int]]]]:
    """BFS from ``source``: distances (-1 unreachable) and, per node, its (parent, edge) on shortest paths."""
    dist = np.full(graph.n, -1, dtype=np.int64)
    dist[source] = 0
    preds: list[list[tuple[int, int]]] = [[] for _ in range(graph.n)]
    frontier = np.array([source], dtype=np.int64)
    level = 0
    while len(frontier):
        starts, ends = graph.indptr[frontier], graph.indptr[frontier + 1]
        lens = ends - starts
        idx = np.repeat(starts - np.cumsum(lens) + lens, lens) + np.arange(int(lens.sum()))
        parent = np.repeat(frontier, lens)
        child, edge = graph.nbr[idx], graph.eid[idx]
        new = arrays.unique(child[dist[child] < 0])
        dist[new] = level + 1
        keep = dist[child] == level + 1
        for p, c, e in zip(parent[keep].tolist(), child[keep].tolist(), edge[keep].tolist()):
            preds[c].append((p, e))
        frontier = new
        level += 1
    return dist, preds


def enumerate_paths(preds: list[list[tuple[int, int]]], source: int, target: int, cap: int) -> list[Path]:
    """Up to ``cap`` shortest paths source → target from the predecessor lists (depth-first, in order)."""
    out: list[Path] = []

    def back(node: int, nodes: list[int], edges: list[int]) -> None:
        if len(out) >= cap:
            return
        if node == source:
            out.append(Path(tuple(reversed(nodes)), tuple(reversed(edges))))
            return
        for p, e in preds[node]:
            back(p, nodes + [p], edges + [e])
            if len(out) >= cap:
                return

    back(target, [target], [])
    return out


@FILTERS.register("shortest", params=ShortestParams, version="1")
def filter_shortest(
    *, graph: LocalGraph, extracted: Extracted, seeds: np.ndarray, hops: int, params: ShortestParams, ctx: Context
) -> list[Path]:
    """All shortest paths (in the extracted subgraph) from each topic to each other extracted node.

    Targets come in extraction order (best first), so the caps keep the paths to the best-ranked nodes.

    References
    ----------
    Cao et al., LEGO-GraphRAG (2024), section 4.1 "Shortest Path-Filtering" (igraph's
    ``get_all_shortest_paths`` in the paper's implementation).
    """
    sub = graph.restrict(extracted.edges)
    out: list[Path] = []
    seed_set = set(np.asarray(seeds).tolist())
    for s in sorted(seed_set):
        dist, preds = shortest_path_dag(sub, s)
        for t in extracted.nodes.tolist():
            if t in seed_set or dist[t] <= 0:
                continue
            out.extend(enumerate_paths(preds, s, t, min(params.max_per_target, params.max_paths - len(out))))
            if len(out) >= params.max_paths:
                return out
    return out
