"""Array helpers used on every query's hot path.

``np.unique`` without ``return_*`` options takes a hash-based path in NumPy 2.3 and later. On this project's
machines that path is 20-40x slower than sorting for integer arrays of 10^5 to 10^6 entries (100k ids: 39 ms
against 1.9 ms; measured with NumPy 2.4.6), and relation walks call it once per step. :func:`unique` is the
sort-based equivalent; ``bench/unique.py`` re-measures the ratio.
"""

from __future__ import annotations

import numpy as np


def unique(values) -> np.ndarray:
    """The sorted distinct values of ``values`` (flattened), as ``np.unique(values)`` returns them, by sorting.

    Parameters
    ----------
    values : array_like
        Any array of a sortable dtype (ids, strings, floats without NaN).

    Returns
    -------
    numpy.ndarray
        One-dimensional, sorted ascending, each value once; the input's dtype.
    """
    a = np.sort(np.ravel(np.asarray(values)))
    if a.size < 2:
        return a
    keep = np.empty(a.size, dtype=bool)
    keep[0] = True
    np.not_equal(a[1:], a[:-1], out=keep[1:])
    return a[keep]


def ranges(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Every index of the half-open ranges ``[lo[i], hi[i])``, concatenated in order, without a Python loop
    (a hub's frontier has 10^5 ranges).

    Parameters
    ----------
    lo, hi : numpy.ndarray
        Range starts and ends, ``hi >= lo``, of equal length.

    Returns
    -------
    numpy.ndarray
        int64 indices, ``sum(hi - lo)`` of them.
    """
    lo, hi = np.asarray(lo, dtype=np.int64), np.asarray(hi, dtype=np.int64)
    lens = hi - lo
    return np.arange(int(lens.sum()), dtype=np.int64) + np.repeat(lo - (np.cumsum(lens) - lens), lens)


def runs(sorted_values: np.ndarray) -> list[tuple[int, int]]:
    """The ``(start, end)`` bounds of each run of equal values in ``sorted_values``, in order: the groups of a
    sorted key (a step's edges by relation).

    Parameters
    ----------
    sorted_values : numpy.ndarray
        One-dimensional, equal values next to each other (sorted).

    Returns
    -------
    list of (int, int)
        Half-open bounds covering the array; [] for an empty one.
    """
    v = np.asarray(sorted_values)
    if not v.size:
        return []
    cuts = (np.flatnonzero(v[1:] != v[:-1]) + 1).tolist()
    return list(zip([0, *cuts], [*cuts, int(v.size)]))
