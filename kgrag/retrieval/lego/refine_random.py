"""``random``: keep ``top_k`` paths drawn uniformly at random (the paper's basic refiner)."""

from __future__ import annotations

from typing import Sequence

import numpy as np
from pydantic import Field

from kgrag.config.base import Strict
from kgrag.retrieval.lego.registries import REFINERS
from kgrag.retrieval.lego.types import Context, Path


class RandomParams(Strict):
    """Params of the ``random`` refiner (defaults: the paper's Table 7)."""

    top_k: int = Field(64, ge=0, description="paths kept")
    seed: int = Field(0, description="random seed of the draw")


@REFINERS.register("random", params=RandomParams, version="1")
def refine_random(*, paths: Sequence[Path], texts: Sequence[str], params: RandomParams, ctx: Context) -> np.ndarray:
    """Indices of ``top_k`` paths drawn without replacement, kept in the filter's order.

    References
    ----------
    Cao et al., LEGO-GraphRAG (2024), section 4.1 "Path-Refinement Module" ("Random") and Table 7 (top_k = 64).
    """
    n = len(paths)
    if n <= params.top_k:
        return np.arange(n, dtype=np.int64)
    rng = np.random.default_rng(params.seed)
    return np.sort(rng.choice(n, size=params.top_k, replace=False)).astype(np.int64)
