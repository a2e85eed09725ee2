"""``rwr``: random walks with restart from the topic entities; nodes ranked by visit count."""

from __future__ import annotations

import numpy as np
from pydantic import Field

from kgrag import arrays
from kgrag.config.base import Strict
from kgrag.retrieval.lego.registries import EXTRACTORS
from kgrag.retrieval.lego.types import Context, Extracted, LocalGraph


class RWRParams(Strict):
    """Params of the ``rwr`` extractor (defaults: the paper's Table 7)."""

    path_num: int = Field(64, ge=1, description="walks, each restarting at a topic (round-robin over topics)")
    steps: int | None = Field(None, ge=1, description="steps per walk; None = the retrieval hops")
    seed: int = Field(0, description="random seed of the walks")


@EXTRACTORS.register("rwr", params=RWRParams, version="1")
def extract_rwr(*, graph: LocalGraph, seeds: np.ndarray, hops: int, params: RWRParams, ctx: Context) -> Extracted:
    """``path_num`` walks of ``steps`` uniform steps, each started afresh at a topic; keeps the visited nodes.

    A walk stops early at a node without edges. Nodes are ranked by visit count (seeds first), and the
    subgraph is the edges among the visited nodes.

    References
    ----------
    Cao et al., LEGO-GraphRAG (2024), section 4.1 "RWR" and Table 7 (path_num = 64);
    Tong, Faloutsos and Pan, Fast Random Walk with Restart (2006).
    """
    seeds = arrays.unique(np.asarray(seeds, dtype=np.int64))
    n = graph.n
    if len(seeds) == 0 or n == 0:
        z = np.zeros(0, dtype=np.int64)
        return Extracted(z, np.zeros(0), z)
    rng = np.random.default_rng(params.seed)
    steps = params.steps or max(hops, 1)
    pos = seeds[np.arange(params.path_num) % len(seeds)]
    visits = np.bincount(pos, minlength=n).astype(np.float64)
    alive = np.ones(len(pos), dtype=bool)
    for _ in range(steps):
        deg = graph.indptr[pos + 1] - graph.indptr[pos]
        alive &= deg > 0
        if not alive.any():
            break
        pick = (rng.random(len(pos)) * np.maximum(deg, 1)).astype(np.int64)
        nxt = graph.nbr[np.minimum(graph.indptr[pos] + pick, max(len(graph.nbr) - 1, 0))] if len(graph.nbr) else pos
        pos = np.where(alive, nxt, pos)
        visits += np.bincount(pos[alive], minlength=n)
    visited = np.nonzero(visits > 0)[0]
    rest = visited[~np.isin(visited, seeds)]
    rest = rest[np.lexsort((rest, -visits[rest]))]
    nodes = np.concatenate([seeds, rest]).astype(np.int64)
    mask = np.zeros(n, dtype=bool)
    mask[nodes] = True
    return Extracted(nodes=nodes, scores=visits[nodes], edges=graph.induced(mask))
