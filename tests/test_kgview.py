"""KGView: both stores implement the protocol and share one k-hop walk (``kgrag.kg.kgview.khop_walk``)."""

from __future__ import annotations

import numpy as np

from kgrag.kg.kgview import Incident, KGView, khop_walk
from kgrag.kg.store_duckdb import DuckKGStore


def test_both_stores_are_kg_views(kg, movies_db, tmp_path):
    duck = DuckKGStore(movies_db, cache_dir=tmp_path)
    try:
        assert isinstance(kg, KGView) and isinstance(duck, KGView)
    finally:
        duck.close()


def _walk(edges, seeds, hops, max_edges, priority=None):
    e = np.asarray(edges, dtype=np.int64)
    h, t, r = e[:, 0], e[:, 1], np.arange(len(e)) % 2  # relation of edge i: i % 2

    def incident(frontier):
        eid = np.flatnonzero(np.isin(h, frontier) | np.isin(t, frontier))
        return Incident(eid, h[eid], r[eid], t[eid])

    return khop_walk(seeds, hops, max_edges, num_entities=int(e.max()) + 1, incident=incident,
                     relation_priority=priority)


def test_khop_walk_by_hand():
    # path 0-1-2-3 plus 1-4: edges 0:(0,1) 1:(1,2) 2:(2,3) 3:(1,4)
    edges = [(0, 1), (1, 2), (2, 3), (1, 4)]
    nb = _walk(edges, [0], 2, 100)
    assert nb.nodes.tolist() == [0, 1, 2, 4] and nb.edges.tolist() == [0, 1, 3] and not nb.truncated
    nb = _walk(edges, [0], 3, 100)
    assert nb.nodes.tolist() == [0, 1, 2, 4, 3] and nb.edges.tolist() == [0, 1, 3, 2]
    # cap 2: hop 2 has edges 1 (relation 1) and 3 (relation 1); edge order keeps edge 1
    nb = _walk(edges, [0], 2, 2)
    assert nb.edges.tolist() == [0, 1] and nb.nodes.tolist() == [0, 1, 2] and nb.truncated
    # relation priority: relation 1 first; edges 1 and 3 both relation 1 -> tie by edge index
    nb = _walk(edges, [0], 2, 2, priority=np.array([0.0, 1.0]))
    assert nb.edges.tolist() == [0, 1]
    # seeds out of range are dropped, no hops keeps the seeds only
    assert _walk(edges, [0, 99], 0, 10).nodes.tolist() == [0]


def test_stores_walk_the_same(kg, movies_db, tmp_path):
    duck = DuckKGStore(movies_db, cache_dir=tmp_path)
    try:
        for seeds in ([0], [1, 5], list(range(kg.num_entities))):
            for hops, cap in ((1, 100), (2, 100), (2, 3)):
                a, b = kg.neighbourhood(seeds, hops, cap), duck.neighbourhood(seeds, hops, cap)
                assert a.nodes.tolist() == b.nodes.tolist() and a.edges.tolist() == b.edges.tolist()
                assert a.truncated == b.truncated
    finally:
        duck.close()
