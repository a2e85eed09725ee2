"""``pcst``: G-Retriever's retrieval: k-NN prizes on nodes and edges, then a prize-collecting Steiner tree."""

from __future__ import annotations

from typing import Literal

import numpy as np
import pcst_fast
from pydantic import Field, model_validator

from kgrag import arrays
from kgrag.config.base import Strict
from kgrag.registry import RETRIEVERS
from kgrag import ranking
from kgrag.types import Subgraph


PRESETS: dict[str, dict] = {
    # kgrag's defaults: rooted at the topic entity, instance simplified by leaf pruning. On MetaQA
    # (reports/bench/retrieval_frontier.json, 50 questions per hop) both presets reach the same recall within
    # 0.005 (1-hop 0.955 / 0.955, 2-hop 0.629 / 0.629, 3-hop 0.227 / 0.231); rooting guarantees the topic is
    # in the tree, leaf pruning bounds the solve time on large neighbourhoods
    "kgrag": {},
    # G-Retriever's published `retrieval_via_pcst` with its WebQSP call (topk=3, topk_e=5, cost_e=0.5):
    # unrooted (root = -1, one cluster), GW pruning, the instance as built there (virtual nodes for edges
    # whose prize beats the cost), no leaf pruning
    "gretriever-exact": {"topk": 3, "topk_e": 5, "cost_e": 0.5, "tie_decay": 0.01, "root_topic": False,
                         "pruning": "gw", "prune_leaves": False},
}


class PCSTParams(Strict):
    """Params of the ``pcst`` retriever (defaults: G-Retriever's WebQSP prizes and costs, kgrag's rooted,
    leaf-pruned solve; ``preset: gretriever-exact`` = the paper's published construction exactly).

    Differences of the defaults from G-Retriever's ``retrieval_via_pcst``: the tree is rooted at the first
    topic entity (G-Retriever: unrooted, so the tree may miss the topic), and zero-prize leaves are dropped /
    paying leaf edges folded before solving (same optimum, GW may pick another tree of equal value). Both
    are switched off by ``gretriever-exact``. Both variants round similarities to 4 decimals before prizes
    are given (``kgrag.ranking``; G-Retriever ranks raw float32 similarities).
    """

    preset: Literal["kgrag", "gretriever-exact"] | None = Field(
        None, description="named setting (PRESETS in kgrag/retrieval/retrievers/pcst.py); keys set to a value other than "
        "their default override it: kgrag | gretriever-exact (G-Retriever's published construction, docs/retrieval.md)"
    )
    topk: int = Field(3, ge=0, description="nodes given prizes k..1 by cosine similarity (eq. 6)")
    topk_e: int = Field(5, ge=0, description="distinct edge-similarity values given prizes (eq. 6 for edges)")
    cost_e: float = Field(0.5, ge=0.0, description="cost per edge C_e (eq. 8)")
    tie_decay: float = Field(0.01, ge=0.0, lt=1.0, description="c: tied edges share a prize, each tier at most (1-c)× the last")
    root_topic: bool = Field(
        True, description="root the tree at the topic entity (kgrag); false = unrooted, as G-Retriever"
    )
    pruning: Literal["gw", "strong", "none", "simple"] = Field("gw", description="pcst_fast pruning: gw | strong | "
                                                                                 "simple | none")
    relation_priority: bool = Field(
        True, description="a neighbourhood over max_edges is cut by question-relevance of relations (kgrag); "
        "false = in edge order"
    )
    prune_leaves: bool = Field(
        True,
        description="simplify the instance before solving: drop zero-prize leaves, fold paying leaf edges "
        "into their parent (same optimum, much faster on large neighbourhoods; the GW heuristic may return "
        "another tree of about equal value); false = the instance exactly as G-Retriever builds it",
    )

    @model_validator(mode="before")
    @classmethod
    def _apply_preset(cls, data):
        if isinstance(data, dict) and data.get("preset") is not None:
            if data["preset"] not in PRESETS:
                raise ValueError(f"unknown pcst preset {data['preset']!r}; valid: {', '.join(PRESETS)}")
            # params.yaml lists every key with its default, so a key equal to its default yields to the preset
            # (`dvc exp run -S retrieve.pcst.preset=gretriever-exact` works as it reads); a key set to another
            # value overrides the preset
            own = {k: v for k, v in data.items()
                   if k == "preset" or k not in cls.model_fields or v != cls.model_fields[k].default}
            return {**data, **PRESETS[data["preset"]], **own}
        return data


