"""Semantic pruning after extraction (PPR & BM25/ST/Reranker/LLM): keep the ``window`` best-scored edges."""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from kgrag.lego.spec import ScorerSpec
from kgrag.lego.types import Context, Extracted, LocalGraph, edge_text


class PruneParams(BaseModel):
    """Scorer applied to the extracted subgraph's edges (defaults: the paper's Table 7)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    scorer: ScorerSpec = Field(default_factory=lambda: ScorerSpec(name="st"), description="scores an edge's 'head relation tail' text")
    window: int = Field(24, ge=1, description="edges kept (the paper's window = 24)")
    candidates: int = Field(
        2000, ge=1,
        description="edges scored at most: those whose worse-ranked end ranks best in the extraction "
        "(bounds the scorer's cost on large subgraphs)",
    )


def prune_extracted(*, graph: LocalGraph, extracted: Extracted, seeds: np.ndarray, params: PruneParams,
                    ctx: Context) -> Extracted:
    """The extracted subgraph cut to its ``window`` most relevant edges, their ends and the seeds.

    Nodes keep their extraction order; an edge's text is ``head relation tail``.

    References
    ----------
    Cao et al., LEGO-GraphRAG (2024), section 4.1 "BM25, ST, Reranker, ... with PPR" (g'_q = nodes and
    edges of g_q scoring above a threshold; here the top ``window``, Table 7).
    """
    edges = extracted.edges
    rank = extracted.rank(graph.n)
    if len(edges) > params.candidates:
        worse = np.maximum(rank[graph.src[edges]], rank[graph.dst[edges]])
        edges = edges[np.lexsort((edges, worse))[: params.candidates]]
    fn, sp = params.scorer.module()
    scores = np.asarray(fn(query=ctx.question, docs=[edge_text(int(e), graph, ctx.kg) for e in edges],
                           params=sp, ctx=ctx), dtype=np.float64)
    kept = np.sort(edges[np.argsort(-scores, kind="stable")[: params.window]])
    mask = np.zeros(graph.n, dtype=bool)
    mask[np.asarray(seeds, dtype=np.int64)] = True
    mask[graph.src[kept]] = True
    mask[graph.dst[kept]] = True
    keep_nodes = mask[extracted.nodes]
    return Extracted(nodes=extracted.nodes[keep_nodes], scores=extracted.scores[keep_nodes], edges=kept)
