"""``ppr``: personalized PageRank from the topic entities, run on their k-hop neighbourhood only."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from pydantic import BaseModel, ConfigDict, Field

from kgrag import ranking

from kgrag.lego.registries import EXTRACTORS
from kgrag.lego.types import Context, Extracted, LocalGraph


class PPRParams(BaseModel):
    """Params of the ``ppr`` extractor (defaults: the paper's Table 7)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    max_ent: int = Field(2000, ge=1, description="entities kept: the highest-scored ones (seeds always kept)")
    damping: float = Field(
        0.8, gt=0.0, lt=1.0,
        description="probability that the walk continues (igraph's `damping`); the paper's "
        "'restart_prob = 0.8' is this damping, i.e. the walk restarts at the topic with probability 0.2",
    )
    tol: float = Field(
        1e-6, gt=0.0,
        description="stop when the L1 change of one iteration falls below this (about log(tol)/log(damping) "
        "iterations: 62 at the defaults)",
    )
    max_iter: int = Field(200, ge=1, description="power-iteration cap")


def local_ppr(*, graph: LocalGraph, seeds: np.ndarray, damping: float, tol: float, max_iter: int) -> np.ndarray:
    """Personalized PageRank scores of the local nodes, by power iteration restricted to ``graph``.

    The walk moves along an incident edge chosen uniformly among the node's *whole-KG* edges
    (``graph.degree``); a step that leaves ``graph`` is dropped, so the scores are a lower bound on the
    whole-KG PPR, and equal to it when ``graph`` holds the topics' whole connected component. A node with
    no edge at all (an isolated topic) sends its mass back to the seeds, as igraph does.

    Parameters
    ----------
    graph : the topics' k-hop neighbourhood.
    seeds : local indices of the topics; the restart distribution is uniform over them.
    damping : probability of following an edge (1 - restart probability).

    Returns
    -------
    score of each local node (sums to at most 1).

    References
    ----------
    Cao et al., LEGO-GraphRAG (2024), section 4.1, PPR update
    p_v = λ e_v + (1 - λ) Σ_{u∈N(v)} p_u / deg(u); Page et al. (1999); Haveliwala (2002).
    """
    n = graph.n
    p0 = np.zeros(n)
    seeds = np.unique(np.asarray(seeds, dtype=np.int64))
    if n == 0 or len(seeds) == 0:
        return p0
    p0[seeds] = 1.0 / len(seeds)
    deg = graph.degree.astype(np.float64)
    inv = np.divide(1.0, deg, out=np.zeros(n), where=deg > 0)
    # A[v, u] = number of edges u–v, straight from the undirected adjacency lists; W = A · diag(1/deg)
    a = sp.csr_matrix((np.ones(len(graph.nbr)), graph.nbr, graph.indptr), shape=(n, n))
    dangling = deg == 0
    p = p0.copy()
    for _ in range(max_iter):
        nxt = damping * (a @ (p * inv)) + (1.0 - damping) * p0
        if dangling.any():
            nxt += damping * p[dangling].sum() * p0
        delta = float(np.abs(nxt - p).sum())
        p = nxt
        if delta < tol:
            break
    return p


def top_nodes(scores: np.ndarray, seeds: np.ndarray, k: int) -> np.ndarray:
    """Seeds, then the other nodes with a positive score by descending score rounded to
    ``kgrag.ranking.MASS_DECIMALS`` (ties: lower index), ``k`` in all."""
    seeds = np.unique(np.asarray(seeds, dtype=np.int64))
    scores = ranking.rounded(scores, ranking.MASS_DECIMALS)
    order = ranking.order(scores, decimals=ranking.MASS_DECIMALS)
    order = order[(scores[order] > 0) & ~np.isin(order, seeds)]
    return np.concatenate([seeds, order])[: max(k, len(seeds))].astype(np.int64)


@EXTRACTORS.register("ppr", params=PPRParams, version="2")
def extract_ppr(*, graph: LocalGraph, seeds: np.ndarray, hops: int, params: PPRParams, ctx: Context) -> Extracted:
    """Top-``max_ent`` nodes by personalized PageRank from the seeds, and the edges among them.

    References
    ----------
    Cao et al., LEGO-GraphRAG (2024), section 4.1 "PPR" and Table 7 (max_ent = 2000, restart_prob = 0.8).
    """
    scores = local_ppr(graph=graph, seeds=seeds, damping=params.damping, tol=params.tol, max_iter=params.max_iter)
    nodes = top_nodes(scores, seeds, params.max_ent)
    mask = np.zeros(graph.n, dtype=bool)
    mask[nodes] = True
    return Extracted(nodes=nodes, scores=scores[nodes], edges=graph.induced(mask))
