"""Per-shard work of the retrieve and generate flows: plain functions, no Prefect, no file output."""

from __future__ import annotations

import json
import time
from typing import Sequence

import numpy as np

from kgrag import schema as S
from kgrag.embed import EmbeddingIndex
from kgrag.evaluate import retrieval_recall
from kgrag.generate import context_text
from kgrag.params import GenerateParams, ReasonParams, RetrieveParams
from kgrag.reasoners import Sampling
from kgrag.registry import RETRIEVERS, TEXTUALIZERS
from kgrag.types import Question, Subgraph
from kgrag.kgview import KGView

MODULE_KINDS = ('reasoner', 'retriever', 'textualizer')  # looked up by name (kgrag.depgraph)


def retrieve_one(
    *, question: Question, query_vec: np.ndarray, kg: KGView, index: EmbeddingIndex, params: RetrieveParams
) -> tuple[Subgraph, float]:
    """Run the selected retriever on one question; returns the subgraph and its wall time in ms."""
    entry = RETRIEVERS.get(params.method)
    t0 = time.perf_counter()
    sub = entry.impl(
        question=question, query_vec=query_vec, kg=kg, index=index, params=params.module_params(),
        hops=params.hops, max_edges=params.max_neighbourhood_edges,
    )
    return sub, (time.perf_counter() - t0) * 1000


def retrieve_rows(
    *, questions: Sequence[Question], kg: KGView, index: EmbeddingIndex, params: RetrieveParams
) -> list[dict]:
    """Retrieved rows (``schema.RETRIEVED``) of a shard of questions; questions are embedded in one batch."""
    vecs = index.encode([q.text for q in questions])
    rows = []
    for q, v in zip(questions, vecs):
        sub, ms = retrieve_one(question=q, query_vec=v, kg=kg, index=index, params=params)
        named = kg.named_triples(sub.heads, sub.relations, sub.tails)
        rows.append(
            {
                S.QUESTION_ID: q.question_id,
                S.MODULE: params.method,
                S.TRIPLE_HEADS: sub.heads.tolist(),
                S.TRIPLE_RELATIONS: sub.relations.tolist(),
                S.TRIPLE_TAILS: sub.tails.tolist(),
                S.NODE_IDS: sub.node_ids.tolist(),
                S.CONTEXT_TRIPLES: TEXTUALIZERS.get("triples").impl(named),
                S.CONTEXT_CSV: TEXTUALIZERS.get("csv").impl(named),
                S.NEIGHBOURHOOD_NODES: sub.neighbourhood_nodes,
                S.NEIGHBOURHOOD_EDGES: sub.neighbourhood_edges,
                S.RETRIEVE_MS: ms,
                S.TRACE: json.dumps(
                    {**sub.trace, "answer_recall": retrieval_recall(answer_ids=q.answer_ids, node_ids=sub.node_ids.tolist())},
                    default=str,
                ),
            }
        )
    return rows


def contexts_for(rows: Sequence[dict], *, kg: KGView, params: GenerateParams) -> list[str]:
    """Prompt context of each retrieved row: the first ``max_context_triples`` triples, textualized."""
    out = []
    for r in rows:
        named = kg.named_triples(
            np.asarray(r[S.TRIPLE_HEADS], dtype=np.int64),
            np.asarray(r[S.TRIPLE_RELATIONS], dtype=np.int64),
            np.asarray(r[S.TRIPLE_TAILS], dtype=np.int64),
        )
        out.append(context_text(named, form=params.context, max_triples=params.max_context_triples))
    return out


def reason_rows(
    *, questions: Sequence[Question], contexts: Sequence[str], client, reason: ReasonParams, sampling: Sampling,
    kg: KGView | None = None, index: EmbeddingIndex | None = None,
) -> list[dict]:
    """Generations rows of a shard: the selected reasoner on every question, all advanced together (one
    backend batch per step)."""
    from kgrag.reasoners import REASONERS, ReasonInput, rows_of, run_batched

    entry = REASONERS.get(reason.method)
    params = reason.module_params()
    jobs = [entry.impl(inp=ReasonInput(question=q, context=c, kg=kg, index=index, sampling=sampling,
                                     constrain_answer=reason.constrain_answer), params=params)
            for q, c in zip(questions, contexts)]
    t0 = time.perf_counter()
    results = run_batched(jobs=jobs, client=client, max_batch=reason.max_batch)
    per_q_ms = (time.perf_counter() - t0) * 1000 / max(len(questions), 1)
    return rows_of(question_ids=[q.question_id for q in questions], results=results, reasoner=reason.method,
                   separator=sampling.separator, seed=sampling.seed, per_q_ms=per_q_ms)
