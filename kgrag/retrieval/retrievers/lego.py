"""``lego``: LEGO-GraphRAG retrieval, subgraph extraction → (semantic pruning) → path filtering → path refinement.

An extractor whose function has a ``from_kg`` attribute (``ppr`` with ``method: push``) is first offered
the whole KG (the question's own graph where it has one): it returns its own local graph (the extracted
entities and the edges among them) and no neighbourhood is walked, as in the paper, whose PPR runs over the
whole KG; the neighbourhood cap and ``relation_priority`` then do not apply. Otherwise (and where ``from_kg``
returns None: ``method: power``) the stages run on the topics' k-hop neighbourhood, and past
``max_neighbourhood_edges`` that neighbourhood's farthest hop is cut keeping the most question-like relations
first (``relation_priority``; false = cut in edge order; a cap at least the neighbourhood's size = no cut).
Scores are rounded and ties broken by id (``kgrag.ranking``).

Each stage is a module of a ``kgrag.retrieval.lego`` sub-registry chosen by name in params; ``preset`` names one of
the paper's Table 4 instances (``kgrag/retrieval/lego/presets.py``) and explicit stage keys override it.

Each stage's wall time (``trace_ms``) goes to ``Subgraph.stage_ms``, never into the trace: the trace is part
of the retrieve stage's DVC output, the times are run records (``data/timings/retrieve/``, ``kgrag.timings``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from kgrag.types import retrieval_recall
from kgrag.config.yaml_doc import AFTER_LAST, Example
from kgrag.retrieval.lego.extract_ppr import PPRParams
from kgrag.retrieval.lego.presets import PRESETS
from kgrag.retrieval.lego.prune import PruneParams, prune_extracted
from kgrag.retrieval.lego.spec import ExtractorSpec, FilterSpec, RefinerSpec
from kgrag.retrieval.lego.types import Context, LocalGraph, Path, path_text
from kgrag.llm.clients import LLMSettings, llm_client
from kgrag.registry import RETRIEVERS
from kgrag.types import Subgraph
from kgrag.kg.kgview import KGView


def _default(stage: str) -> Any:
    return PRESETS["lego-00"][stage]


class LegoParams(BaseModel):
    """Params of the ``lego`` retriever: a preset and/or the stage choices (defaults: instance lego-00)."""

    model_config = ConfigDict(extra="forbid", frozen=True, json_schema_extra={"yaml_notes": {AFTER_LAST: (
        # params.yaml's commented-out example after the section's keys, its values ppr's defaults
        Example("extract", {"name": "ppr", "params": PPRParams().model_dump()},
                "ppr's defaults (commented: an extract key here overrides every preset's extractor); method push = "
                "forward push on the whole KG (eps: each score is below the exact PPR by < eps * degree; "
                "within_hops: keep entities within `hops` only), power = power iteration on the k-hop "
                "neighbourhood"),)}})
    preset: str | None = Field(None, description="a Table 4 instance, lego-00 ... lego-20; stage keys (extract, prune, "
                                                 "filter, refine, llm) added here override the preset's")
    extract: ExtractorSpec = Field(default_factory=lambda: ExtractorSpec(**_default("extract")),
                                   description="subgraph extractor (ppr, rwr, ego) and its params")
    prune: PruneParams | None = Field(None, description="semantic scorer after extraction; None = no pruning")
    filter: FilterSpec = Field(default_factory=lambda: FilterSpec(**_default("filter")),
                               description="path filter (shortest, complete, beam) and its params")
    refine: RefinerSpec = Field(default_factory=lambda: RefinerSpec(**_default("refine")),
                                description="path refiner (random, scored, llm) and its params")
    llm: LLMSettings = Field(default_factory=LLMSettings, description="LLM of the LLM-based stages")
    relation_priority: bool = Field(
        True,
        description="a neighbourhood over max_neighbourhood_edges keeps the farthest hop's edges of the most "
        "question-like relations first (kgrag); false = in edge order. The paper extracts from the whole "
        "graph with no such cut: set false with a large max_neighbourhood_edges for its exact setting",
    )
    trace_nodes: bool = Field(True, description="record each stage's node ids in the trace (per-module metrics)")
    trace_ms: bool = Field(
        True,
        description="measure each stage's wall time (ms) for the Table 6 timings: a run record (column stage_ms "
        "of data/timings/retrieve/questions.parquet, per-module ms in reports/timings.json), never in the trace "
        "or retrieved.parquet",
    )

    @model_validator(mode="before")
    @classmethod
    def _apply_preset(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("preset") is not None:
            name = data["preset"]
            if name not in PRESETS:
                raise ValueError(f"unknown preset {name!r}; valid: {', '.join(PRESETS)}")
            return {**PRESETS[name], **data}
        return data


class PathTexts(Sequence):
    """The paths' texts, rendered on first access (a refiner that ignores text pays nothing)."""

    def __init__(self, paths: Sequence[Path], graph: LocalGraph, kg: KGView) -> None:
        self._paths, self._graph, self._kg = paths, graph, kg
        self._cache: dict[int, str] = {}

    def __len__(self) -> int:
        return len(self._paths)

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if i not in self._cache:
            self._cache[i] = path_text(self._paths[i], self._graph, self._kg)
        return self._cache[i]


