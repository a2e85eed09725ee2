"""``girvan_newman``: divisive clustering by removing the edge of highest betweenness (igraph)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from kgrag.reasoning.community.core import DETECTORS, dendrogram_states
from kgrag.registry import NoParams


@DETECTORS.register("girvan_newman", params=NoParams, version="1")
def girvan_newman(*, n: int, edges: np.ndarray, seed: int, params: NoParams) -> Iterator[np.ndarray]:
    """Remove edges of highest betweenness until the split of highest modularity (the stop condition).
    Divisive, so the states after the stop are the further splits: backtracking order is that partition,
    then each finer one, down to singletons.

    References
    ----------
    Liang et al., FastToG (2024), "Girvan-Newman"; Girvan and Newman, Community structure in social and
    biological networks (2002).
    """
    import igraph

    if len(edges) == 0:
        yield np.arange(n)
        return
    g = igraph.Graph(n=n, edges=edges.tolist(), directed=False)
    dendro = g.community_edge_betweenness(directed=False)
    merges = [tuple(x) for x in dendro.merges]
    states = list(dendrogram_states(n, merges))
    stop = min(max(n - dendro.optimal_count, 0), len(merges))
    yield from reversed(states[: stop + 1])  # the stop partition, then finer and finer
