"""Agreement of kgrag's PCST instance with G-Retriever's published construction (``retrieval_via_pcst`` in
its released code), on a tiny example whose values are derived by hand below."""

from __future__ import annotations

import numpy as np
import pcst_fast

from kgrag.retrieval.retrievers import pcst
from kgrag.retrieval.retrievers.pcst_reference import pcst_select_reference

# 4 nodes, 4 edges: 0-1, 1-2, 2-3, 0-3
EDGES = np.array([[0, 1], [1, 2], [2, 3], [0, 3]])
NODE_SIM = np.array([0.9, 0.1, 0.5, 0.3])
EDGE_SIM = np.array([0.8, 0.8, 0.2, 0.6])


def test_prizes_by_hand():
    # topk = 2: the two most similar nodes (0: 0.9, 2: 0.5) get 2 and 1
    assert pcst.node_prizes(NODE_SIM, 2).tolist() == [2.0, 0.0, 1.0, 0.0]
    # topk_e = 2, c = 0.01: distinct values 0.8 (2 edges), 0.6 (1 edge).
    # tier 0: min((2 - 0) / 2, 2) = 1.0 each; last = 1.0 * 0.99 = 0.99
    # tier 1: min((2 - 1) / 1, 0.99) = 0.99; 0.2 is below the top-2 values: 0
    assert np.allclose(pcst.edge_prizes(EDGE_SIM, 2, 0.01), [1.0, 1.0, 0.0, 0.99])


def test_instance_matches_gretriever_construction(monkeypatch):
    """cost_e = min(0.5, max prize 1.0 * (1 - 0.01 / 2)) = 0.5. Edge 2 (prize 0 <= 0.5) stays real with cost
    0.5; edges 0, 1, 3 (prizes 1.0, 1.0, 0.99 > 0.5) become virtual nodes 4, 5, 6 with prizes 0.5, 0.5, 0.49
    and zero-cost edges (0,4), (4,1), (1,5), (5,2), (0,6), (6,3) (G-Retriever's loop order)."""
    calls = []
    real_solver = pcst_fast.pcst_fast

    def spy(edges, prizes, costs, root, clusters, pruning, verbosity):
        calls.append((np.asarray(edges), np.asarray(prizes), np.asarray(costs), root, clusters, pruning))
        return real_solver(edges, prizes, costs, root, clusters, pruning, verbosity)

    monkeypatch.setattr(pcst.pcst_fast, "pcst_fast", spy)
    exact = pcst.PCSTParams(preset="gretriever-exact", topk=2, topk_e=2)
    assert (exact.root_topic, exact.prune_leaves, exact.pruning, exact.cost_e) == (False, False, "gw", 0.5)
    nodes, chosen = pcst.pcst_select(
        edges=EDGES, n_prizes=pcst.node_prizes(NODE_SIM, exact.topk),
        e_prizes=pcst.edge_prizes(EDGE_SIM, exact.topk_e, exact.tie_decay), cost_e=exact.cost_e,
        c=exact.tie_decay, root=-1, pruning=exact.pruning, prune_leaves=exact.prune_leaves)
    (edges, prizes, costs, root, clusters, pruning), = calls
    assert (root, clusters, pruning) == (-1, 1, "gw")
    assert np.allclose(prizes, [2, 0, 1, 0, 0.5, 0.5, 0.49])
    got = sorted((tuple(e), round(float(c), 9)) for e, c in zip(edges.tolist(), costs))
    want = sorted([((2, 3), 0.5), ((0, 4), 0.0), ((4, 1), 0.0), ((1, 5), 0.0), ((5, 2), 0.0),
                   ((0, 6), 0.0), ((6, 3), 0.0)])
    assert got == want
    # the optimum by hand: every zero-cost path (prizes 2 + 1 + 0.5 + 0.5 + 0.49), not the costly edge 2-3
    assert sorted(chosen.tolist()) == [0, 1, 3] and sorted(nodes.tolist()) == [0, 1, 2, 3]
    ref_nodes, ref_chosen = pcst_select_reference(
        edges=EDGES, n_prizes=pcst.node_prizes(NODE_SIM, 2), e_prizes=pcst.edge_prizes(EDGE_SIM, 2, 0.01),
        cost_e=0.5, c=0.01, root=-1, pruning="gw")
    assert ref_chosen == {0, 1, 3} and ref_nodes == {0, 1, 2, 3}


def test_cost_is_lowered_below_the_best_edge_prize():
    # all edge prizes tiny: G-Retriever lowers cost_e to max prize * (1 - c / 2) so one edge can pay
    e_pr = np.array([0.2, 0.1, 0.0, 0.0])
    edges, prizes, costs = pcst.pcst_instance(edges=EDGES, n_prizes=np.zeros(4), e_prizes=e_pr,
                                              cost_e=0.2 * (1 - 0.005), real_idx=np.array([1, 2, 3]),
                                              virt_idx=np.array([0]))
    assert np.allclose(prizes[4:], [0.2 - 0.199])
    assert np.allclose(costs[:3], [0.199 - 0.1, 0.199, 0.199])


def test_preset_wins_over_keys_left_at_their_defaults_and_yields_to_changed_ones():
    """params.yaml lists every pcst key at its default, so `-S retrieve.pcst.preset=gretriever-exact` must still
    switch rooting and leaf pruning off; a key the user changed overrides the preset."""
    import yaml

    from tests.conftest import ROOT

    section = yaml.safe_load((ROOT / "params.yaml").read_text())["retrieve"]["pcst"]
    exact = pcst.PCSTParams(**{**section, "preset": "gretriever-exact"})
    assert (exact.root_topic, exact.prune_leaves, exact.cost_e) == (False, False, 0.5)
    mine = pcst.PCSTParams(**{**section, "preset": "gretriever-exact", "cost_e": 0.25})
    assert (mine.root_topic, mine.cost_e) == (False, 0.25)
    assert pcst.PCSTParams(**section) == pcst.PCSTParams()
