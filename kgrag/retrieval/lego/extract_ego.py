"""``ego``: the ego network of the topic entities (every node within ``hops``)."""

from __future__ import annotations

import numpy as np
from pydantic import Field

from kgrag import arrays
from kgrag.config.base import Strict
from kgrag.retrieval.lego.registries import EXTRACTORS
from kgrag.retrieval.lego.types import Context, Extracted, LocalGraph


class EgoParams(Strict):
    """Params of the ``ego`` extractor."""

    hops: int | None = Field(None, ge=0, description="radius; None = the retrieval hops (the whole neighbourhood)")


def bfs_distance(graph: LocalGraph, seeds: np.ndarray, limit: int) -> np.ndarray:
    """Undirected hop distance from the nearest seed (-1 beyond ``limit`` or unreachable)."""
    dist = np.full(graph.n, -1, dtype=np.int64)
    frontier = arrays.unique(np.asarray(seeds, dtype=np.int64))
    dist[frontier] = 0
    for level in range(1, limit + 1):
        if len(frontier) == 0:
            break
        starts, ends = graph.indptr[frontier], graph.indptr[frontier + 1]
        lens = ends - starts
        idx = np.repeat(starts - np.cumsum(lens) + lens, lens) + np.arange(int(lens.sum()))
        nbr = arrays.unique(graph.nbr[idx])
        frontier = nbr[dist[nbr] < 0]
        dist[frontier] = level
    return dist


@EXTRACTORS.register("ego", params=EgoParams, version="1")
def extract_ego(*, graph: LocalGraph, seeds: np.ndarray, hops: int, params: EgoParams, ctx: Context) -> Extracted:
    """Every node within ``hops`` of a seed, nearest first, and the edges among them.

    References
    ----------
    Cao et al., LEGO-GraphRAG (2024), Table 2 ("Ego Network Extraction") and footnote 6.
    """
    radius = hops if params.hops is None else params.hops
    dist = bfs_distance(graph, seeds, radius)
    nodes = np.nonzero(dist >= 0)[0]
    nodes = nodes[np.lexsort((nodes, dist[nodes]))].astype(np.int64)
    mask = dist >= 0
    return Extracted(nodes=nodes, scores=-dist[nodes].astype(np.float64), edges=graph.induced(mask))
