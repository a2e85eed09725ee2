"""``st``: cosine similarity of sentence-transformer embeddings (the index's model, all-MiniLM-L6-v2)."""

from __future__ import annotations

from typing import Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from kgrag.lego.registries import SCORERS
from kgrag.lego.types import Context


class STParams(BaseModel):
    """Params of the ``st`` scorer."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    cache_size: int = Field(200_000, ge=0, description="doc embeddings kept in memory between calls (0 = none)")


_CACHE: dict[tuple[str, str], np.ndarray] = {}


def embed_docs(index, docs: Sequence[str], cache_size: int) -> np.ndarray:
    """Unit embeddings of ``docs`` with the index's model; repeated texts are encoded once per process."""
    key = getattr(index, "model", "")
    todo = sorted({d for d in docs if (key, d) not in _CACHE})
    vecs = index.encode(todo) if todo else None
    fresh = dict(zip(todo, vecs)) if vecs is not None else {}
    if cache_size:
        if len(_CACHE) + len(fresh) > cache_size:
            _CACHE.clear()
        _CACHE.update({(key, d): v for d, v in fresh.items()})
    rows = [fresh[d] if d in fresh else _CACHE[(key, d)] for d in docs]
    return np.stack(rows) if rows else np.zeros((0, 1), dtype=np.float32)


@SCORERS.register("st", params=STParams, version="1")
def score_st(*, query: str, docs: Sequence[str], params: STParams, ctx: Context) -> np.ndarray:
    """cos(embed(question), embed(doc)); the question vector is the retriever's ``query_vec``.

    References
    ----------
    Cao et al., LEGO-GraphRAG (2024), section 4.1: S_ST(v, e_q) = cos(embed(v), embed(e_q));
    Reimers and Gurevych, Sentence-BERT (2019).
    """
    if not docs:
        return np.zeros(0)
    return (embed_docs(ctx.index, docs, params.cache_size) @ np.asarray(ctx.query_vec, dtype=np.float32)).astype(np.float64)