def path_nodes_edges(paths: Sequence[Path], seeds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Local nodes (seeds, then path nodes) and edges (order of first appearance) of ``paths``."""
    nodes = dict.fromkeys(np.asarray(seeds).tolist())
    edges: dict[int, None] = {}
    for p in paths:
        nodes.update(dict.fromkeys(p.nodes))
        edges.update(dict.fromkeys(p.edges))
    return np.fromiter(nodes, dtype=np.int64, count=len(nodes)), np.fromiter(edges, dtype=np.int64, count=len(edges))


@RETRIEVERS.register("lego", params=LegoParams, version="4")
def retrieve_lego(*, question, query_vec, kg, index, params: LegoParams, hops, max_edges) -> Subgraph:
    """LEGO-GraphRAG retrieval: extract (from the whole KG when the extractor offers ``from_kg``, else from the
    topics' k-hop neighbourhood, within the question's own graph when it has one:
    ``KGStore.question_neighbourhood``), prune, filter paths, refine.

    The triples are those of the refined paths, best first; ``trace["stages"]`` holds, per stage, its
    module, node/edge/path counts, answer recall, the LLM replies an LLM stage could not use (``llm_unparsed``)
    and its fallbacks (``llm_fallbacks``) and (``trace_nodes``) node ids; (``trace_ms``) the wall time of each
    of those stages is ``Subgraph.stage_ms``, in the same order (a run record, not part of the trace).

    References
    ----------
    Cao et al., LEGO-GraphRAG (2024), sections 3-4 and Table 4.
    """
    topics = [t for t in question.topic_ids if 0 <= t < kg.num_entities]
    if not topics:
        return Subgraph.empty(method="lego", preset=params.preset, reason="no topic entity in the KG")
    stages: list[dict[str, Any]] = []
    stage_ms: list[float] = []  # run record: kept out of the trace (which the retrieve stage's output holds)

    def record(stage: str, module: str, t0: float, local_nodes: np.ndarray, **counts: int) -> None:
        ids = graph.nodes[local_nodes].tolist()
        info: dict[str, Any] = {"stage": stage, "module": module, "nodes": len(ids), **counts,
                                "answer_recall": retrieval_recall(answer_ids=question.answer_ids, node_ids=ids),
                                **ctx.take_counts()}  # llm_unparsed / llm_fallbacks of LLM stages
        if params.trace_ms:
            stage_ms.append((time.perf_counter() - t0) * 1000)
        if params.trace_nodes:
            info["node_ids"] = ids
        stages.append(info)

    ctx = Context(question=question.text, query_vec=query_vec, kg=kg, index=index,
                  topic_names=tuple(kg.names(topics)), llm=lambda: llm_client(params.llm))
    fn, p = params.extract.module()
    t0 = time.perf_counter()
    # an extractor that works on the whole KG by itself (ppr's push) returns its own graph, or None
    from_kg = getattr(fn, "from_kg", None)
    direct = (from_kg(kg=kg, seeds=np.asarray(topics), hops=hops, params=p, graph_id=question.graph_id)
              if from_kg else None)
    truncated = False
    if direct is not None:
        graph, extracted = direct
        seeds = graph.local(topics)
        t_extract, t0 = t0, time.perf_counter()  # no neighbourhood walked: its stage holds the extracted graph
        record("neighbourhood", params.extract.name, t0, np.arange(graph.n), edges=len(graph.edges))
    else:
        nb = kg.question_neighbourhood(topics, hops, max_edges, graph_id=question.graph_id,
                                       relation_priority=index.relation_vectors @ query_vec
                                       if params.relation_priority else None)
        truncated = nb.truncated
        graph = LocalGraph.build(kg=kg, nodes=nb.nodes, edges=nb.edges, graph_id=question.graph_id)
        seeds = graph.local(topics)
        record("neighbourhood", "kgstore", t0, np.arange(graph.n), edges=len(graph.edges))
        t_extract = time.perf_counter()
        extracted = fn(graph=graph, seeds=seeds, hops=hops, params=p, ctx=ctx)
    record("extract", params.extract.name, t_extract, extracted.nodes, edges=len(extracted.edges))
    if params.prune is not None:
        t0 = time.perf_counter()
        extracted = prune_extracted(graph=graph, extracted=extracted, seeds=seeds, params=params.prune, ctx=ctx)
        record("prune", params.prune.scorer.name, t0, extracted.nodes, edges=len(extracted.edges))

    t0 = time.perf_counter()
    fn, p = params.filter.module()
    paths = fn(graph=graph, extracted=extracted, seeds=seeds, hops=hops, params=p, ctx=ctx)
    nodes, _ = path_nodes_edges(paths, seeds)
    record("filter", params.filter.name, t0, nodes, paths=len(paths))

    t0 = time.perf_counter()
    fn, p = params.refine.module()
    keep = fn(paths=paths, texts=PathTexts(paths, graph, kg), params=p, ctx=ctx)
    final = [paths[int(i)] for i in keep]
    nodes, edges = path_nodes_edges(final, seeds)
    record("refine", params.refine.name, t0, nodes, paths=len(final))
    kg.names(graph.nodes[nodes])  # the names the path texts below need, in one look-up (one query on DuckKGStore)

    e = graph.edges[edges]
    return Subgraph(
        heads=kg.heads[e], relations=kg.relations[e], tails=kg.tails[e], node_ids=graph.nodes[nodes],
        neighbourhood_nodes=graph.n, neighbourhood_edges=len(graph.edges),
        trace={"method": "lego", "preset": params.preset, "truncated": truncated, "stages": stages,
               "paths": [path_text(q, graph, kg) for q in final[:10]]},
        stage_ms=tuple(stage_ms),
    )
