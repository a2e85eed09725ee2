"""Run records of the default DAG: wall times and LLM call-cache use, kept out of the DVC outputs.

What a run took (seconds per stage, ms per question, which LLM calls the call cache answered, backend attempts)
differs from run to run and machine to machine, while the results do not. DVC records the hash of every stage
output in ``dvc.lock``, ``cache: false`` outputs (metrics, plots) included, so a wall time inside an output
changes the lock on every run. The stages therefore write their run records beside their outputs, never into
them:

- ``data/timings/<stage>/timing.json``: the stage's seconds, counts, and the hash (``io.file_hash``) of each
  output file it describes (``outputs``; written by ``stages._common.timed``);
- ``data/timings/retrieve/questions.parquet`` (``schema.RETRIEVE_TIMINGS``: ``retrieve_ms`` and, for a
  multi-stage retriever (LEGO), ``stage_ms``, one per entry of the trace's ``stages``) and
  ``data/timings/generate/questions.parquet`` (``schema.GENERATE_TIMINGS``): per question.

The pipelines outside the default DAG keep theirs the same way: ``data/timings/synth/``,
``data/timings/finetune_path_scorer/``, ``data/timings/convert_llm/`` and ``data/timings/gretriever/<run>/``
(G-Retriever training: ``stages.train_gretriever``).

``data/timings/`` is no DVC output (git-ignored with ``data/``). The evaluate stage gathers the records into
``reports/timings.json`` (:func:`summary`), a top-level ``metrics`` file of ``dvc.yaml``: ``dvc metrics show``
and ``dvc exp show`` (so ``kgrag compare``) read it, no ``dvc.lock`` holds its hash. A record whose outputs
changed since it was written (another run's outputs checked out, outputs restored from DVC's run cache) is
stale: :func:`read_record` and :func:`read_questions` ignore it rather than pair results with another run's
times.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Mapping, Sequence

import pyarrow as pa

import numpy as np

from kgrag import io, schema as S
from kgrag.io import file_hash
from kgrag.types import MetricKey

#: the run-record keys of ``reports/timings.json`` (:func:`summary`): what this run took, not what it found
RUN_KEYS = {
    "llm_calls_per_question": MetricKey("backend calls / q (uncached)",
                                        "LLM calls / question (this run; 0 when cached)", -1),
    "llm_answers_from_cache": MetricKey("answers from cache", "Answers served from the LLM call cache", 0, "d"),
    "retrieve_ms_median": MetricKey("retrieve ms / q", "Retrieval ms / question (median)", -1),
    "generate_ms_median": MetricKey("generate ms / q", "Generation ms / question (median)", -1),
}

RECORD = "timing.json"
QUESTIONS = "questions.parquet"
# the per-question run-record table of each stage that writes one
QUESTION_SCHEMAS: dict[str, pa.Schema] = {"retrieve": S.RETRIEVE_TIMINGS, "generate": S.GENERATE_TIMINGS}


def stage_dir(stage: str, root: str | Path = io.TIMINGS) -> Path:
    """The folder of a stage's run records."""
    return Path(root) / stage


def is_current(record: Mapping) -> bool:
    """Whether every output the record names still has the hash it had when the record was written."""
    for path, digest in (record.get("outputs") or {}).items():
        if not Path(path).is_file() or file_hash(path) != digest:
            return False
    return True


def questions_path(stage: str, root: str | Path = io.TIMINGS) -> Path:
    """The file of a stage's per-question run records (``stage_dir / questions.parquet``)."""
    if stage not in QUESTION_SCHEMAS:
        raise ValueError(f"stage {stage!r} has no per-question run records (known: {sorted(QUESTION_SCHEMAS)})")
    return stage_dir(stage, root) / QUESTIONS


def write_questions(stage: str, rows: Sequence[Mapping], root: str | Path = io.TIMINGS) -> Path:
    """The per-question run records of a stage's rows (their run-record columns only)."""
    if stage not in QUESTION_SCHEMAS:
        raise ValueError(f"stage {stage!r} has no per-question run records (known: {sorted(QUESTION_SCHEMAS)})")
    path = stage_dir(stage, root) / QUESTIONS
    io.write_parquet(path, pa.Table.from_pylist(list(rows), schema=QUESTION_SCHEMAS[stage]))
    return path


def read_record(stage: str, root: str | Path = io.TIMINGS) -> dict | None:
    """A stage's ``timing.json``; None when absent or stale (its outputs changed since)."""
    path = stage_dir(stage, root) / RECORD
    if not path.is_file():
        return None
    record = io.read_json(path)
    return record if is_current(record) else None


