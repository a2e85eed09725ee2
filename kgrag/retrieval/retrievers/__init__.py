"""Retrieval modules: one file each, registered in ``kgrag.registry.RETRIEVERS``.

Every retriever is a function with this keyword-only signature (the ``Retriever`` protocol)::

    retrieve(*, question, query_vec, kg, index, params, hops, max_edges) -> Subgraph

``hops`` and ``max_edges`` are ``retrieve.hops`` and ``retrieve.max_neighbourhood_edges``. A retriever that does
not read them says so with an attribute ``reads_neighbourhood`` (a bool, or a function of its params): they then
leave its cache key (:func:`reads_neighbourhood`, ``kgrag.retrieval.run.key_hash``), so changing them re-uses its
cached shards.
"""

from typing import Protocol

import numpy as np
from pydantic import BaseModel

from kgrag.types import Question, Subgraph
from kgrag.kg.kgview import KGView


class Retriever(Protocol):
    """Question + KG view + embedding index → subgraph. Must not mutate its inputs."""

    def __call__(
        self,
        *,
        question: Question,
        query_vec: np.ndarray,
        kg: KGView,
        index: "object",
        params: BaseModel,
        hops: int,
        max_edges: int,
    ) -> Subgraph: ...


def reads_neighbourhood(impl, params: BaseModel) -> bool:
    """Whether retriever ``impl`` with ``params`` reads ``hops`` / ``max_edges``: its ``reads_neighbourhood``
    attribute (a bool, or a function of its params), True where it has none."""
    rule = getattr(impl, "reads_neighbourhood", True)
    return bool(rule(params) if callable(rule) else rule)

