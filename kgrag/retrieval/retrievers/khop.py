"""``khop``: the whole k-hop neighbourhood, or a per-question graph whole (no selection at all)."""

from __future__ import annotations

import numpy as np
from pydantic import Field

from kgrag import arrays
from kgrag.config.base import Strict
from kgrag.registry import RETRIEVERS
from kgrag.types import Subgraph


class KHopParams(Strict):
    """Params of the ``khop`` retriever."""

    whole_graph: bool = Field(
        True,
        description="a question with its own graph (ExplaGraphs, SceneGraphs) gets that whole graph, whatever "
        "`hops` (G-Retriever gives its model the whole graph there: k = 0 retrieval); false = only its k-hop part. "
        "A global-KG question always gets the topics' k-hop neighbourhood",
    )


@RETRIEVERS.register("khop", params=KHopParams, version="1")
def retrieve_khop(*, question, query_vec, kg, index, params: KHopParams, hops, max_edges) -> Subgraph:
    """Every edge of the topics' ``hops``-hop neighbourhood (``KGStore.question_neighbourhood``, at most
    ``max_edges``, closest hop first), or of the question's own graph when ``whole_graph``.

    Edges come closest hop first, then by edge id; nothing is scored, so nothing depends on embeddings.

    References
    ----------
    He et al., G-Retriever (2024), section 5 / appendix: ExplaGraphs graphs are small and given whole;
    Cao et al., LEGO-GraphRAG (2024), Table 2 "Ego network" (the k-hop neighbourhood as the subgraph).
    """
    if question.graph_id is not None and params.whole_graph:
        eidx = np.asarray(kg.graph_edges(question.graph_id), dtype=np.int64)[:max_edges]
        truncated = len(kg.graph_edges(question.graph_id)) > max_edges
        nodes = arrays.unique(np.concatenate([kg.heads[eidx], kg.tails[eidx]])) if len(eidx) else np.zeros(0, np.int64)
        trace = {"method": "khop", "whole_graph": True, "truncated": bool(truncated)}
    else:
        topics = [t for t in question.topic_ids if 0 <= t < kg.num_entities]
        if not topics:
            return Subgraph.empty(method="khop", reason="no topic entity in the KG")
        nb = kg.question_neighbourhood(topics, hops, max_edges, graph_id=question.graph_id,
                                       relation_priority=index.relation_vectors @ query_vec)
        eidx, nodes = np.asarray(nb.edges, dtype=np.int64), np.asarray(nb.nodes, dtype=np.int64)
        trace = {"method": "khop", "whole_graph": False, "truncated": bool(nb.truncated)}
    return Subgraph(
        heads=kg.heads[eidx], relations=kg.relations[eidx], tails=kg.tails[eidx], node_ids=nodes,
        neighbourhood_nodes=len(nodes), neighbourhood_edges=len(eidx), trace=trace,
    )
