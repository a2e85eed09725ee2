"""Plain data types passed between modules."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

import numpy as np
import pyarrow as pa


@dataclass(frozen=True)
class MetricKey:
    """What a key of ``reports/metrics.json`` (or ``reports/timings.json``) means, declared by the metric (or run
    record) that writes it: ``label`` (short, for ``kgrag compare``'s columns), ``name`` (the report's row),
    ``better`` (1: higher is better, -1: lower, 0: neither) and ``fmt`` (a format spec for its value)."""

    label: str
    name: str
    better: int = 0
    fmt: str = ".3f"


@dataclass(frozen=True)
class KGTables:
    """What a loader produces: the four tables plus rows it could not parse.

    ``triples`` has the ``TRIPLES`` schema, or ``GRAPH_TRIPLES`` when some triples belong to a
    per-question graph; ``stats`` holds counts worth logging (self-loops, duplicates, graphs).
    """

    entities: pa.Table
    relations: pa.Table
    triples: pa.Table
    questions: pa.Table
    quarantine: pa.Table
    stats: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Question:
    """One question as retrieval and generation see it."""

    question_id: str
    text: str
    topic_ids: tuple[int, ...]
    answer_ids: tuple[int, ...] = ()
    answers: tuple[str, ...] = ()
    graph_id: str | None = None  # the question's own graph (``KGStore.graph_edges``); None = the global KG
    choices: tuple[str, ...] = ()  # the labels it is answered with (a label task); () = entity answers
    hops: int | None = None  # the question set's declared hop count (MetaQA k-hop files); None = not given


@dataclass(frozen=True)
class Subgraph:
    """A retrieved subgraph: triples (id arrays, best first), its nodes and a trace of how it was found.

    ``trace`` holds what the question, KG and params determine (it is written into the retrieve stage's DVC
    output); ``stage_ms``, the wall time of each ``trace["stages"]`` entry in order (multi-stage retrievers:
    LEGO), is a run record: the retrieve stage writes it to ``data/timings/retrieve/`` (``kgrag.timings``)."""

    heads: np.ndarray
    relations: np.ndarray
    tails: np.ndarray
    node_ids: np.ndarray
    neighbourhood_nodes: int = 0
    neighbourhood_edges: int = 0
    trace: dict[str, Any] = field(default_factory=dict)
    stage_ms: tuple[float, ...] = ()

    @staticmethod
    def empty(**trace: Any) -> "Subgraph":
        """A subgraph with nothing in it."""
        z = np.zeros(0, dtype=np.int64)
        return Subgraph(z, z, z, z, 0, 0, dict(trace))

    def __len__(self) -> int:
        return int(len(self.heads))


def retrieval_recall(*, answer_ids: Iterable[int], node_ids: Iterable[int]) -> float | None:
    """Share of gold answer entities present in the retrieved nodes; None without answer ids."""
    gold = set(answer_ids)
    if not gold:
        return None
    return len(gold & set(node_ids)) / len(gold)
