"""``reranker``: a cross-encoder (sentence_transformers.CrossEncoder) loaded from a local folder."""

from __future__ import annotations

import functools
import os
from typing import Sequence

import numpy as np
from pydantic import Field

from kgrag.config.base import Strict
from kgrag.retrieval.lego.registries import SCORERS
from kgrag import ranking
from kgrag.retrieval.lego.types import Context


class RerankerParams(Strict):
    """Params of the ``reranker`` scorer."""

    model: str = Field(
        "all-MiniLM-L6-v2",
        description="local cross-encoder folder (the paper uses bge-reranker-v2-m3) or a packaged model name; "
        "the packaged all-MiniLM-L6-v2 is a bi-encoder, so as a cross-encoder its scoring head is untrained "
        "(seeded): fine for tests, meaningless for results",
    )
    batch_size: int = Field(64, ge=1, description="(question, doc) pairs per forward pass")
    max_length: int = Field(256, ge=8, description="token cap of a (question, doc) pair")
    init_seed: int = Field(0, description="torch seed used while loading (fixes any freshly initialized head)")


@functools.lru_cache(maxsize=2)
def load_cross_encoder(model: str, max_length: int, init_seed: int):
    """A CPU CrossEncoder from a local folder, hub offline; torch's global RNG is left as it was."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import torch
    from sentence_transformers import CrossEncoder

    from kgrag.index.embed import model_path

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(init_seed)
        ce = CrossEncoder(model_path(model), num_labels=1, max_length=max_length, device="cpu")
    ce.model.eval()
    return ce


@SCORERS.register("reranker", params=RerankerParams, version="2")
def score_reranker(*, query: str, docs: Sequence[str], params: RerankerParams, ctx: Context) -> np.ndarray:
    """Cross-encoder relevance of each (question, doc) pair, rounded to ``kgrag.ranking.SCORE_DECIMALS``.

    References
    ----------
    Cao et al., LEGO-GraphRAG (2024), section 4.1 "Reranker" (bge-reranker-v2-m3 in the paper);
    Nogueira and Cho, Passage Re-ranking with BERT (2019).
    """
    if not docs:
        return np.zeros(0)
    ce = load_cross_encoder(params.model, params.max_length, params.init_seed)
    scores = ce.predict([(query, d) for d in docs], batch_size=params.batch_size, show_progress_bar=False,
                        convert_to_numpy=True)
    return ranking.rounded(np.asarray(scores, dtype=np.float64).reshape(len(docs)), ranking.SCORE_DECIMALS)