def node_prizes(sim: np.ndarray, k: int) -> np.ndarray:
    """Top-``k`` similarities get prizes k, k-1, ..., 1; the rest 0.

    Similarities are rounded to ``kgrag.ranking.COSINE_DECIMALS`` and ties go to the lower position (the
    caller passes nodes sorted by id), so CPU float noise does not move a prize.

    References
    ----------
    He et al., G-Retriever (2024), eq. 6.
    """
    prizes = np.zeros(len(sim), dtype=np.float64)
    k = min(k, len(sim))
    if k > 0:
        top = ranking.top_k(sim, k, decimals=ranking.COSINE_DECIMALS)
        prizes[top] = np.arange(k, 0, -1, dtype=np.float64)
    return prizes


def edge_prizes(sim: np.ndarray, k: int, c: float) -> np.ndarray:
    """Prizes of edges: the top-``k`` distinct similarity values get k..1, shared among tied edges.

    A tier of n tied edges gets ``min((k - i) / n, (1 - c) * previous tier)`` per edge, so that a
    value shared by many edges (MetaQA edges share their relation's embedding) stays small.

    References
    ----------
    He et al., G-Retriever (2024), eq. 6 for edges and its released retrieval code's tie rule.
    """
    prizes = np.zeros(len(sim), dtype=np.float64)
    if k <= 0 or len(sim) == 0:
        return prizes
    sim = ranking.rounded(sim, ranking.COSINE_DECIMALS)  # tiers of equal similarity, robust to float noise
    values, inverse, counts = np.unique(sim, return_inverse=True, return_counts=True)
    k = min(k, len(values))
    last = float(k)
    tier_value = np.zeros(len(values), dtype=np.float64)
    for rank in range(k):  # k is small (≤ topk_e): a loop over tiers, not edges
        v = len(values) - 1 - rank
        value = min((k - rank) / counts[v], last)
        tier_value[v] = value
        last = value * (1 - c)
    prizes[:] = tier_value[inverse]
    return prizes


def prune_zero_leaves(
    *, n: int, edges: np.ndarray, n_prizes: np.ndarray, edge_cost: np.ndarray, keep: int
) -> np.ndarray:
    """Mask of edges left after repeatedly removing zero-prize leaves hanging on a positive-cost edge.

    Such a leaf can never pay for its edge, so it is in no optimal tree. ``keep`` (the root) stays.
    """
    alive = np.ones(len(edges), dtype=bool)
    removable_edge = edge_cost > 0
    zero = n_prizes <= 0
    if 0 <= keep < n:
        zero = zero.copy()
        zero[keep] = False
    while True:
        deg = np.bincount(edges[alive].ravel(), minlength=n)
        leaf = zero & (deg == 1)
        drop = alive & removable_edge & (leaf[edges[:, 0]] | leaf[edges[:, 1]])
        if not drop.any():
            return alive
        alive &= ~drop


def fold_paying_leaves(
    *, n: int, edges: np.ndarray, n_prizes: np.ndarray, gain: np.ndarray, alive: np.ndarray, keep: int
) -> tuple[np.ndarray, np.ndarray]:
    """Fold each edge that pays for itself (``gain`` = prize - cost > 0) into its parent when its other end
    is a zero-prize leaf: the parent takes the gain as node prize and the edge leaves the instance.

    Once the parent is in the tree, such an edge is free profit, so every optimal tree through the parent
    takes it. Returns the new node prizes and, per edge, the node it was folded into (-1 if not folded).
    """
    zero = n_prizes <= 0
    if 0 <= keep < n:
        zero = zero.copy()
        zero[keep] = False
    deg = np.bincount(edges[alive].ravel(), minlength=n)
    leaf = zero & (deg == 1)
    src, dst = edges[:, 0], edges[:, 1]
    fold = alive & (gain > 0) & (leaf[src] | leaf[dst])
    parent = np.where(leaf[dst], src, dst)
    prizes = n_prizes.astype(np.float64, copy=True)
    np.add.at(prizes, parent[fold], gain[fold])
    return prizes, np.where(fold, parent, -1)


