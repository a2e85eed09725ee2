"""Per-shard work of the retrieve flow: plain functions, no Prefect, no file output (the generate flow's is
``kgrag.reasoning.generate``)."""

from __future__ import annotations

import json
import time
from typing import Sequence

import numpy as np

from kgrag import schema as S
from kgrag.index.embed import EmbeddingIndex
from kgrag.config.base import section_hash
from kgrag.retrieval.params import RetrieveParams
from kgrag.registry import RETRIEVERS, TEXTUALIZERS
from kgrag.types import Question, Subgraph, retrieval_recall
from kgrag.kg.kgview import KGView


#: the ``retrieve`` keys every retriever is handed (as ``hops=`` and ``max_edges=``)
NEIGHBOURHOOD_KEYS = ("hops", "max_neighbourhood_edges")


#: the ``retrieve`` keys that only choose the store (``kgrag.kg.store.choose_store``): the store chosen stands for
#: them in the key (``store``, which the retrieve stage resolves from ``auto`` before the shards are keyed)
STORE_CHOICE_KEYS = ("memory_budget_gb",)


def key_hash(params: RetrieveParams) -> str:
    """The hash of the ``retrieve`` section in a retrieve shard's cache key: without ``NEIGHBOURHOOD_KEYS`` for a
    retriever that does not read them (``kgrag.retrieval.retrievers.reads_neighbourhood``: ``none``, ``relpath``
    with ``fallback: null``), so that changing them re-uses its shards; never with ``STORE_CHOICE_KEYS`` (the
    memory budget changes which store, not what it returns)."""
    from kgrag.retrieval.retrievers import reads_neighbourhood

    reads = reads_neighbourhood(RETRIEVERS.get(params.method).impl, params.module_params())
    return section_hash(params, drop=STORE_CHOICE_KEYS + (() if reads else NEIGHBOURHOOD_KEYS))


def prepare_store(params: RetrieveParams, db, cache_dir) -> None:
    """Build, once and before any shard task starts, what every shard task of the DuckDB store (``params.store``,
    resolved) reads: the sidecar, and relpath's edge groups when it samples hubs (``hub_edges``). Without it the first
    shard task of each process built them, a Dask run's workers on a cold store all at once (the groups: a sort of 2
    x triples rows, 22 s at 100M triples, paid once per worker). Nothing for the in-memory store."""
    if params.store != "duckdb":
        return
    from kgrag.kg.duckdb_io import ensure_duckdb
    from kgrag.kg.store_duckdb import ensure_adjacency, ensure_edge_groups

    ensure_adjacency(ensure_duckdb(db), cache_dir)
    if params.method == "relpath" and getattr(params.module_params(), "hub_edges", None) is not None:
        ensure_edge_groups(db, cache_dir)


def retrieve_one(
    *, question: Question, query_vec: np.ndarray, kg: KGView, index: EmbeddingIndex, params: RetrieveParams
) -> tuple[Subgraph, float]:
    """Run the selected retriever on one question; returns the subgraph and its wall time in ms."""
    return _retrieve(RETRIEVERS.get(params.method), question=question, query_vec=query_vec, kg=kg, index=index,
                     params=params)


def _retrieve(entry, *, question: Question, query_vec: np.ndarray, kg: KGView, index: EmbeddingIndex,
              params: RetrieveParams) -> tuple[Subgraph, float]:
    t0 = time.perf_counter()
    sub = entry.impl(
        question=question, query_vec=query_vec, kg=kg, index=index, params=params.module_params(),
        hops=params.hops, max_edges=params.max_neighbourhood_edges,
    )
    return sub, (time.perf_counter() - t0) * 1000


def retrieve_rows(
    *, questions: Sequence[Question], kg: KGView, index: EmbeddingIndex, params: RetrieveParams
) -> list[dict]:
    """Retrieved rows of a shard of questions (``schema.RETRIEVED`` and the run-record columns of
    ``schema.RETRIEVE_TIMINGS``: ``retrieve_ms``, ``stage_ms``); questions are embedded in one batch."""
    vecs = index.encode([q.text for q in questions])
    entry = RETRIEVERS.get(params.method)  # looked up once for the shard
    triples_text, csv_text = TEXTUALIZERS.get("triples").impl, TEXTUALIZERS.get("csv").impl
    rows = []
    for q, v in zip(questions, vecs):
        sub, ms = _retrieve(entry, question=q, query_vec=v, kg=kg, index=index, params=params)
        named = kg.named_triples(sub.heads, sub.relations, sub.tails)
        rows.append(
            {
                S.QUESTION_ID: q.question_id,
                S.MODULE: params.method,
                S.TRIPLE_HEADS: sub.heads.tolist(),
                S.TRIPLE_RELATIONS: sub.relations.tolist(),
                S.TRIPLE_TAILS: sub.tails.tolist(),
                S.NODE_IDS: sub.node_ids.tolist(),
                S.CONTEXT_TRIPLES: triples_text(named),
                S.CONTEXT_CSV: csv_text(named),
                S.NEIGHBOURHOOD_NODES: sub.neighbourhood_nodes,
                S.NEIGHBOURHOOD_EDGES: sub.neighbourhood_edges,
                S.RETRIEVE_MS: ms,
                S.STAGE_MS: list(sub.stage_ms) if sub.stage_ms else None,
                S.TRACE: json.dumps(
                    {**sub.trace, "answer_recall": retrieval_recall(answer_ids=q.answer_ids, node_ids=sub.node_ids.tolist())},
                    default=str,
                ),
            }
        )
    return rows


def retrieve_with(exp, questions: Sequence[Question]) -> list[dict]:
    """:func:`retrieve_rows` with the parts of an experiment (``kgrag.experiment.Experiment``: its KG store,
    index and ``retrieve`` section)."""
    if exp.index is None:
        where = exp.files.index or "the experiment's files (Files.index is None)"
        raise FileNotFoundError(f"no embedding index in {where} (the index stage writes its meta.json and "
                                "relations.parquet): run `dvc repro index`")
    return retrieve_rows(questions=questions, kg=exp.kg, index=exp.index, params=exp.params.retrieve)


def retrieve_question(exp, question: Question, query_vec: np.ndarray | None = None) -> tuple[Subgraph, float]:
    """:func:`retrieve_one` with the parts of an experiment; the question is embedded when no vector is given."""
    if query_vec is None:
        query_vec = exp.index.encode([question.text])[0]
    return retrieve_one(question=question, query_vec=query_vec, kg=exp.kg, index=exp.index,
                        params=exp.params.retrieve)
