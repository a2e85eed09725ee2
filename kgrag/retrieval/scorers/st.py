"""``st``: cosine similarity of sentence-transformer embeddings (the index's model, or a fine-tuned one)."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
from pydantic import Field

from kgrag.config.base import Strict
from kgrag.index.embed import encode
from kgrag import ranking
from kgrag.retrieval.lego.registries import SCORERS
from kgrag.retrieval.lego.types import Context


class STParams(Strict):
    """Params of the ``st`` scorer."""

    cache_size: int = Field(200_000, ge=0, description="doc embeddings kept in memory between calls (0 = none)")
    model: str | None = Field(
        None,
        description="None = the index's model (question vector reused); else a packaged model name or a local "
        "folder, e.g. data/finetune/st_model written by the finetune_path_scorer stage (the paper's Fine-tuned ST)",
    )


_CACHE: dict[tuple[str, str], np.ndarray] = {}


def _model_key(model: str) -> str:
    p = Path(model)
    return f"{p.resolve()}@{p.stat().st_mtime_ns}" if p.exists() else model


def embed_docs(index, docs: Sequence[str], cache_size: int, model: str | None = None) -> np.ndarray:
    """Unit embeddings of ``docs`` with ``model`` (None = the index's); repeated texts are encoded once per process.

    A local model folder is keyed by its path and modification time, so a re-trained model is not served
    stale vectors.
    """
    key = getattr(index, "model", "") if model is None else _model_key(model)
    todo = sorted({d for d in docs if (key, d) not in _CACHE})
    if not todo:
        vecs = None
    elif model is None:
        vecs = index.encode(todo)
    else:
        vecs = encode(todo, model=model)
    fresh = dict(zip(todo, vecs)) if vecs is not None else {}
    if cache_size:
        if len(_CACHE) + len(fresh) > cache_size:
            _CACHE.clear()
        _CACHE.update({(key, d): v for d, v in fresh.items()})
    rows = [fresh[d] if d in fresh else _CACHE[(key, d)] for d in docs]
    return np.stack(rows) if rows else np.zeros((0, 1), dtype=np.float32)


@SCORERS.register("st", params=STParams, version="3")
def score_st(*, query: str, docs: Sequence[str], params: STParams, ctx: Context) -> np.ndarray:
    """cos(embed(question), embed(doc)); with the index's model the question vector is the retriever's
    ``query_vec``, with another model (``params.model``) the question is embedded by that model.
    Rounded to ``kgrag.ranking.COSINE_DECIMALS`` (float noise between CPUs decides no ranking).

    References
    ----------
    Cao et al., LEGO-GraphRAG (2024), section 4.1: S_ST(v, e_q) = cos(embed(v), embed(e_q));
    Reimers and Gurevych, Sentence-BERT (2019).
    """
    if not docs:
        return np.zeros(0)
    if params.model is None:
        q = np.asarray(ctx.query_vec, dtype=np.float32)
    else:
        q = encode([query], model=params.model)[0]
    sims = embed_docs(ctx.index, docs, params.cache_size, params.model).astype(np.float64) @ q.astype(np.float64)
    return ranking.rounded(sims, ranking.COSINE_DECIMALS)
