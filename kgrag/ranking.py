"""The one ranking rule: round scores to a fixed precision, then order by (-score, id).

Every ranking decision in kgrag (PCST prizes, LEGO scorers / extractors / filters / refiners, ToG and FastToG
pruning, k-NN look-ups, the relation-priority neighbourhood cut) goes through this module, so that float
differences between CPUs, thread counts and batch sizes (embedding kernels, BLAS reductions) do not decide
ties.

Rule
----
1. A score is rounded half-to-even (``numpy.round``) to ``decimals`` places before it is compared:
   ``COSINE_DECIMALS = 4`` for cosine similarities of float32 embeddings (their CPU-to-CPU differences are
   about 1e-7 to 1e-6), ``SCORE_DECIMALS = 6`` for other model or statistic scores (BM25, cross-encoder
   logits, LLM ratings), ``MASS_DECIMALS = 12`` for float64 probability masses (PPR) computed by kgrag itself.
2. Equal rounded scores are ordered by id ascending (the entity / edge / path index the caller passes, or
   the position when none is given): a stable sort on ``(-rounded score, id)``.

What it guarantees: two machines whose raw scores differ by less than the float error take the same
decision unless a score lies within that error of a rounding boundary (probability about error / 10^-decimals
per compared score, e.g. 1e-6 / 1e-4 = 1% of the scores could round differently, and only those at a top-k
boundary or tied with a neighbour change a result). It makes differences rare, not impossible; the
determinism test (``tests/test_ranking.py``) re-encodes the index with another thread count and batch size
and checks the retrieved subgraphs are identical.
"""

from __future__ import annotations

import numpy as np

COSINE_DECIMALS = 4
SCORE_DECIMALS = 6
MASS_DECIMALS = 12


def rounded(scores, decimals: int = SCORE_DECIMALS) -> np.ndarray:
    """``scores`` as float64 rounded to ``decimals`` places (``-0.0`` becomes ``0.0``)."""
    out = np.round(np.asarray(scores, dtype=np.float64), decimals)
    return out + 0.0


def order(scores, ids=None, decimals: int = SCORE_DECIMALS) -> np.ndarray:
    """Indices of ``scores`` best first: descending rounded score, ties by ascending ``ids`` (default: position).

    Parameters
    ----------
    scores : 1-d scores.
    ids : 1-d tie-break keys of the same length (entity / edge ids); None = the positions 0..n-1.
    decimals : rounding precision (see the module docstring).
    """
    s = rounded(scores, decimals).reshape(-1)
    keys = np.arange(len(s)) if ids is None else np.asarray(ids).reshape(-1)
    if len(keys) != len(s):
        raise ValueError(f"ids has {len(keys)} entries, scores {len(s)}")
    return np.lexsort((np.arange(len(s)), keys, -s)).astype(np.int64)


def top_k(scores, k: int, ids=None, decimals: int = SCORE_DECIMALS) -> np.ndarray:
    """The first ``k`` of ``order(scores, ids, decimals)``."""
    return order(scores, ids, decimals)[: max(int(k), 0)]
