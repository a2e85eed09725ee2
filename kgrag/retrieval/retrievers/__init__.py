"""Retrieval modules: one file each, registered in ``kgrag.registry.RETRIEVERS``.

Every retriever is a function with this keyword-only signature (the ``Retriever`` protocol)::

    retrieve(*, question, query_vec, kg, index, params, hops, max_edges) -> Subgraph
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

