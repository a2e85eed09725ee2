"""bench/planner_dev.py's weight fits (issue 54's dev protocol): a leave-one-KG-out fit reads no set of the held-out
KG's family and starts from no weights a KG chose; the smooth fit is deterministic and finds the feature that
picks the best sequence."""

from __future__ import annotations

import numpy as np

from bench import planner_dev as P
from kgrag.index import zeroshot as Z

NAMES = ["metaqa", "wc2014-p2", "pql-2h", "pql-3h"]


def test_leave_one_kg_out_holds_out_the_whole_kg_family():
    assert P.others(NAMES, "pql-2h") == ["metaqa", "wc2014-p2"]
    assert P.others(NAMES, "pql-3h") == ["metaqa", "wc2014-p2"]
    assert P.others(NAMES, "metaqa") == ["wc2014-p2", "pql-2h", "pql-3h"]
    share = P.set_weights(["metaqa", "pql-2h", "pql-3h"])  # families weigh equally
    assert share == {"metaqa": 0.5, "pql-2h": 0.25, "pql-3h": 0.25}


def _rows(rng, good: int, n: int = 40):
    """Questions of 3 candidate sequences whose feature ``good`` marks the one with answers; the others noise."""
    rows = []
    for _ in range(n):
        f = rng.normal(0, 1, (3, len(Z.FEATURES)))
        f[:, good] = [0.0, 0.0, 0.0]
        best = int(rng.integers(3))
        f[best, good] = 1.0
        p = np.zeros(3)
        p[best] = 1.0
        rows.append(({"hops": 1}, [(0,), (1,), (2,)], f, p))
    return rows


def test_the_search_starts_from_weights_no_kg_chose():
    rows = {"a": _rows(np.random.default_rng(0), good=2)}
    assert np.array_equal(P.search(rows, ["a"], iters=0), np.ones(len(Z.FEATURES)))
    assert not np.array_equal(P.search(rows, ["a"], iters=0), Z.Weights().vector())


def test_the_smooth_fit_is_deterministic_and_finds_the_deciding_feature():
    rng = np.random.default_rng(1)
    feats = {"a": _rows(rng, good=3), "b": _rows(rng, good=3)}
    w1, w2 = P.fit_smooth(feats, ["a", "b"]), P.fit_smooth(feats, ["a", "b"])
    assert np.array_equal(w1, w2)
    assert int(np.argmax(np.abs(w1))) == 3 and w1[3] > 0
    held = _rows(np.random.default_rng(2), good=3)
    assert P.score(held, P.linear(w1))["all"] == 1.0
    assert P.score(held, P.linear(-w1))["all"] == 0.0  # the score can fail: the reversed weights pick a wrong one
