"""Reasoning modules: the protocol, the batched driver, and the row format of the generate stage.

A reasoner is a generator function: it *yields* the LLM requests of its next step (a list, possibly empty)
and receives their ``CallRecord``s back, until it *returns* a ``Reasoning``. Written this way, one reasoner
serves every execution mode: ``run_batched`` advances all questions of a shard together, sending the
prompts of every active question as one batch per step (vLLM batched generate, concurrent requests to an
OpenAI-compatible server, in turn for llama.cpp), and unit tests drive it with a scripted LLM.
"""

from __future__ import annotations

import json
import time
from collections.abc import Generator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from kgrag.llm.calls import CallRecord, LLMClient, LLMRequest
from kgrag.registry import REASONERS
from kgrag.types import Question
from kgrag.kg.kgview import KGView



@dataclass(frozen=True)
class Sampling:
    """Sampling settings of the generate section, passed to every reasoner."""

    temperature: float = 0.0
    top_p: float = 1.0
    max_tokens: int = 48
    seed: int = 0
    few_shot: bool = True
    separator: str = "|"


@dataclass(frozen=True)
class ReasonInput:
    """What a reasoner sees of one question."""

    question: Question
    context: str  # the retrieved subgraph as text ("" when retrieval is off)
    kg: KGView | None = None  # reasoners that walk the graph themselves
    index: Any = None  # EmbeddingIndex: their embedding scorers
    sampling: Sampling = Sampling()
    # ``reason.constrain_answer``: constrain the final answer to entity names of the retrieved context
    # (``kgrag.llm.constrain.context_entities``); reasoners that produce names may honour it
    constrain_answer: bool = False
    # answer entities the retriever proposed (relpath: the ends of its chosen relation sequences), best first;
    # empty = none (``kgrag.llm.constrain.answer_candidates``)
    proposed: tuple[str, ...] = ()


@dataclass
class Reasoning:
    """A reasoner's result: the answer text, how deep it went, whether it fell back, and its trace.

    ``answers``: the names a reasoner chose itself (``rank``: candidates it scored), best first; they are the
    question's parsed answers as they are, where None has the answer text parsed (:func:`answers_of`)."""

    answer: str
    depth: int = 0
    fallback: str | None = None  # e.g. "cot" when FastToG found no answer within D_max
    trace: dict[str, Any] = field(default_factory=dict)
    unparseable: int = 0  # LLM outputs no parser could read (each handled by a documented fallback)
    answers: tuple[str, ...] | None = None


def answers_of(res: Reasoning, separator: str) -> list[str]:
    """A result's answer names: those its reasoner chose (``Reasoning.answers``), else its text parsed
    (``kgrag.llm.prompts.parse_answers``, split on ``separator``)."""
    if res.answers is not None:
        return list(dict.fromkeys(res.answers))
    from kgrag.llm.prompts import parse_answers

    return parse_answers(res.answer, separator)


Step = list[LLMRequest]
ReasonGen = Generator[Step, list[CallRecord], Reasoning]


class Reasoner(Protocol):
    """``(inp, params) -> generator`` yielding request lists and returning a ``Reasoning``."""

    def __call__(self, *, inp: ReasonInput, params: Any) -> ReasonGen: ...


def text_of(rec: CallRecord) -> str:
    """The reply text of a call ("" when it failed after its retries)."""
    return "" if rec.failed else rec.reply.text


