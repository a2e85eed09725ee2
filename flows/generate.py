"""The generate flow: each shard of questions as a task in which the selected reasoner answers every question
from its retrieved context, all advanced together. Shards are submitted to the flow's task runner
(``params.cluster``: this process or Dask workers, each worker loading its own LLM backend) and returned as
shard files in question order.

Tasks receive file paths, hashes and row ranges, never rows (``flows.cache``): a shard task reads its slice of
the questions file and its questions' rows of the retrieved file, builds the prompt contexts, and writes its
rows to ``.kgrag_cache/shards/generate/<key>.arrow``. The key holds a digest of each question's text and
retrieved triples, so a retrieval change re-runs only the shards it touches. A shard with failed LLM calls
writes its rows beside (``<key>.partial.arrow``): they reach the stage's output as failures, and the next run
submits the shard again; below the shards the LLM call cache (``.kgrag_cache/llm_calls.sqlite``) makes a re-run,
or a resumed interrupted run, repeat no finished call.
"""

from __future__ import annotations

from kgrag.env import setup

setup()

import hashlib  # noqa: E402
import json  # noqa: E402
from pathlib import Path  # noqa: E402

import pyarrow as pa  # noqa: E402
from prefect import flow, task  # noqa: E402
from prefect.cache_policies import NO_CACHE  # noqa: E402

from flows.runners import default_task_runner  # noqa: E402
from flows.cache import (closure_version, partial_file, progress_bar, ranges, shard_file,  # noqa: E402
                         shard_key_parts)

from kgrag import io, schema as S  # noqa: E402
from kgrag.reasoning.generate import answer_rows, proposed_ends  # noqa: E402
from kgrag.experiment import Experiment, Files  # noqa: E402
from kgrag.params import Params, section_hash  # noqa: E402
from kgrag.registry import BACKENDS  # noqa: E402
from kgrag.kg.store import questions_from_table  # noqa: E402


TRIPLE_COLUMNS = (S.TRIPLE_HEADS, S.TRIPLE_RELATIONS, S.TRIPLE_TAILS)
NO_TRIPLES = {c: [] for c in TRIPLE_COLUMNS}


@task(name="generate_shard", cache_policy=NO_CACHE, persist_result=False)
def generate_shard(*, out: str, questions: str, start: int, stop: int, retrieved: str | None,
                   retrieved_rows: list[int], params_json: str, cache_path: str, db_path: str,
                   index_dir: str | None) -> dict:
    """Answer questions ``[start, stop)`` of the questions file, whose retrieved rows are ``retrieved_rows`` of
    the retrieved file (-1: none); writes the shard file ``out``, or its partial file when a question failed.
    The experiment (KG store of ``retrieve.store``, index, reasoner, LLM client, sampling) is assembled from the
    params by ``kgrag.experiment``. Returns ``{"path", "failed"}``."""
    exp = Experiment.from_json(params_json, Files(db=db_path, index=index_dir, cache=cache_path))
    qs = questions_from_table(io.read_rows(questions, start, stop))
    found = [i for i in retrieved_rows if i >= 0]
    got = io.take_rows(retrieved, found, (*TRIPLE_COLUMNS, S.TRACE)).to_pylist() if retrieved and found else []
    by_row = dict(zip(found, got))
    rows = answer_rows(exp, qs, [by_row.get(i, NO_TRIPLES) for i in retrieved_rows])
    failed = sum(bool(r[S.FAILED]) for r in rows)
    path = partial_file(out) if failed else Path(out)
    io.write_arrow(path, pa.Table.from_pylist(rows, schema=S.GENERATE_SHARD))
    return {"path": str(path), "failed": failed}


def _retrieved_digests(retrieved: str | None) -> dict[str, tuple[int, str]]:
    """Question id → (row of the retrieved file, digest of its triples and proposed answers), streamed."""
    out: dict[str, tuple[int, str]] = {}
    if not retrieved:
        return out
    row = 0
    for batch in io.iter_batches(retrieved, [S.QUESTION_ID, *TRIPLE_COLUMNS, S.TRACE]):
        cols = batch.to_pydict()
        for j, qid in enumerate(cols[S.QUESTION_ID]):
            triples = json.dumps([cols[c][j] for c in TRIPLE_COLUMNS] + [proposed_ends(cols[S.TRACE][j])],
                                 separators=(",", ":"))
            out.setdefault(qid, (row + j, hashlib.sha256(triples.encode()).hexdigest()[:16]))
        row += batch.num_rows
    return out


@flow(name="generate", log_prints=False, persist_result=False, task_runner=default_task_runner())
def generate_flow(*, questions: str, retrieved: str | None, db_path: str, params: Params, cache_path: str,
                  shard_dir: str, index_dir: str | None = None, inputs_hash: str = "") -> dict:
    """Answer every question of the questions file, shard by shard, with the experiment of ``params`` (the whole
    params file: ``generate``, ``reason``, ``evaluate.answer_separator``, ``retrieve.store``, ``index.model``).
    Failed LLM calls never stop the run: they are recorded per question, and their shard is not taken as
    finished, so the next run retries them.

    ``retrieve.store`` (``memory`` or ``duckdb``) gives the same answers either way (not in the shard key), but a
    KG too big for memory stays on disk here too.

    Returns ``{"shards": [shard file, ...] in question order, "failed": questions that failed}``.
    """
    g, separator = params.generate, params.evaluate.answer_separator
    entry = BACKENDS.get(g.backend)
    params_json = params.model_dump_json(by_alias=True)
    core = closure_version("flows.generate")
    by_id = _retrieved_digests(retrieved)
    params_hash = section_hash(g) + section_hash(params.reason)
    shards: list[tuple[Path, int, object]] = []  # (shard file, questions, future or None when finished)
    texts = (t for b in io.iter_batches(questions, [S.QUESTION_ID, S.TEXT])
             for t in zip(b.column(0).to_pylist(), b.column(1).to_pylist()))
    n = io.num_rows(questions)
    for start, stop in ranges(n, g.shard_size):
        shard = [next(texts) for _ in range(stop - start)]
        ids = [qid for qid, _ in shard]
        rows = [by_id.get(qid, (-1, ""))[0] for qid in ids]
        digest = hashlib.sha256("\x00".join(f"{text}\x01{by_id.get(qid, (-1, ''))[1]}" for qid, text in shard)
                                .encode()).hexdigest()[:16]
        key = shard_key_parts(task="generate", module_version=f"{entry.name}-{entry.version}", core=core,
                              params_hash=params_hash, inputs=f"{digest}-{separator}-{inputs_hash}", ids=ids)
        out = shard_file(shard_dir, key)
        future = None if out.is_file() else generate_shard.submit(  # a finished shard is not submitted again
            out=str(out), questions=questions, start=start, stop=stop, retrieved=retrieved, retrieved_rows=rows,
            params_json=params_json, cache_path=cache_path, db_path=db_path, index_dir=index_dir)
        shards.append((out, stop - start, future))
    paths, failed = [], 0
    bar = progress_bar("generate", n)
    for out, size, future in shards:  # shard order, whatever order they finish in
        if future is None:
            paths.append(str(out))
        else:
            res = future.result()
            paths.append(res["path"])
            failed += res["failed"]
        bar.update(size)
    bar.close()
    return {"shards": paths, "failed": failed}
