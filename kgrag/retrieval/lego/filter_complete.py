"""``complete``: every simple path from a topic up to a hop bound, explored level by level."""

from __future__ import annotations

import numpy as np
from pydantic import Field

from kgrag.config.base import Strict
from kgrag.retrieval.lego.registries import FILTERS
from kgrag.retrieval.lego.types import Context, Extracted, LocalGraph, Path


class CompleteParams(Strict):
    """Params of the ``complete`` filter."""

    max_hops: int | None = Field(None, ge=1, description="longest path; None = the retrieval hops")
    max_paths: int = Field(10_000, ge=1, description="paths kept in all; each level's paths go best-ranked end first")


def extend(graph: LocalGraph, path: Path) -> list[Path]:
    """Simple one-edge extensions of ``path``, in adjacency order."""
    nbr, eid = graph.incident(path.nodes[-1])
    seen = set(path.nodes)
    return [Path(path.nodes + (v,), path.edges + (e,)) for v, e in zip(nbr.tolist(), eid.tolist()) if v not in seen]


@FILTERS.register("complete", params=CompleteParams, version="1")
def filter_complete(
    *, graph: LocalGraph, extracted: Extracted, seeds: np.ndarray, hops: int, params: CompleteParams, ctx: Context
) -> list[Path]:
    """All simple paths of 1..``max_hops`` edges from each topic within the extracted subgraph, shortest first.

    Within a level, paths whose end node ranks higher in the extraction come first; ``max_paths`` cuts the
    enumeration there.

    References
    ----------
    Cao et al., LEGO-GraphRAG (2024), section 4.1 "Complete Path-Filtering" (level-by-level BFS of
    non-repeating paths).
    """
    sub = graph.restrict(extracted.edges)
    rank = extracted.rank(graph.n)
    limit = params.max_hops or max(hops, 1)
    level = [Path((int(s),), ()) for s in sorted(set(np.asarray(seeds).tolist()))]
    out: list[Path] = []
    for _ in range(limit):
        nxt = [q for p in level for q in extend(sub, p)]
        nxt.sort(key=lambda q: rank[q.nodes[-1]])  # stable: ties keep adjacency order
        room = params.max_paths - len(out)
        out.extend(nxt[:room])
        if len(nxt) >= room or not nxt:
            break
        level = nxt
    return out