def run_batched(*, jobs: Sequence[ReasonGen], client: LLMClient, max_batch: int = 0,
                own_ms: list[float] | None = None) -> list[tuple[Reasoning, list[CallRecord]]]:
    """Advance every job step by step; each step's requests of all active jobs go to the client together
    (in chunks of ``max_batch`` when > 0). Returns each job's ``Reasoning`` and the calls it made, in order.
    ``own_ms``: filled with each job's own wall time (its steps between calls, the calls left out), so a
    question's cost is its own time plus its calls' latencies, not a share of the batch.
    """
    calls: list[list[CallRecord]] = [[] for _ in jobs]
    results: list[Reasoning | None] = [None] * len(jobs)
    own = [0.0] * len(jobs)
    pending: dict[int, Step] = {}
    for i, job in enumerate(jobs):
        t0 = time.perf_counter()
        try:
            pending[i] = list(next(job))
        except StopIteration as stop:
            results[i] = stop.value
        own[i] += (time.perf_counter() - t0) * 1000
    while pending:
        order = list(pending)
        flat = [r for i in order for r in pending[i]]
        size = max_batch if max_batch > 0 else max(1, len(flat))
        records: list[CallRecord] = []
        for s in range(0, len(flat), size):
            records.extend(client.generate(flat[s: s + size]))
        nxt: dict[int, Step] = {}
        pos = 0
        for i in order:
            mine = records[pos: pos + len(pending[i])]
            pos += len(pending[i])
            calls[i].extend(mine)
            t0 = time.perf_counter()
            try:
                nxt[i] = list(jobs[i].send(mine))
            except StopIteration as stop:
                results[i] = stop.value
            own[i] += (time.perf_counter() - t0) * 1000
        pending = nxt
    if own_ms is not None:
        own_ms[:] = own
    return [(r if r is not None else Reasoning(answer=""), c) for r, c in zip(results, calls)]


def run_one(job: ReasonGen, client: LLMClient) -> tuple[Reasoning, list[CallRecord]]:
    """One question alone (the sequential reference of the batching benchmark)."""
    return run_batched(jobs=[job], client=client)[0]


def rows_of(*, question_ids: Sequence[str], results: Sequence[tuple[Reasoning, list[CallRecord]]], reasoner: str,
            separator: str, seed: int, per_q_ms: float, own_ms: Sequence[float] | None = None) -> list[dict]:
    """Generations rows (``schema.GENERATIONS``): the answer, every call's cost, failure, trace and depth.

    A question *failed* when its reasoner got no answer because calls failed: its last call failed and
    the answer is empty. Every call is listed in the trace (key, tokens, error, reply text; the prompt is in
    the call cache under the key). How this run obtained each call (``CALL_CACHED``, ``CALL_ATTEMPTS``, one
    entry per trace call) and its wall time are run records (``schema.GENERATE_TIMINGS``), kept out of the
    trace so that the same answers give the same ``generations.parquet`` however warm the cache.

    A question's ``GENERATE_MS``: its own steps' time (``own_ms``, :func:`run_batched`) plus the latencies of
    the calls this run made; one whose every call came from the call cache gets ``per_q_ms`` (the batch's mean,
    this run's time for cached answers); one that made no call (``rank`` with one candidate) its own time only.
    """
    from kgrag import schema as S

    out = []
    own_ms = list(own_ms) if own_ms is not None else [0.0] * len(question_ids)
    for qid, (res, recs), own in zip(question_ids, results, own_ms):
        failed = bool(recs) and recs[-1].failed and not res.answer.strip()
        errors = [e for r in recs if r.failed for e in r.errors]
        trace = {**res.trace, "calls": [
            {"key": r.key[:16], "tokens_in": r.reply.tokens_in, "tokens_out": r.reply.tokens_out,
             "error": r.reply.error, "reply": r.reply.text} for r in recs]}
        if res.fallback:
            trace["fallback"] = res.fallback
        out.append({
            S.QUESTION_ID: qid,
            S.PROMPT_HASH: recs[0].key[:16] if recs else "",
            S.PREDICTION: res.answer,
            S.PREDICTED_ANSWERS: answers_of(res, separator),
            S.LLM_CALLS: sum(r.attempts for r in recs),  # backend calls, retries included
            S.REQUESTS: len(recs),  # the reasoner's LLM calls (FastToG's bound counts these)
            S.CACHED: int(bool(recs) and all(r.cached for r in recs)),
            S.TOKENS_IN: sum(r.reply.tokens_in for r in recs),
            S.TOKENS_OUT: sum(r.reply.tokens_out for r in recs),
            S.GENERATE_MS: (per_q_ms if recs and all(r.cached for r in recs)
                            else own + sum(r.reply.latency_ms for r in recs if not r.cached)),
            S.CALL_CACHED: [r.cached for r in recs],
            S.CALL_ATTEMPTS: [r.attempts for r in recs],
            S.FAILED: failed,
            S.ERROR: "; ".join(errors) if failed else None,
            S.SEED: seed,
            S.REASONER: reasoner,
            S.DEPTH: res.depth,
            S.UNPARSEABLE: res.unparseable,
            S.TRACE: json.dumps(trace, default=str),
        })
    return out