def pcst_select(
    *,
    edges: np.ndarray,
    n_prizes: np.ndarray,
    e_prizes: np.ndarray,
    cost_e: float,
    c: float,
    root: int,
    pruning: str,
    prune_leaves: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """Solve PCST with edge prizes; edges whose prize beats their cost become virtual nodes.

    Parameters
    ----------
    edges : (m, 2) local node indices.
    n_prizes, e_prizes : node and edge prizes.
    cost_e : edge cost C_e; lowered to ``max(e_prizes) * (1 - c/2)`` when above it.
    root : local root node, or -1 for unrooted (one cluster).
    prune_leaves : simplify the instance first: drop zero-prize leaves on costly edges
        (``prune_zero_leaves``), fold paying edges to zero-prize leaves into their parent
        (``fold_paying_leaves``). Same optimum; GW may break ties differently.

    Returns
    -------
    selected nodes (local indices) and selected edges (row indices into ``edges``).

    References
    ----------
    He et al., G-Retriever (2024), eqs. 7-8 and the virtual-node construction of section 4;
    Hegde et al. (2015), the near-linear PCST algorithm behind ``pcst_fast``.
    """
    n = len(n_prizes)
    m = len(edges)
    n_prizes_in = n_prizes
    if m == 0:
        keep = np.nonzero(n_prizes > 0)[0][:1] if root < 0 else np.array([root])
        return keep.astype(np.int64), np.zeros(0, dtype=np.int64)
    if len(e_prizes) and e_prizes.max() > 0:
        cost_e = min(cost_e, float(e_prizes.max()) * (1 - c / 2))
    real = e_prizes <= cost_e
    # Edges kept after leaf pruning; a virtual (prize > cost) edge has cost 0 and is never pruned.
    alive = np.ones(m, dtype=bool)
    folded_into = np.full(m, -1)
    if prune_leaves:
        alive = prune_zero_leaves(n=n, edges=edges, n_prizes=n_prizes,
                                  edge_cost=np.where(real, cost_e - e_prizes, 0.0), keep=root)
        n_prizes, folded_into = fold_paying_leaves(n=n, edges=edges, n_prizes=n_prizes,
                                                   gain=np.where(real, 0.0, e_prizes - cost_e), alive=alive, keep=root)
        alive &= folded_into < 0
    real &= alive
    real_idx = np.nonzero(real)[0]
    virt_idx = np.nonzero(~real & alive)[0]
    all_edges, prizes, costs = pcst_instance(edges=edges, n_prizes=n_prizes, e_prizes=e_prizes, cost_e=cost_e,
                                             real_idx=real_idx, virt_idx=virt_idx)
    vertices, sel = pcst_fast.pcst_fast(all_edges, prizes, costs, int(root), 1, pruning, 0)
    vertices = np.asarray(vertices, dtype=np.int64)
    sel = np.asarray(sel, dtype=np.int64)
    chosen_real = real_idx[sel[sel < len(real_idx)]]
    chosen_virt = virt_idx[vertices[vertices >= n] - n]
    picked = vertices[vertices < n]
    chosen_fold = np.nonzero((folded_into >= 0) & np.isin(folded_into, picked))[0]
    chosen = arrays.unique(np.concatenate([chosen_real, chosen_virt, chosen_fold]))
    nodes = arrays.unique(np.concatenate([picked, edges[chosen].ravel()]))
    return one_tree(nodes=nodes, chosen=chosen, edges=edges, root=root, n_prizes=n_prizes_in)


def pcst_instance(*, edges: np.ndarray, n_prizes: np.ndarray, e_prizes: np.ndarray, cost_e: float,
                  real_idx: np.ndarray, virt_idx: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The PCST instance handed to ``pcst_fast``: (edges, node prizes, edge costs).

    A real edge (prize <= cost) keeps its ends and costs ``cost_e - prize``; an edge whose prize beats the
    cost becomes virtual node ``n + j`` (j-th in ``virt_idx``) with prize ``prize - cost_e``, joined to both
    ends by zero-cost edges. Edge rows: the real edges, then every (head, virtual), then every
    (virtual, tail) (G-Retriever interleaves the two virtual edges of each; the instance is the same).

    References
    ----------
    He et al., G-Retriever (2024), section 4 and ``retrieval_via_pcst`` in its released code.
    """
    n = len(n_prizes)
    nv = len(virt_idx)
    virt_nodes = n + np.arange(nv)
    all_edges = np.concatenate(
        [
            edges[real_idx],
            np.stack([edges[virt_idx, 0], virt_nodes], axis=1),
            np.stack([virt_nodes, edges[virt_idx, 1]], axis=1),
        ]
    ).astype(np.int64).reshape(-1, 2)
    costs = np.concatenate([cost_e - e_prizes[real_idx], np.zeros(2 * nv)])
    prizes = np.concatenate([n_prizes, e_prizes[virt_idx] - cost_e])
    return all_edges, prizes, costs


def one_tree(*, nodes: np.ndarray, chosen: np.ndarray, edges: np.ndarray, root: int, n_prizes: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray]:
    """The one tree of a PCST answer: the component holding ``root`` (unrooted: the one with the most node
    prize), without edges outside it. ``pcst_fast`` with ``pruning="none"`` returns the whole GW forest,
    including clusters the root never reached; every other pruning already returns one tree.
    """
    if len(nodes) <= 1:
        return nodes, chosen
    parent = {int(v): int(v) for v in nodes}

    def find(v: int) -> int:
        while parent[v] != v:
            parent[v] = parent[parent[v]]
            v = parent[v]
        return v

    for a, b in edges[chosen].tolist():
        parent[find(a)] = find(b)
    comp = np.asarray([find(int(v)) for v in nodes])
    if len(set(comp.tolist())) == 1:
        return nodes, chosen
    if root >= 0 and root in parent:
        keep = find(root)
    else:
        totals: dict[int, float] = {}
        for v, c in zip(nodes.tolist(), comp.tolist()):
            totals[c] = totals.get(c, 0.0) + float(n_prizes[v])
        keep = max(sorted(totals), key=lambda c: totals[c])
    nodes_kept = nodes[comp == keep]
    inside = np.isin(edges[chosen, 0], nodes_kept) & np.isin(edges[chosen, 1], nodes_kept)
    return nodes_kept, chosen[inside]


@RETRIEVERS.register("pcst", params=PCSTParams, version="2")
def retrieve_pcst(*, question, query_vec, kg, index, params: PCSTParams, hops, max_edges) -> Subgraph:
    """G-Retriever: prizes from k-NN on node/edge embeddings, PCST over the topic's k-hop neighbourhood
    (within the question's own graph when it has one: ``KGStore.question_neighbourhood``).

    References
    ----------
    He et al., G-Retriever (2024), section 4, eqs. 5-8.
    """
    topics = [t for t in question.topic_ids if 0 <= t < kg.num_entities]
    if not topics:
        return Subgraph.empty(method="pcst", reason="no topic entity in the KG")
    rel_sim = index.relation_vectors @ query_vec
    nb = kg.question_neighbourhood(topics, hops, max_edges, graph_id=question.graph_id,
                                   relation_priority=rel_sim if params.relation_priority else None)
    nodes = np.sort(nb.nodes)
    eidx = nb.edges
    h, r, t = kg.heads[eidx], kg.relations[eidx], kg.tails[eidx]
    local = np.stack([np.searchsorted(nodes, h), np.searchsorted(nodes, t)], axis=1)
    n_sim = index.entity_vectors[nodes] @ query_vec
    if index.triple_vectors is not None:
        e_sim = index.triple_vectors[eidx] @ query_vec
    else:  # an edge's text is its relation: the few relations are scored once, then looked up
        e_sim = rel_sim[r]
    n_pr = node_prizes(n_sim, params.topk)
    e_pr = edge_prizes(e_sim, params.topk_e, params.tie_decay)
    root = int(np.searchsorted(nodes, topics[0])) if params.root_topic else -1
    sel_nodes, sel_edges = pcst_select(
        edges=local, n_prizes=n_pr, e_prizes=e_pr, cost_e=params.cost_e, c=params.tie_decay,
        root=root, pruning=params.pruning, prune_leaves=params.prune_leaves,
    )
    # Best first: edge prize, then similarity (both rounded, kgrag.ranking), then edge id.
    order = np.lexsort((eidx[sel_edges], -ranking.rounded(e_sim[sel_edges], ranking.COSINE_DECIMALS),
                        -ranking.rounded(e_pr[sel_edges])))
    sel_edges = sel_edges[order]
    return Subgraph(
        heads=h[sel_edges],
        relations=r[sel_edges],
        tails=t[sel_edges],
        node_ids=nodes[sel_nodes],
        neighbourhood_nodes=len(nodes),
        neighbourhood_edges=len(eidx),
        trace={"method": "pcst", "preset": params.preset, "root": int(topics[0]) if root >= 0 else None, "truncated": nb.truncated},
    )
