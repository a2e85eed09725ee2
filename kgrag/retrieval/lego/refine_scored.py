"""``scored``: keep the ``top_k`` paths a relevance scorer (bm25, st, reranker, llm) rates highest."""

from __future__ import annotations

from typing import Sequence

import numpy as np
from pydantic import Field

from kgrag.config.base import Strict
from kgrag.retrieval.lego.registries import REFINERS
from kgrag import ranking
from kgrag.retrieval.lego.spec import ScorerSpec
from kgrag.retrieval.lego.types import Context, Path


class ScoredParams(Strict):
    """Params of the ``scored`` refiner (defaults: the paper's Table 7)."""

    top_k: int = Field(64, ge=0, description="paths kept")
    scorer: ScorerSpec = Field(default_factory=lambda: ScorerSpec(name="st"), description="scores a path's text against the question")


@REFINERS.register("scored", params=ScoredParams, version="2")
def refine_scored(*, paths: Sequence[Path], texts: Sequence[str], params: ScoredParams, ctx: Context) -> np.ndarray:
    """Indices of the ``top_k`` best-scored paths, best first (ties keep the filter's order).

    References
    ----------
    Cao et al., LEGO-GraphRAG (2024), section 4.1 "Path-Refinement Module" (BM25, ST, Reranker, LLM scorers)
    and Table 7 (top_k = 64).
    """
    if not len(paths):
        return np.zeros(0, dtype=np.int64)
    fn, sp = params.scorer.module()
    scores = np.asarray(fn(query=ctx.question, docs=list(texts), params=sp, ctx=ctx), dtype=np.float64)
    return ranking.top_k(scores, params.top_k)
