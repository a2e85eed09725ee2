"""Shared parts of the community detectors: the registry, the size-constrained selection, equation 4."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, Protocol, Sequence

import numpy as np

from kgrag import arrays
from kgrag.registry import DETECTORS


class Detector(Protocol):
    """``(n, edges, seed, params) -> partitions``: label arrays (one label per node), in backtracking order."""

    def __call__(self, *, n: int, edges: np.ndarray, seed: int, params: Any) -> Iterable[np.ndarray]: ...


def simple_edges(n: int, edges: np.ndarray) -> np.ndarray:
    """Undirected edges without self-loops or duplicates, as sorted (min, max) rows."""
    e = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    e = e[(e[:, 0] != e[:, 1]) & (e.min(axis=1) >= 0) & (e.max(axis=1) < n)]
    return np.unique(np.sort(e, axis=1), axis=0) if len(e) else e


def groups(labels: np.ndarray) -> list[np.ndarray]:
    """Communities of a label array, each sorted, ordered by their smallest node."""
    labels = np.asarray(labels)
    out = [np.nonzero(labels == lab)[0] for lab in arrays.unique(labels)]
    return sorted(out, key=lambda c: int(c[0]))


def detect(*, n: int, edges: np.ndarray, method: str, max_size: int, seed: int, params: Any = None
           ) -> list[np.ndarray]:
    """Communities of the graph (``n`` nodes, undirected ``edges``), none larger than ``max_size``.

    The detector yields the partitions its run goes through, in backtracking order: the one where its
    stop condition holds first, then the states before it (agglomerative: undoing merges; Louvain:
    undoing moves) or, for divisive methods, the further splits after it. The first partition whose
    communities all have at most ``max_size`` nodes is returned. Every node is in exactly one community.

    References
    ----------
    Liang et al., FastToG (2024), section "Community Detection on Subgraph": "all detection algorithms
    will be backtracked when the stop condition is met ... returns the partition status that first
    satisfies the size constraint".
    """
    if n == 0:
        return []
    if max_size < 1:
        raise ValueError("max_size must be at least 1")
    entry = DETECTORS.get(method)
    p = params if params is not None else entry.params()
    e = simple_edges(n, edges)
    for labels in entry.impl(n=n, edges=e, seed=seed, params=p):
        labels = np.asarray(labels)
        if len(labels) != n:
            raise AssertionError(f"detector {method} returned {len(labels)} labels for {n} nodes")
        if np.bincount(np.unique(labels, return_inverse=True)[1]).max() <= max_size:
            return groups(labels)
    raise RuntimeError(f"detector {method} ended without a partition within max_size={max_size}")


def community_modularity(*, n: int, edges: np.ndarray, communities: Sequence[np.ndarray]) -> np.ndarray:
    """Q(c) = Σin − (Σtot)² / 2m of each community, on the simple undirected graph.

    Σin = Σ_{i,j∈c} A_ij (each internal edge counted from both ends, as in equations 1-3), Σtot = Σ_{i∈c} k_i,
    m = number of edges. Summed over a partition and divided by 2m this is the modularity Q of equation 1.

    References
    ----------
    Liang et al., FastToG (2024), equations 1-4; Blondel et al. (2008).
    """
    e = simple_edges(n, edges)
    m = len(e)
    if m == 0:
        return np.zeros(len(communities))
    deg = np.bincount(e.ravel(), minlength=n).astype(np.float64)
    out = []
    for c in communities:
        mask = np.zeros(n, dtype=bool)
        mask[np.asarray(c, dtype=np.int64)] = True
        s_in = 2.0 * float(np.sum(mask[e[:, 0]] & mask[e[:, 1]]))
        s_tot = float(deg[mask].sum())
        out.append(s_in - s_tot * s_tot / (2.0 * m))
    return np.asarray(out)


def coarse_prune(*, n: int, edges: np.ndarray, communities: Sequence[np.ndarray], history: Iterable[frozenset],
                 keep: int, exclude: Iterable[int] = ()) -> list[tuple[np.ndarray, float]]:
    """The ``keep`` candidate communities of highest Q(c) (equation 5), leaving out those in ``history``
    (as node-id sets given by the caller's mapping) and those made only of ``exclude`` nodes (the current
    community). Ties keep the detector's order.

    References
    ----------
    Liang et al., FastToG (2024), equations 4-5 and Algorithm 2 line 3 (coarse_pruning(C − H, c)).
    """
    hist = set(history)
    excl = set(int(x) for x in exclude)
    cands = [c for c in communities if frozenset(int(x) for x in c) not in hist and not set(c.tolist()) <= excl]
    if not cands:
        return []
    q = community_modularity(n=n, edges=edges, communities=cands)
    order = np.argsort(-q, kind="stable")[:keep]
    return [(cands[i], float(q[i])) for i in order]


def dendrogram_states(n: int, merges: Sequence[Sequence[int]]) -> Iterator[np.ndarray]:
    """Label arrays after 0, 1, 2, ... merges of an igraph-style merge list (cluster k ≥ n is merge k − n)."""
    parent = list(range(n + len(merges)))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    labels = np.arange(n)
    yield labels.copy()
    for k, (a, b) in enumerate(merges):
        new = n + k
        parent[find(a)] = new
        parent[find(b)] = new
        labels = np.asarray([find(i) for i in range(n)])
        yield labels.copy()
