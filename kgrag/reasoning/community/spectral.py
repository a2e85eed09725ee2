"""``spectral``: spectral clustering (normalized-Laplacian embedding + seeded k-means)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from pydantic import Field

from kgrag.config.base import Strict
from kgrag.reasoning.community.core import DETECTORS, community_modularity, groups


class SpectralParams(Strict):
    """Params of ``spectral``."""

    max_k: int = Field(12, ge=2, description="cluster counts 2..max_k are tried for the stop condition")
    kmeans_iter: int = Field(50, ge=1, description="Lloyd iterations of k-means")


def kmeans(x: np.ndarray, k: int, rng: np.random.Generator, iters: int) -> np.ndarray:
    """Labels of a seeded k-means++ / Lloyd run on the rows of ``x``."""
    n = len(x)
    centers = [x[int(rng.integers(n))]]
    for _ in range(1, k):
        d = np.min(((x[:, None, :] - np.asarray(centers)[None]) ** 2).sum(-1), axis=1)
        p = d / d.sum() if d.sum() > 0 else np.full(n, 1.0 / n)
        centers.append(x[int(rng.choice(n, p=p))])
    c = np.asarray(centers)
    labels = np.zeros(n, dtype=np.int64)
    for _ in range(iters):
        labels = np.argmin(((x[:, None, :] - c[None]) ** 2).sum(-1), axis=1)
        new = np.asarray([x[labels == j].mean(0) if np.any(labels == j) else c[j] for j in range(k)])
        if np.allclose(new, c):
            break
        c = new
    return labels


def laplacian_eigenvectors(n: int, edges: np.ndarray) -> np.ndarray:
    """Eigenvectors of the symmetric normalized Laplacian, columns by ascending eigenvalue."""
    a = np.zeros((n, n))
    if len(edges):
        a[edges[:, 0], edges[:, 1]] = 1.0
        a[edges[:, 1], edges[:, 0]] = 1.0
    d = a.sum(1)
    inv = np.where(d > 0, 1.0 / np.sqrt(np.maximum(d, 1e-12)), 0.0)
    lap = np.eye(n) - inv[:, None] * a * inv[None, :]
    return np.linalg.eigh(lap)[1]


def embedding(vecs: np.ndarray, dims: int) -> np.ndarray:
    """Rows of the ``dims`` first eigenvectors, row-normalized."""
    v = vecs[:, : max(1, min(dims, len(vecs)))]
    norm = np.linalg.norm(v, axis=1, keepdims=True)
    return v / np.where(norm > 0, norm, 1.0)


@DETECTORS.register("spectral", params=SpectralParams, version="1")
def spectral(*, n: int, edges: np.ndarray, seed: int, params: SpectralParams) -> Iterator[np.ndarray]:
    """k-means on the Laplacian embedding; the stop condition picks the k in 2..max_k of highest
    modularity. Backtracking order: that k, then k + 1, k + 2, ... up to n (finer and finer).

    References
    ----------
    Liang et al., FastToG (2024), "Spectral Clustering"; Ng, Jordan and Weiss, On spectral clustering (2001).
    """
    if n <= 2 or len(edges) == 0:
        if n <= 2 and len(edges):
            yield np.zeros(n, dtype=np.int64)
        yield np.arange(n)
        return
    vecs = laplacian_eigenvectors(n, edges)  # one decomposition serves every k

    def labels(k: int) -> np.ndarray:
        return kmeans(embedding(vecs, k), k, np.random.default_rng([seed, k]), params.kmeans_iter)

    tried = {k: labels(k) for k in range(2, min(params.max_k, n) + 1)}
    best_k, best_q = 1, -np.inf
    for k, lab in tried.items():
        q = community_modularity(n=n, edges=edges, communities=groups(lab)).sum()
        if q > best_q + 1e-12:
            best_k, best_q = k, q
    for k in range(best_k, n + 1):
        yield np.arange(n) if k == n else (tried[k] if k in tried else labels(k))
