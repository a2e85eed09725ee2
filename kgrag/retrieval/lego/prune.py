"""Semantic pruning after extraction (PPR & BM25/ST/Reranker/LLM): keep the ``window`` best-scored items, scored
at node, edge or triple granularity."""

from __future__ import annotations

import numpy as np
from typing import Literal

from pydantic import Field

from kgrag import arrays
from kgrag.config.base import Strict
from kgrag.retrieval.lego.spec import ScorerSpec
from kgrag import ranking
from kgrag.retrieval.lego.types import Context, Extracted, LocalGraph, edge_text, relation_text


class PruneParams(Strict):
    """Scorer applied to the extracted subgraph's edges (defaults: the paper's Table 7)."""

    scorer: ScorerSpec = Field(default_factory=lambda: ScorerSpec(name="st"), description="relevance scorer")
    granularity: Literal["triple", "edge", "node"] = Field(
        "triple",
        description="what is scored: triple = an edge's 'head relation tail' text; edge = its relation alone; "
        "node = an entity's name (the kept nodes keep the edges among them and to the seeds)",
    )
    window: int = Field(24, ge=1, description="items kept (the paper's window = 24)")
    candidates: int = Field(
        2000, ge=1,
        description="edges scored at most: those whose worse-ranked end ranks best in the extraction "
        "(bounds the scorer's cost on large subgraphs)",
    )


def prune_extracted(*, graph: LocalGraph, extracted: Extracted, seeds: np.ndarray, params: PruneParams,
                    ctx: Context) -> Extracted:
    """The extracted subgraph cut to its ``window`` most relevant items and the seeds.

    ``granularity``: ``triple`` scores an edge's ``head relation tail`` text, ``edge`` its relation, ``node``
    an entity name; kept edges bring their ends, kept nodes the edges among them. Nodes keep their
    extraction order.

    References
    ----------
    Cao et al., LEGO-GraphRAG (2024), section 4.1 "BM25, ST, Reranker, ... with PPR" (g'_q = nodes and
    edges of g_q scoring above a threshold; here the top ``window``, Table 7).
    """
    edges = extracted.edges
    rank = extracted.rank(graph.n)
    fn, sp = params.scorer.module()
    if params.granularity == "node":
        return _prune_nodes(graph=graph, extracted=extracted, seeds=seeds, params=params, ctx=ctx, fn=fn, sp=sp)
    if len(edges) > params.candidates:
        worse = np.maximum(rank[graph.src[edges]], rank[graph.dst[edges]])
        edges = edges[np.lexsort((edges, worse))[: params.candidates]]
    if params.granularity == "edge":  # score each distinct relation once, spread to its edges
        rels = graph.relations[edges]
        uniq = arrays.unique(rels)
        rs = np.asarray(fn(query=ctx.question, docs=[relation_text(ctx.kg.relation_names[r]) for r in uniq],
                           params=sp, ctx=ctx), dtype=np.float64)
        scores = rs[np.searchsorted(uniq, rels)] if len(uniq) else np.zeros(0)
    else:
        scores = np.asarray(fn(query=ctx.question, docs=[edge_text(int(e), graph, ctx.kg) for e in edges],
                               params=sp, ctx=ctx), dtype=np.float64)
    kept = np.sort(edges[ranking.top_k(scores, params.window, ids=edges)])
    mask = np.zeros(graph.n, dtype=bool)
    mask[np.asarray(seeds, dtype=np.int64)] = True
    mask[graph.src[kept]] = True
    mask[graph.dst[kept]] = True
    keep_nodes = mask[extracted.nodes]
    return Extracted(nodes=extracted.nodes[keep_nodes], scores=extracted.scores[keep_nodes], edges=kept)


def _prune_nodes(*, graph: LocalGraph, extracted: Extracted, seeds: np.ndarray, params: PruneParams, ctx: Context,
                 fn, sp) -> Extracted:
    """Node granularity: the ``window`` best-scored extracted nodes (names scored) plus the seeds, and the
    extracted edges among them."""
    seeds = np.asarray(seeds, dtype=np.int64)
    cand = extracted.nodes[~np.isin(extracted.nodes, seeds)][: params.candidates]
    names = [str(ctx.kg.entity_names[graph.nodes[v]]) for v in cand]
    scores = np.asarray(fn(query=ctx.question, docs=names, params=sp, ctx=ctx), dtype=np.float64)
    keep = cand[ranking.top_k(scores, params.window, ids=graph.nodes[cand])] if len(cand) else cand
    mask = np.zeros(graph.n, dtype=bool)
    mask[seeds] = True
    mask[keep] = True
    e = extracted.edges
    kept = np.sort(e[mask[graph.src[e]] & mask[graph.dst[e]]])
    in_nodes = mask[extracted.nodes]
    return Extracted(nodes=extracted.nodes[in_nodes], scores=extracted.scores[in_nodes], edges=kept)
