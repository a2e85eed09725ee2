"""``none``: no retrieval (the LLM answers from the question alone)."""

from __future__ import annotations

from kgrag.registry import RETRIEVERS
from kgrag.types import Subgraph


@RETRIEVERS.register("none")
def retrieve_none(*, question, query_vec, kg, index, params, hops, max_edges) -> Subgraph:
    """No retrieval: an empty subgraph."""
    return Subgraph.empty(method="none")


retrieve_none.reads_neighbourhood = False  # hops / max_edges: not read, not in its cache key
