"""``hierarchical``: agglomerative hierarchical clustering by greedy modularity merges (igraph fastgreedy)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from kgrag.reasoning.community.core import DETECTORS, dendrogram_states
from kgrag.registry import NoParams


@DETECTORS.register("hierarchical", params=NoParams, version="1")
def hierarchical(*, n: int, edges: np.ndarray, seed: int, params: NoParams) -> Iterator[np.ndarray]:
    """Merge pairs of communities bottom-up, each time the pair of largest modularity gain; the run stops at
    the merge count of highest modularity. Backtracking order: that partition, then back merge by merge.

    References
    ----------
    Liang et al., FastToG (2024), "Agglomerative Hierarchical Clustering"; Clauset, Newman and Moore,
    Finding community structure in very large networks (2004).
    """
    import igraph

    if len(edges) == 0:
        yield np.arange(n)
        return
    g = igraph.Graph(n=n, edges=edges.tolist(), directed=False)
    dendro = g.community_fastgreedy()
    merges = [tuple(x) for x in dendro.merges]
    states = list(dendrogram_states(n, merges))
    stop = n - dendro.optimal_count  # merges applied at the best cut
    stop = min(max(stop, 0), len(merges))
    yield from reversed(states[: stop + 1])
