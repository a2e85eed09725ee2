"""``beam``: iterative path filtering, a beam search whose extensions a relevance scorer ranks (ToG-style)."""

from __future__ import annotations

import numpy as np
from pydantic import Field

from kgrag.config.base import Strict
from kgrag.retrieval.lego.filter_complete import extend
from kgrag import ranking
from kgrag.retrieval.lego.registries import FILTERS
from kgrag.retrieval.lego.spec import ScorerSpec
from kgrag.retrieval.lego.types import Context, Extracted, LocalGraph, Path, path_text


class BeamParams(Strict):
    """Params of the ``beam`` filter (defaults: the paper's Table 7)."""

    beam_width: int = Field(128, ge=1, description="paths kept after each expansion step")
    max_hops: int | None = Field(None, ge=1, description="expansion steps; None = the retrieval hops")
    scorer: ScorerSpec = Field(default_factory=lambda: ScorerSpec(name="st"), description="scores a path's text against the question")


@FILTERS.register("beam", params=BeamParams, version="2")
def filter_beam(
    *, graph: LocalGraph, extracted: Extracted, seeds: np.ndarray, hops: int, params: BeamParams, ctx: Context
) -> list[Path]:
    """Beam search from the topics: extend every beam path by one edge, score the extended paths' text,
    keep the ``beam_width`` best; repeat ``max_hops`` times. Returns the paths kept at every step, best first.

    References
    ----------
    Cao et al., LEGO-GraphRAG (2024), section 4.1 "... & Iterative Path-Filtering" and Table 7
    (beam_width = 128); Sun et al., Think-on-Graph (ICLR 2024).
    """
    score_fn, score_params = params.scorer.module()
    sub = graph.restrict(extracted.edges)
    beams = [Path((int(s),), ()) for s in sorted(set(np.asarray(seeds).tolist()))]
    kept: list[tuple[float, int, Path]] = []
    for _ in range(params.max_hops or max(hops, 1)):
        cands = [q for p in beams for q in extend(sub, p)]
        if not cands:
            break
        texts = [path_text(q, graph, ctx.kg) for q in cands]
        scores = np.asarray(score_fn(query=ctx.question, docs=texts, params=score_params, ctx=ctx), dtype=np.float64)
        order = ranking.top_k(scores, params.beam_width)
        scores = ranking.rounded(scores)
        beams = [cands[i] for i in order]
        kept.extend((float(scores[i]), len(kept) + j, cands[i]) for j, i in enumerate(order))
    kept.sort(key=lambda t: (-t[0], t[1]))
    return [p for _, _, p in kept]
