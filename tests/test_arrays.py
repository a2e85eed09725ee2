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
