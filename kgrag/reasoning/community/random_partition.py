"""``random``: a seeded random partition (the paper's "Rand" baseline of Table 3)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from pydantic import Field

from kgrag import arrays
from kgrag.config.base import Strict
from kgrag.reasoning.community.core import DETECTORS


class RandomParams(Strict):
    """Params of ``random``."""

    mean_size: float = Field(4.0, ge=1.0, description="expected community size of the first partition drawn")


@DETECTORS.register("random", params=RandomParams, version="1")
def random_partition(*, n: int, edges: np.ndarray, seed: int, params: RandomParams) -> Iterator[np.ndarray]:
    """Nodes shuffled and cut into random groups (sizes ~ 1 + Poisson(mean_size − 1)); backtracking order:
    that partition, then its groups halved again and again (a divisive run needing no structure).

    References
    ----------
    Liang et al., FastToG (2024), Table 3 "Rand: randomly partitions nodes into different groups".
    """
    rng = np.random.default_rng(seed)
    order = rng.permutation(n)
    labels = np.empty(n, dtype=np.int64)
    pos, lab = 0, 0
    while pos < n:
        size = 1 + int(rng.poisson(params.mean_size - 1.0))
        labels[order[pos: pos + size]] = lab
        pos += size
        lab += 1
    yield labels.copy()
    while np.bincount(labels).max() > 1:
        nxt = labels.copy()
        top = int(labels.max()) + 1
        for c in arrays.unique(labels):
            mem = np.nonzero(labels == c)[0]
            if len(mem) > 1:
                nxt[mem[len(mem) // 2:]] = top
                top += 1
        labels = nxt
        yield labels.copy()
