"""``ppr``: personalized PageRank from the topic entities.

Two methods (param ``method``):

* ``push`` (default): Andersen-Chung-Lang forward push (``push_ppr``) on the adjacency of everything the
  question sees (the whole KG, or its own graph; ``KGView.question_adjacency``, which both stores give in the
  same layout, the DuckDB store reading it from its triples table once): it touches only the nodes that receive mass and never walks the k-hop
  neighbourhood (the retriever calls ``extract_ppr.from_kg`` before any neighbourhood). Every score is below
  the exact PPR by less than ``eps`` times the node's degree. With ``within_hops`` (default) only entities
  within the retrieval hops of a topic are kept, as with the neighbourhood methods. A store that gives no
  adjacency (None) gets the push on the k-hop neighbourhood instead (the stage function).
* ``power``: power iteration to ``tol`` on the k-hop neighbourhood (``local_ppr``).

Both rank by score rounded to ``kgrag.ranking.MASS_DECIMALS``, ties by id; neither depends on thread count.
"""

from __future__ import annotations

from typing import Any, Literal, NamedTuple

import numpy as np
import scipy.sparse as sp
from pydantic import Field

from kgrag import arrays
from kgrag import ranking
from kgrag.config.base import Strict
from kgrag.retrieval.lego.registries import EXTRACTORS
from kgrag.retrieval.lego.types import Context, Extracted, LocalGraph


class PPRParams(Strict):
    """Params of the ``ppr`` extractor (``max_ent``, ``damping``: the paper's Table 7)."""

    max_ent: int = Field(2000, ge=1, description="entities kept: the highest-scored ones (seeds always kept)")
    damping: float = Field(
        0.8, gt=0.0, lt=1.0,
        description="probability that the walk continues (igraph's `damping`); the paper's "
        "'restart_prob = 0.8' is this damping, i.e. the walk restarts at the topic with probability 0.2",
    )
    method: Literal["push", "power"] = Field(
        "push",
        description="push: forward push (Andersen, Chung & Lang 2006) on the whole KG's adjacency (the question's "
        "own graph's where it has one), touching only nodes that get mass; power: power iteration on the k-hop "
        "neighbourhood",
    )
    within_hops: bool = Field(
        True,
        description="push on the whole KG: keep only entities within the retrieval hops of a topic through the "
        "nodes the push expanded (the neighbourhood methods' reach); false = any entity (the paper's whole-KG "
        "extraction)",
    )
    eps: float = Field(
        2e-5, gt=0.0, lt=1.0,
        description="push: residual threshold; a node is pushed while residual >= eps * degree, and every score "
        "is then below the exact whole-KG PPR by less than eps * degree (work at most 1 / (eps * (1 - damping))"
        " edge visits)",
    )
    tol: float = Field(
        1e-6, gt=0.0,
        description="power: stop when the L1 change of one iteration falls below this (about "
        "log(tol)/log(damping) iterations: 62 at the defaults)",
    )
    max_iter: int = Field(200, ge=1, description="power: iteration cap")


