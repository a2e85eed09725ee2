"""kgrag.arrays.unique agrees with np.unique (its sort-based stand-in on the hot paths)."""

import numpy as np
import pytest

from kgrag import arrays


@pytest.mark.parametrize("values", [
    np.random.default_rng(0).integers(0, 50, 1000),
    np.random.default_rng(1).integers(0, 2**40, 5000),
    np.random.default_rng(2).integers(0, 9, (30, 4)),  # flattened, as np.unique does
    np.asarray(["b", "a", "c", "a", "b"], dtype=object),
    np.asarray([0.5, -1.0, 0.5, 2.0]),
    np.zeros(0, dtype=np.int64),
    np.asarray([7], dtype=np.int32),
    [3, 1, 3, 2],
])
def test_unique_agrees_with_numpy(values):
    got, want = arrays.unique(values), np.unique(values)
    assert got.dtype == want.dtype
    assert got.tolist() == want.tolist()


def test_ranges_is_every_half_open_range_in_order():
    lo, hi = np.asarray([5, 0, 3, 9]), np.asarray([7, 0, 4, 12])
    want = [i for a, b in zip(lo, hi) for i in range(a, b)]
    assert arrays.ranges(lo, hi).tolist() == want == [5, 6, 3, 9, 10, 11]
    assert arrays.ranges(np.zeros(0, np.int64), np.zeros(0, np.int64)).tolist() == []


def test_runs_bounds_each_group_of_equal_values():
    from kgrag.arrays import runs

    assert runs(np.array([], dtype=np.int64)) == []
    assert runs(np.array([7])) == [(0, 1)]
    rng = np.random.default_rng(0)
    for _ in range(20):
        v = np.sort(rng.integers(0, 6, size=int(rng.integers(1, 40))))
        got = runs(v)
        assert got[0][0] == 0 and got[-1][1] == len(v)
        assert all(b == c for (_, b), (c, _) in zip(got, got[1:]))  # contiguous, in order
        assert [int(v[a]) for a, _ in got] == np.unique(v).tolist()  # one run per distinct value
        assert all((v[a:b] == v[a]).all() for a, b in got)
