"""One question against the ingested KG with the current params: what ``kgrag ask`` prints and ``kgrag serve``
answers. :class:`Asker` loads the KG, the embedding index and the LLM client once; :meth:`Asker.ask` finds the
topic entities, retrieves the subgraph (``retrieve.method``), and runs the reasoner (``reason.method``) as the
generate stage does for one question.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kgrag import schema as S


class NotIngested(RuntimeError):
    """No ingested KG and index in the working directory."""


@dataclass
class Answer:
    """What one question got: topic entities (and how they were found), the retrieved subgraph, the
    reasoner's result and its LLM call records."""

    question: Any  # kgrag.types.Question
    how: str
    subgraph: Any  # the retriever's subgraph (heads, relations, tails, node_ids ids)
    named: list[tuple[str, str, str]]
    retrieve_ms: float
    result: Any  # kgrag.reasoning.reasoners.Reasoning
    records: list  # kgrag.llm.calls.CallRecord
    parsed: list[str]
    reasoner: str

    @property
    def failed(self) -> bool:
        """The reasoner got no answer because its last LLM call failed."""
        return not self.result.answer.strip() and bool(self.records) and self.records[-1].failed


class Asker:
    """One question at a time through the experiment of ``params`` (a ``kgrag.params.Params``), assembled by
    :class:`kgrag.experiment.Experiment` as the stages assemble it: the KG store ``retrieve.store`` chooses,
    the index, retriever, reasoner and LLM client of the working directory's ``data/validated`` and
    ``data/index``, loaded once."""

    def __init__(self, params) -> None:
        from kgrag import io
        from kgrag.kg.duckdb_io import ensure_duckdb
        from kgrag.experiment import Experiment, Files

        ensure_duckdb(io.VALIDATED / "kg.duckdb")  # built from data/validated/*.parquet when missing or stale
        files = Files.of()
        if not Path(files.db).exists() or not files.has_index():
            raise NotIngested("no ingested KG and index; run `make repro` (or `dvc repro index`) first")
        self.params = params
        self.experiment = Experiment(params, files)
        self.kg, self.index, self.client = self.experiment.kg, self.experiment.index, self.experiment.client

    def ask(self, text: str, question_id: str = "ask") -> Answer:
        """Answer ``text``: topic entities named in it (else the nearest entity name by embedding), the
        subgraph of ``retrieve.method``, the reasoner ``reason.method`` on its textualized context."""
        from kgrag.reasoning.generate import contexts_for, proposals_for, reason_job
        from kgrag.reasoning.reasoners import answers_of, run_one
        from kgrag.retrieval.run import retrieve_question
        from kgrag.types import Question

        exp, p, kg = self.experiment, self.params, self.kg
        qvec = self.index.encode([text])[0]
        topics = kg.find_entities(text)
        how = "named in the question"
        if not topics:
            ids, _ = self.index.search_entities(qvec, 1)
            topics, how = [int(i) for i in ids], "nearest entity name (embedding)"
        q = Question(question_id=question_id, text=text, topic_ids=tuple(topics))
        sub, ms = retrieve_question(exp, q, qvec)
        named = kg.named_triples(sub.heads, sub.relations, sub.tails)
        # the generate stage's context and proposals, from the same retrieved columns
        row = {S.TRIPLE_HEADS: sub.heads.tolist(), S.TRIPLE_RELATIONS: sub.relations.tolist(),
               S.TRIPLE_TAILS: sub.tails.tolist(), S.TRACE: sub.trace}
        (ctx,), (proposed,) = contexts_for([row], kg=kg, params=p.generate), proposals_for([row], kg=kg)
        res, recs = run_one(reason_job(exp, q, ctx, proposed), self.client)
        return Answer(question=q, how=how, subgraph=sub, named=named, retrieve_ms=ms, result=res, records=recs,
                      parsed=answers_of(res, p.evaluate.answer_separator), reasoner=p.reason.method)

    def view_data(self, ans: Answer):
        """The :class:`kgrag.reporting.graph_svg.QuestionData` of an answer (a generations row's fields, no gold)."""
        from kgrag.reasoning.reasoners import rows_of
        from kgrag.reporting.graph_svg import QuestionData, subgraph_from_ids

        kg = self.kg
        (row,) = rows_of(question_ids=[ans.question.question_id], results=[(ans.result, ans.records)],
                         reasoner=ans.reasoner, separator=self.params.evaluate.answer_separator,
                         seed=self.params.generate.seed, per_q_ms=0.0)
        row = {**row, "question": ans.question.text, "context_triples": len(ans.named),
               S.RETRIEVE_MS: round(ans.retrieve_ms, 1)}
        sub = subgraph_from_ids(
            heads=ans.subgraph.heads, relations=ans.subgraph.relations, tails=ans.subgraph.tails,
            node_ids=ans.subgraph.node_ids, entity_name=kg.names,
            relation_name=lambda ids: [str(x) for x in kg.relation_names[np.asarray(ids, dtype=np.int64)]])
        p = self.params
        note = (f"topic entities ({ans.how}): {', '.join(kg.names(np.array(ans.question.topic_ids)))}; retrieval "
                f"{p.retrieve.method}, reasoner {p.reason.method}, LLM {self.client.model_id}")
        return QuestionData(row=row, subgraph=sub, topic_ids=list(ans.question.topic_ids), note=note)
