"""Property-based tests (hypothesis) of the graph algorithms on random graphs."""

from __future__ import annotations

import igraph
import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

from kgrag.retrieval.lego.extract_ppr import local_ppr, push_ppr
from kgrag.retrieval.lego.types import LocalGraph
from kgrag.retrieval.retrievers.pcst import pcst_select

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def simple_graphs(draw, max_nodes: int = 25):
    """(n, edges): an undirected simple graph (no self-loop, no parallel edge), possibly disconnected."""
    n = draw(st.integers(1, max_nodes))
    pairs = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=3 * n))
    edges = sorted({(min(a, b), max(a, b)) for a, b in pairs if a != b})
    return n, np.asarray(edges, dtype=np.int64).reshape(-1, 2)


def _components(n: int, edges: np.ndarray) -> int:
    g = igraph.Graph(n=n, edges=edges.tolist(), directed=False)
    return len(g.connected_components())


@SETTINGS
@given(data=st.data(), graph=simple_graphs(), rooted=st.booleans(), pruning=st.sampled_from(["gw", "strong", "none"]),
       prune_leaves=st.booleans())
def test_pcst_result_is_one_connected_tree_inside_its_input(data, graph, rooted, pruning, prune_leaves):
    n, edges = graph
    m = len(edges)
    prize = st.floats(0, 5, allow_nan=False)
    n_prizes = np.asarray(data.draw(st.lists(prize, min_size=n, max_size=n)))
    e_prizes = np.asarray(data.draw(st.lists(prize, min_size=m, max_size=m)))
    cost = data.draw(st.floats(0.01, 3))
    root = data.draw(st.integers(0, n - 1)) if rooted else -1
    nodes, sel = pcst_select(edges=edges, n_prizes=n_prizes, e_prizes=e_prizes, cost_e=cost, c=0.01, root=root,
                             pruning=pruning, prune_leaves=prune_leaves)
    nodes, sel = np.asarray(nodes), np.asarray(sel)
    # inside its input
    assert np.all((nodes >= 0) & (nodes < n)) and len(set(nodes.tolist())) == len(nodes)
    assert np.all((sel >= 0) & (sel < m)) and len(set(sel.tolist())) == len(sel)
    ends = set(edges[sel].ravel().tolist())
    assert ends <= set(nodes.tolist())
    if root >= 0:
        assert root in set(nodes.tolist())
    if len(nodes):
        # one tree of G-Retriever's augmented instance, where an edge whose prize beats its cost is a
        # virtual node: connected, and the costly edges form a forest (a cycle can only close through a
        # paying edge, which is worth taking for its own prize)
        local = {v: i for i, v in enumerate(nodes.tolist())}
        sub = np.asarray([[local[a], local[b]] for a, b in edges[sel].tolist()], dtype=np.int64).reshape(-1, 2)
        assert _components(len(nodes), sub) == 1
        cost_eff = min(cost, e_prizes.max() * (1 - 0.01 / 2)) if m and e_prizes.max() > 0 else cost
        costly = sub[e_prizes[sel] <= cost_eff]
        assert len(costly) == len(nodes) - _components(len(nodes), costly)  # acyclic
        if not np.any(e_prizes[sel] > cost_eff):
            assert len(sel) == len(nodes) - 1  # no paying edge: a tree in the plain sense


@SETTINGS
@given(graph=simple_graphs(), data=st.data(), damping=st.floats(0.5, 0.95))
def test_ppr_on_the_whole_graph_sums_to_one_and_agrees_with_igraph(graph, data, damping):
    n, edges = graph
    seeds = np.unique(np.asarray(data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=3))))
    src, dst = (edges[:, 0], edges[:, 1]) if len(edges) else (np.zeros(0, np.int64), np.zeros(0, np.int64))
    degree = np.bincount(np.concatenate([src, dst]), minlength=n).astype(np.int64)
    g = LocalGraph(nodes=np.arange(n), edges=np.arange(len(edges)), src=src, dst=dst,
                   relations=np.zeros(len(edges), dtype=np.int64), degree=degree)
    ours = local_ppr(graph=g, seeds=seeds, damping=damping, tol=1e-12, max_iter=10_000)
    assert abs(ours.sum() - 1.0) < 1e-6 and np.all(ours >= -1e-12)
    ig = igraph.Graph(n=n, edges=edges.tolist(), directed=False)
    reset = np.zeros(n)
    reset[seeds] = 1.0 / len(seeds)
    ref = np.asarray(ig.personalized_pagerank(damping=damping, reset=reset.tolist()))
    assert np.allclose(ours, ref, atol=1e-6), (ours, ref)


@SETTINGS
@given(graph=simple_graphs(), data=st.data(), damping=st.floats(0.5, 0.95), eps=st.floats(1e-7, 1e-2))
def test_push_ppr_is_within_eps_degree_below_igraph(graph, data, damping, eps):
    """Forward push's guarantee (Andersen, Chung & Lang 2006): 0 <= exact - score < eps * degree, every node;
    topics with edges (an edgeless topic sends its walk to the other topics, outside the bound's proof)."""
    n, edges = graph
    src, dst = (edges[:, 0], edges[:, 1]) if len(edges) else (np.zeros(0, np.int64), np.zeros(0, np.int64))
    g = LocalGraph(nodes=np.arange(n), edges=np.arange(len(edges)), src=src, dst=dst,
                   relations=np.zeros(len(edges), dtype=np.int64),
                   degree=np.bincount(np.concatenate([src, dst]), minlength=n).astype(np.int64))
    linked = np.flatnonzero(g.degree > 0)
    if not len(linked):
        return
    seeds = np.unique(np.asarray(data.draw(st.lists(st.sampled_from(linked.tolist()), min_size=1, max_size=3))))
    ids, est, _ = push_ppr(indptr=g.indptr, nbr=g.nbr, degree=g.degree, seeds=seeds, damping=damping, eps=eps)
    ours = np.zeros(n)
    ours[ids] = est
    reset = np.zeros(n)
    reset[seeds] = 1.0 / len(seeds)
    ref = np.asarray(igraph.Graph(n=n, edges=edges.tolist(), directed=False).personalized_pagerank(
        damping=damping, reset=reset.tolist()))
    gap = ref - ours
    assert gap.min() >= -1e-9 and np.all(gap < eps * np.maximum(g.degree, 1) + 1e-9), (gap, eps)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graph=simple_graphs(max_nodes=30), method=st.sampled_from(
    ["louvain", "girvan_newman", "hierarchical", "spectral", "random"]), max_size=st.integers(1, 10),
    seed=st.integers(0, 2**16))
def test_communities_cover_the_subgraph_and_respect_the_maximum_size(graph, method, max_size, seed):
    from kgrag.reasoning.community import detect

    n, edges = graph
    cs = detect(n=n, edges=edges, method=method, max_size=max_size, seed=seed)
    flat = np.concatenate(cs) if cs else np.zeros(0, dtype=np.int64)
    assert sorted(flat.tolist()) == list(range(n))  # every node exactly once
    assert all(1 <= len(c) <= max_size for c in cs)
    again = detect(n=n, edges=edges, method=method, max_size=max_size, seed=seed)
    assert [c.tolist() for c in again] == [c.tolist() for c in cs]  # deterministic under the seed