def read_questions(stage: str, root: str | Path = io.TIMINGS) -> dict[str, dict]:
    """A stage's per-question run records by question id; empty when absent or stale."""
    path = stage_dir(stage, root) / QUESTIONS
    if read_record(stage, root) is None or not path.is_file():
        return {}
    return {r[S.QUESTION_ID]: r for r in io.read_parquet(path).to_pylist()}


def stage_seconds(stages: Iterable[str], root: str | Path = io.TIMINGS) -> dict[str, float]:
    """Seconds of each stage with a current record, in the order given."""
    out = {}
    for s in stages:
        rec = read_record(s, root)
        if rec is not None and rec.get("seconds") is not None:
            out[s] = rec["seconds"]
    return out


MODULE_TIMES = ("ms_mean", "ms_median")  # the wall-time keys of evaluate.stage_metrics' rows


def split_module_times(modules: Sequence[Mapping]) -> tuple[list[dict], list[dict]]:
    """``evaluate.stage_metrics`` rows → (the rows without their wall times, for ``reports/metrics.json``; per
    stage and module its ``ms_mean`` / ``ms_median``, for ``reports/timings.json``)."""
    results = [{k: v for k, v in m.items() if k not in MODULE_TIMES} for m in modules]
    times = [{"stage": m["stage"], "module": m["module"], **{k: m.get(k) for k in MODULE_TIMES}} for m in modules]
    return results, times


def summary(*, question_ids: Sequence[str], stage_seconds: Mapping[str, float], retrieve: Mapping[str, dict],
            generate: Mapping[str, dict], retrieval_modules_ms: Sequence[Mapping] = ()) -> dict:
    """``reports/timings.json``: ``stage_seconds``; over the evaluated questions that have records, the median
    ``retrieve_ms`` / ``generate_ms`` (``retrieve_ms_median``, ``generate_ms_median``), ``llm_calls_per_question``
    (backend attempts, retries included; 0 for an answer from the call cache), ``llm_answers_from_cache``; and
    how many questions each figure covers (``questions_timed``). A figure without records is None. With a
    multi-stage retriever, ``retrieval_modules_ms``: per stage and module of ``reports/metrics.json``'s
    ``retrieval_modules``, its ``ms_mean`` / ``ms_median`` (:func:`split_module_times`)."""
    rt = [retrieve[q] for q in question_ids if q in retrieve]
    gt = [generate[q] for q in question_ids if q in generate]

    def median(values: list) -> float | None:
        v = [x for x in values if x is not None]
        return float(np.median(v)) if v else None

    return {
        "stage_seconds": dict(stage_seconds),
        "retrieve_ms_median": median([r.get(S.RETRIEVE_MS) for r in rt]),
        "generate_ms_median": median([g.get(S.GENERATE_MS) for g in gt]),
        "llm_calls_per_question": float(np.mean([g[S.LLM_CALLS] for g in gt])) if gt else None,
        "llm_answers_from_cache": sum(int(g[S.CACHED] or 0) for g in gt) if gt else None,
        "questions_timed": {"retrieve": len(rt), "generate": len(gt)},
        **({"retrieval_modules_ms": [dict(m) for m in retrieval_modules_ms]} if retrieval_modules_ms else {}),
    }


def with_records(rows: Sequence[Mapping], *records: Mapping[str, dict]) -> list[dict]:
    """Rows (e.g. of ``reports/predictions.parquet``) with each question's run-record fields added (for the
    report's views: ``retrieve_ms``, ``generate_ms``, per-call cached / attempts); rows are not changed."""
    out = []
    for r in rows:
        extra: dict = {}
        for rec in records:
            extra.update({k: v for k, v in (rec.get(r[S.QUESTION_ID]) or {}).items() if k != S.QUESTION_ID})
        out.append({**r, **extra})
    return out


def call_runs(row: Mapping) -> list[tuple[bool | None, int | None]]:
    """How each LLM call in a row's trace was obtained, (cached, attempts) per call, from the row's run-record
    fields (``schema.CALL_CACHED`` / ``CALL_ATTEMPTS``, present once joined by :func:`with_records`) or, in traces
    written before those existed, from the call entries themselves; None where neither says."""
    import json

    raw = row.get(S.TRACE)
    try:
        trace = raw if isinstance(raw, dict) else json.loads(raw or "{}")
    except (TypeError, ValueError):
        trace = {}
    calls = trace.get("calls") if isinstance(trace, dict) else None
    calls = calls if isinstance(calls, list) else []
    cached, attempts = list(row.get(S.CALL_CACHED) or []), list(row.get(S.CALL_ATTEMPTS) or [])
    out = []
    for i, c in enumerate(calls):
        c = c if isinstance(c, dict) else {}
        out.append((cached[i] if i < len(cached) else c.get("cached"),
                    attempts[i] if i < len(attempts) else c.get("attempts")))
    return out
