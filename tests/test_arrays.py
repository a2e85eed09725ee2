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
