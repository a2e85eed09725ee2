"""``louvain``: Louvain modularity optimisation, recording every node move so that it can be backtracked."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from pydantic import Field

from kgrag.config.base import Strict
from kgrag.reasoning.community.core import DETECTORS


class LouvainParams(Strict):
    """Params of ``louvain``."""

    resolution: float = Field(1.0, gt=0.0, description="modularity resolution γ")
    max_passes: int = Field(20, ge=1, description="local-moving passes per level at most")


def louvain_states(*, n: int, edges: np.ndarray, seed: int, resolution: float = 1.0, max_passes: int = 20
                   ) -> list[np.ndarray]:
    """The partitions (labels of the original nodes) from singletons through every improving move of every
    level to the final one, in run order.

    References
    ----------
    Blondel et al., Fast unfolding of communities in large networks (2008): local moving with the gain
    ΔQ ∝ k_i,in − γ Σtot k_i / 2m, then aggregation, until no move improves modularity.
    """
    rng = np.random.default_rng(seed)
    states = [np.arange(n)]
    m = len(edges)
    if m == 0:
        return states
    # supernode graph: w[u][v] (u != v, stored both ways), inner[u] = weight of edges inside u
    w: list[dict[int, float]] = [dict() for _ in range(n)]
    for a, b in np.asarray(edges).tolist():
        w[a][b] = w[a].get(b, 0.0) + 1.0
        w[b][a] = w[b].get(a, 0.0) + 1.0
    inner = [0.0] * n
    members: list[list[int]] = [[i] for i in range(n)]
    two_m = 2.0 * m
    while True:
        k = len(w)
        deg = np.asarray([sum(w[u].values()) + 2.0 * inner[u] for u in range(k)])
        comm = np.arange(k)
        tot = deg.copy()
        moved_any = False
        for _ in range(max_passes):
            moved = False
            for u in rng.permutation(k).tolist():
                cu = int(comm[u])
                links: dict[int, float] = {}
                for v, x in w[u].items():
                    links[int(comm[v])] = links.get(int(comm[v]), 0.0) + x
                tot[cu] -= deg[u]
                best, best_gain = cu, links.get(cu, 0.0) - resolution * tot[cu] * deg[u] / two_m
                for c in sorted(links):
                    gain = links[c] - resolution * tot[c] * deg[u] / two_m
                    if gain > best_gain + 1e-12:
                        best, best_gain = c, gain
                tot[best] += deg[u]
                if best != cu:
                    comm[u] = best
                    moved = moved_any = True
                    states.append(_labels(members, comm, n))
            if not moved:
                break
        if not moved_any:
            return states
        ids = {c: i for i, c in enumerate(sorted(set(comm.tolist())))}
        new_w: list[dict[int, float]] = [dict() for _ in ids]
        new_inner = [0.0] * len(ids)
        new_members: list[list[int]] = [[] for _ in ids]
        for u in range(k):
            cu = ids[int(comm[u])]
            new_members[cu].extend(members[u])
            new_inner[cu] += inner[u]
            for v, x in w[u].items():
                cv = ids[int(comm[v])]
                if cv == cu:
                    new_inner[cu] += x / 2.0  # each inside pair is seen from both ends
                else:
                    new_w[cu][cv] = new_w[cu].get(cv, 0.0) + x
        w, inner, members = new_w, new_inner, new_members


def _labels(members: list[list[int]], comm: np.ndarray, n: int) -> np.ndarray:
    """Labels of the original nodes when supernode u is in community ``comm[u]``."""
    out = np.empty(n, dtype=np.int64)
    for u, mem in enumerate(members):
        out[mem] = comm[u]
    return out


@DETECTORS.register("louvain", params=LouvainParams, version="1")
def louvain(*, n: int, edges: np.ndarray, seed: int, params: LouvainParams) -> Iterator[np.ndarray]:
    """Louvain's partitions in backtracking order: the final one, then back through every move.

    References
    ----------
    Liang et al., FastToG (2024), "Community Detection on Subgraph" (Louvain, backtracked to the first
    partition within the maximum size); Blondel et al. (2008).
    """
    yield from reversed(louvain_states(n=n, edges=edges, seed=seed, resolution=params.resolution,
                                       max_passes=params.max_passes))
