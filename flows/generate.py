"""The generate flow: contexts from the retrieved subgraphs, then each shard of questions as a cached task in
which the selected reasoner answers every question, all advanced together. Shards are submitted to the flow's
task runner (``params.cluster``: this process or Dask workers, each worker loading its own LLM backend) and
gathered in shard order.

Shard results persist under ``.kgrag_cache/prefect_results``; below them the LLM call cache
(``.kgrag_cache/llm_calls.sqlite``) makes a re-run, or a resumed interrupted run, repeat no call.
"""

from __future__ import annotations

from kgrag.env import setup

setup()

from prefect import flow, task  # noqa: E402

import hashlib  # noqa: E402
from pathlib import Path  # noqa: E402

from flows.runners import default_task_runner  # noqa: E402
from flows.cache import closure_version, progress_bar, shard_key, shard_key_parts, shards  # noqa: E402

from kgrag import schema as S  # noqa: E402
from kgrag.embed import open_index  # noqa: E402
from kgrag.clients import client_for  # noqa: E402
from kgrag.params import GenerateParams, ReasonParams, section_hash  # noqa: E402
from kgrag.reasoners import Sampling  # noqa: E402
from kgrag.registry import BACKENDS  # noqa: E402
from kgrag.answering import contexts_for, reason_rows  # noqa: E402
from kgrag.store import open_store, questions_from_table  # noqa: E402

MODULE_KINDS = ('backend',)  # looked up by name (kgrag.depgraph)

class IncompleteShard(Exception):
    """A shard with failed LLM calls: its rows travel in the exception, so Prefect does not cache them
    and the next run asks again for the failed questions (the successful calls come from the call cache)."""

    def __init__(self, rows: list[dict]) -> None:
        super().__init__(f"{sum(r[S.FAILED] for r in rows)} of {len(rows)} questions failed")
        self.rows = rows

    def __reduce__(self):  # pickled with its rows (a Dask worker sends it back to the flow)
        return (IncompleteShard, (self.rows,))


@task(cache_key_fn=shard_key, persist_result=True, name="generate_shard")
def generate_shard(*, key: dict, question_rows: list[dict], contexts: list[str], params_json: str,
                   reason_json: str, separator: str, cache_path: str, db_path: str, index_dir: str | None,
                   index_model: str) -> list[dict]:
    """Answer one shard of questions (raises ``IncompleteShard`` when a question failed)."""
    import pyarrow as pa

    params = GenerateParams.model_validate_json(params_json)
    reason = ReasonParams.model_validate_json(reason_json)
    client = client_for(params, cache=cache_path)
    questions = questions_from_table(pa.Table.from_pylist(question_rows, schema=S.QUESTIONS))
    index = open_index(index_dir, index_model) if index_dir and Path(index_dir, "entities.parquet").exists() else None
    sampling = Sampling(temperature=params.temperature, top_p=params.top_p, max_tokens=params.max_tokens,
                        seed=params.seed, few_shot=params.few_shot, separator=separator)
    rows = reason_rows(questions=questions, contexts=contexts, client=client, reason=reason, sampling=sampling,
                       kg=open_store(db_path), index=index)
    if any(r[S.FAILED] for r in rows):
        raise IncompleteShard(rows)
    return rows


@flow(name="generate", log_prints=False, task_runner=default_task_runner())
def generate_flow(*, question_rows: list[dict], retrieved_rows: list[dict], db_path: str, params: GenerateParams,
                  separator: str, cache_path: str, reason: ReasonParams | None = None, index_dir: str | None = None,
                  index_model: str = "all-MiniLM-L6-v2", inputs_hash: str = "") -> list[dict]:
    """Answer every question, shard by shard. Failed LLM calls never stop the run: they are recorded per
    question, and their shard is not cached so that the next run retries them."""
    reason = reason or ReasonParams()
    by_id = {r[S.QUESTION_ID]: r for r in retrieved_rows}
    kg = open_store(db_path)
    entry = BACKENDS.get(params.backend)
    core = closure_version("flows.generate")
    futures = []
    for shard in shards(question_rows, params.shard_size):
        ids = [q[S.QUESTION_ID] for q in shard]
        empty = {S.TRIPLE_HEADS: [], S.TRIPLE_RELATIONS: [], S.TRIPLE_TAILS: []}
        ctx = contexts_for([by_id.get(i, empty) for i in ids], kg=kg, params=params)
        texts = [q[S.TEXT] for q in shard]
        inputs = hashlib.sha256(("\x00".join(texts) + "\x01" + "\x00".join(ctx) + separator + inputs_hash)
                                .encode()).hexdigest()[:16]
        key = shard_key_parts(task="generate", module_version=f"{entry.name}-{entry.version}", core=core,
                              params_hash=section_hash(params) + section_hash(reason), inputs=inputs, ids=ids)
        futures.append(generate_shard.submit(
            key=key, question_rows=list(shard), contexts=ctx, params_json=params.model_dump_json(),
            reason_json=reason.model_dump_json(), separator=separator, cache_path=cache_path, db_path=db_path,
            index_dir=index_dir, index_model=index_model))
    out: list[dict] = []
    bar = progress_bar("generate", len(question_rows))
    for future in futures:  # shard order, whatever order they finish in
        res = future.result(raise_on_failure=False)
        if isinstance(res, IncompleteShard):
            res = res.rows  # recorded as failed in the outputs; retried by the next run
        elif isinstance(res, BaseException):
            raise res
        out.extend(res)
        bar.update(len(out) - bar.n)
    bar.close()
    return out
