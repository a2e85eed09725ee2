"""``bm25``: Okapi BM25 of each doc against the question, the docs themselves being the corpus."""

from __future__ import annotations

import math
import re
from collections import Counter
from typing import Sequence

import numpy as np
from pydantic import Field

from kgrag.config.base import Strict
from kgrag.retrieval.lego.registries import SCORERS
from kgrag import ranking
from kgrag.retrieval.lego.types import Context

TOKEN = re.compile(r"[a-z0-9]+")


class BM25Params(Strict):
    """Params of the ``bm25`` scorer (Robertson and Zaragoza's usual defaults)."""

    k1: float = Field(1.5, ge=0.0, description="term-frequency saturation k1")
    b: float = Field(0.75, ge=0.0, le=1.0, description="document-length normalization b")


def tokenize(text: str) -> list[str]:
    """Lower-cased alphanumeric tokens (``_`` and punctuation split)."""
    return TOKEN.findall(text.lower())


def bm25(query: str, docs: Sequence[str], *, k1: float, b: float) -> np.ndarray:
    """BM25 score of each doc for ``query``.

    References
    ----------
    Robertson and Zaragoza, The Probabilistic Relevance Framework: BM25 and Beyond (2009), eq. 3.15 with
    the non-negative idf log(1 + (N - n + 0.5) / (n + 0.5)) (Lucene's variant).
    """
    toks = [tokenize(d) for d in docs]
    n_docs = len(toks)
    if n_docs == 0:
        return np.zeros(0)
    lens = np.array([len(t) for t in toks], dtype=np.float64)
    avg = float(lens.mean()) or 1.0
    df = Counter(w for t in toks for w in set(t))
    q = set(tokenize(query))
    out = np.zeros(n_docs)
    for i, t in enumerate(toks):
        tf = Counter(t)
        norm = k1 * (1 - b + b * lens[i] / avg)
        out[i] = sum(
            math.log(1 + (n_docs - df[w] + 0.5) / (df[w] + 0.5)) * tf[w] * (k1 + 1) / (tf[w] + norm)
            for w in q if w in tf
        )
    return out


@SCORERS.register("bm25", params=BM25Params, version="2")
def score_bm25(*, query: str, docs: Sequence[str], params: BM25Params, ctx: Context) -> np.ndarray:
    """BM25 relevance of each doc (statistic-based scorer of the paper's Table 2), rounded to
    ``kgrag.ranking.SCORE_DECIMALS``.

    References
    ----------
    Cao et al., LEGO-GraphRAG (2024), section 4.1 "BM25"; Robertson and Zaragoza (2009).
    """
    return ranking.rounded(bm25(query, docs, k1=params.k1, b=params.b), ranking.SCORE_DECIMALS)