def _rows(indptr: np.ndarray, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(CSR positions of the rows of ``nodes``, concatenated in ``nodes`` order; each row's length)."""
    starts = indptr[nodes]
    lens = indptr[nodes + 1] - starts
    total = int(lens.sum())
    return np.repeat(starts - np.cumsum(lens) + lens, lens) + np.arange(total, dtype=np.int64), lens


class Pushed(NamedTuple):
    """What ``push_ppr`` returns: the nodes that received mass (ascending), their scores, and whether each was
    expanded (pushed at least once: its edges were walked)."""

    nodes: np.ndarray
    scores: np.ndarray
    expanded: np.ndarray


def push_ppr(*, indptr: np.ndarray, nbr: np.ndarray, degree: np.ndarray, seeds: np.ndarray, damping: float,
             eps: float) -> Pushed:
    """Approximate personalized PageRank by forward push, visiting only the nodes that receive mass.

    Keeps an estimate ``p`` and a residual ``r`` (start: ``p = 0``, ``r`` uniform over the seeds). Pushing
    node ``u`` moves ``(1 - damping) r[u]`` into ``p[u]`` and spreads ``damping r[u] / degree[u]`` to each
    incident edge's other end (a node with no edge sends it back to the seeds, igraph's rule for dangling
    nodes). Every push keeps the invariant

        ppr(s) = p + sum_u r[u] ppr(e_u)

    (``ppr(x)``: the PPR vector of restart distribution ``x``). The first round pushes the seeds, each later
    round, at once, every node with ``r[u] >= eps * degree[u]``, in ascending index; it stops when no node
    qualifies. The scores are
    ``p + (1 - damping) r``, the part of ``r`` that certainly restarts where it is.

    Guarantee (undirected graph, ``degree`` = row lengths, no edgeless seed): for every node ``v``,
    ``0 <= ppr(s)[v] - score[v] < eps * degree[v]``: by the invariant and ``ppr(e_u)[v] / deg(v) =
    ppr(e_v)[u] / deg(u)`` (reversibility), the missing mass is ``deg(v) sum_u (r[u] / deg(u)) ppr(e_v)[u]
    < eps deg(v)``. Each later push removes at least ``(1 - damping) eps degree[u]`` of residual, so the work
    is at most ``1 / (eps (1 - damping))`` edge visits plus the seeds' degrees, whatever the graph's size. On
    a partial adjacency (rows shorter than ``degree``: a neighbourhood), mass sent along a missing edge is
    dropped, so the scores stay lower bounds of the whole-graph PPR, and within ``eps * degree`` of the PPR of
    the walk restricted to that adjacency (``local_ppr``).

    Deterministic: rounds and sums run in a fixed order (ascending node index, CSR order), single-threaded;
    the seeds' order does not matter.

    Parameters
    ----------
    indptr, nbr : undirected CSR adjacency (each edge in both ends' rows; a multi-edge repeats).
    degree : degree of each node (the divisor of a push; the row length on a whole graph).
    seeds : node indices of the restart distribution (uniform over the distinct ones).
    damping : probability that the walk follows an edge (igraph's ``damping``).
    eps : residual threshold per unit of degree.

    Returns
    -------
    ``Pushed``: the nodes that received mass, ascending, their scores, and which were expanded.

    References
    ----------
    Andersen, Chung & Lang (2006), "Local graph partitioning using PageRank vectors", FOCS, section 3
    (the push operation, its invariant, ``ApproximatePageRank`` and its ``O(1 / (eps alpha))`` work bound);
    here for the non-lazy walk, as in Berkhin (2006), "Bookmark-coloring algorithm for personalized PageRank
    computing", pushed a frontier at a time.
    """
    n = len(indptr) - 1
    seeds = arrays.unique(np.asarray(seeds, dtype=np.int64))
    if n == 0 or len(seeds) == 0:
        return Pushed(np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros(0, dtype=bool))
    alpha = 1.0 - damping
    p = np.zeros(n)  # zero-filled on demand: only the pages of touched nodes are written
    r = np.zeros(n)
    seen = np.zeros(n, dtype=bool)
    r[seeds] = 1.0 / len(seeds)
    seen[seeds] = True
    touched = [seeds]
    frontier = seeds  # the seeds are pushed once whatever their degree (a hub topic still spreads its mass)
    while len(frontier):
        mass = r[frontier]
        r[frontier] = 0.0
        p[frontier] += alpha * mass
        deg = degree[frontier]
        rows, lens = _rows(indptr, frontier)
        to = nbr[rows]
        share = np.repeat(damping * mass / np.maximum(deg, 1), lens)
        lone = deg == 0
        if lone.any():  # an edgeless node restarts its walk at the seeds
            to = np.concatenate([to, np.tile(seeds, int(lone.sum()))])
            share = np.concatenate([share, np.repeat(damping * mass[lone] / len(seeds), len(seeds))])
        got, inv = np.unique(to, return_inverse=True)
        r[got] += np.bincount(inv, weights=share, minlength=len(got))
        new = got[~seen[got]]
        seen[new] = True
        touched.append(new)
        frontier = got[r[got] >= eps * np.maximum(degree[got], 1)]
    nodes = np.sort(np.concatenate(touched))
    return Pushed(nodes, p[nodes] + alpha * r[nodes], p[nodes] > 0)  # a push leaves p > 0


def within_hops(*, indptr: np.ndarray, nbr: np.ndarray, seeds: np.ndarray, expanded: np.ndarray,
                hops: int) -> np.ndarray:
    """Mask (one bool per node) of the nodes within ``hops`` edges of a seed along paths whose inner nodes are
    all ``expanded`` (node indices): a breadth-first walk that leaves only through expanded nodes, so it reads
    no row the push did not read."""
    n = len(indptr) - 1
    seeds = arrays.unique(np.asarray(seeds, dtype=np.int64))
    can = np.zeros(n, dtype=bool)
    can[expanded] = True
    seen = np.zeros(n, dtype=bool)
    seen[seeds] = True
    frontier = seeds
    for level in range(hops):
        rows, _ = _rows(indptr, frontier[can[frontier]])
        reached = nbr[rows]
        reached = reached[~seen[reached]]
        seen[reached] = True
        if level + 1 == hops or not len(reached):
            break
        frontier = arrays.unique(reached)
    return seen


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
    seeds = arrays.unique(np.asarray(seeds, dtype=np.int64))
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
    seeds = arrays.unique(np.asarray(seeds, dtype=np.int64))
    scores = ranking.rounded(scores, ranking.MASS_DECIMALS)
    positive = scores > 0
    positive[seeds[seeds < len(scores)]] = False
    cand = np.flatnonzero(positive)
    room = max(k - len(seeds), 0)
    if len(cand) > room:  # only the scores >= the room-th best can be kept (ties included): order those alone
        best = np.partition(scores[cand], len(cand) - room)[len(cand) - room] if room else np.inf
        cand = cand[scores[cand] >= best]
    order = cand[ranking.order(scores[cand], ids=cand, decimals=ranking.MASS_DECIMALS)]
    return np.concatenate([seeds, order])[: max(k, len(seeds))].astype(np.int64)


def _extracted(graph: LocalGraph, nodes: np.ndarray, scores: np.ndarray) -> Extracted:
    mask = np.zeros(graph.n, dtype=bool)
    mask[nodes] = True
    return Extracted(nodes=nodes, scores=scores, edges=graph.induced(mask))


@EXTRACTORS.register("ppr", params=PPRParams, version="3")
def extract_ppr(*, graph: LocalGraph, seeds: np.ndarray, hops: int, params: PPRParams, ctx: Context) -> Extracted:
    """Top-``max_ent`` nodes of ``graph`` by personalized PageRank from the seeds, and the edges among them
    (``push_ppr`` on the graph's adjacency, or ``local_ppr``, by ``method``). The retriever first offers the
    whole KG to ``extract_ppr.from_kg`` (``extract_from_kg``); this runs on the neighbourhood otherwise.

    References
    ----------
    Cao et al., LEGO-GraphRAG (2024), section 4.1 "PPR" and Table 7 (max_ent = 2000, restart_prob = 0.8);
    Andersen, Chung & Lang (2006), "Local graph partitioning using PageRank vectors".
    """
    if params.method == "power":
        scores = local_ppr(graph=graph, seeds=seeds, damping=params.damping, tol=params.tol,
                           max_iter=params.max_iter)
        nodes = top_nodes(scores, seeds, params.max_ent)
        return _extracted(graph, nodes, scores[nodes])
    ids, est, _ = push_ppr(indptr=graph.indptr, nbr=graph.nbr, degree=graph.degree, seeds=seeds,
                           damping=params.damping, eps=params.eps)
    full = np.zeros(graph.n)
    full[ids] = est
    nodes = top_nodes(full, seeds, params.max_ent)
    return _extracted(graph, nodes, full[nodes])


def extract_from_kg(*, kg: Any, seeds: np.ndarray, hops: int, params: PPRParams,
                    graph_id: str | None = None) -> tuple[LocalGraph, Extracted] | None:
    """``method: push`` on the whole KG: the top-``max_ent`` entities by ``push_ppr`` from ``seeds``
    (global ids) over ``kg.question_adjacency`` (what a question over ``graph_id`` sees), as a ``LocalGraph``
    of those entities and every edge among them, and its ``Extracted`` (all of it, best first). None when
    ``method`` is ``power`` or the store gives no adjacency (the retriever then walks the k-hop
    neighbourhood and calls ``extract_ppr``).

    The scores are whole-KG PPR (as in the paper) whatever ``within_hops``; with it, only entities within
    ``hops`` of a topic through expanded nodes (``within_hops``) are candidates, as in the neighbourhood
    methods. An entity reachable within ``hops`` only through an unexpanded node (one whose residual stayed
    below ``eps`` times its degree, typically a hub) is left out: its PPR is then small anyway.
    """
    adjacency = kg.question_adjacency(graph_id=graph_id) if params.method == "push" else None
    if adjacency is None:
        return None
    indptr, nbr, eid = adjacency
    seeds = arrays.unique(np.asarray(seeds, dtype=np.int64))
    degree = indptr[1:] - indptr[:-1]
    ids, est, expanded = push_ppr(indptr=indptr, nbr=nbr, degree=degree, seeds=seeds, damping=params.damping,
                                  eps=params.eps)
    if params.within_hops:  # candidates: within hops (scores of the others set to 0, which top_nodes drops)
        near = within_hops(indptr=indptr, nbr=nbr, seeds=seeds, expanded=ids[expanded], hops=hops)
        est = np.where(near[ids], est, 0.0)
    best = top_nodes(est, np.searchsorted(ids, seeds), params.max_ent)
    keep = np.sort(ids[best])
    n = len(indptr) - 1
    inside = np.zeros(n, dtype=bool)
    inside[keep] = True
    local = np.empty(n, dtype=np.int64)  # local index of each kept entity (other entries never read)
    local[keep] = np.arange(len(keep))
    rows, lens = _rows(indptr, keep)
    own = np.repeat(keep, lens)
    other = nbr[rows]
    # every edge with both ends kept, once: from its lower end's row (a self-loop appears twice in its row)
    edges = np.sort(eid[rows[inside[other] & (other >= own)]])
    edges = edges[np.concatenate([[True], edges[1:] != edges[:-1]])] if len(edges) else edges
    # LocalGraph.build's graph, with the degrees the question sees (the adjacency's row lengths)
    graph = LocalGraph(keep, edges, local[kg.heads[edges]], local[kg.tails[edges]],
                       np.asarray(kg.relations[edges], dtype=np.int64), degree[keep])
    return graph, Extracted(nodes=local[ids[best]], scores=est[best], edges=np.arange(len(edges), dtype=np.int64))


extract_ppr.from_kg = extract_from_kg  # type: ignore[attr-defined]
