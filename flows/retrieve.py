"""The retrieve flow: shard the questions, submit each shard as a cached task to the flow's task runner
(``params.cluster``: this process or Dask workers), gather the rows in shard order.

A shard's result is persisted under ``.kgrag_cache/prefect_results`` and keyed by
(task, module code version, kgrag core version, params hash, input file hash, question ids), so an
interrupted stage resumes with the finished shards and a changed param re-runs only what it touches.
"""

from __future__ import annotations

from kgrag.env import setup

setup()

from prefect import flow, task  # noqa: E402

from flows.runners import default_task_runner  # noqa: E402
from flows.cache import closure_version, progress_bar, shard_key, shard_key_parts, shards  # noqa: E402
from kgrag.embed import open_index  # noqa: E402
from kgrag.params import RetrieveParams, section_hash  # noqa: E402
from kgrag.registry import RETRIEVERS  # noqa: E402
from kgrag.runner import retrieve_rows  # noqa: E402
from kgrag.store import open_store, questions_from_table  # noqa: E402
from kgrag import schema as S  # noqa: E402

MODULE_KINDS = ('retriever',)  # looked up by name (kgrag.depgraph)


@task(cache_key_fn=shard_key, persist_result=True, name="retrieve_shard")
def retrieve_shard(*, key: dict, question_rows: list[dict], db_path: str, index_dir: str, index_model: str,
                   params_json: str) -> list[dict]:
    """Retrieve one shard of questions."""
    import pyarrow as pa

    params = RetrieveParams.model_validate_json(params_json)
    questions = questions_from_table(pa.Table.from_pylist(question_rows, schema=S.QUESTIONS))
    kg = open_store(db_path, params.store)  # retrieve.store: memory (KGStore) or duckdb (DuckKGStore)
    return retrieve_rows(questions=questions, kg=kg, index=open_index(index_dir, index_model), params=params)


@flow(name="retrieve", log_prints=False, task_runner=default_task_runner())
def retrieve_flow(*, question_rows: list[dict], db_path: str, db_hash: str, index_dir: str, index_hash: str,
                  index_model: str, params: RetrieveParams) -> list[dict]:
    """Retrieve a subgraph for every question, shard by shard."""
    entry = RETRIEVERS.get(params.method)
    core = closure_version("flows.retrieve")
    futures = []
    for shard in shards(question_rows, params.shard_size):
        key = shard_key_parts(task="retrieve", module_version=f"{entry.name}-{entry.version}", core=core,
                              params_hash=section_hash(params), inputs=f"{db_hash}-{index_hash}",
                              ids=[r[S.QUESTION_ID] for r in shard])
        futures.append(retrieve_shard.submit(key=key, question_rows=list(shard), db_path=db_path,
                                             index_dir=index_dir, index_model=index_model,
                                             params_json=params.model_dump_json()))
    out: list[dict] = []
    bar = progress_bar("retrieve", len(question_rows))
    for future in futures:  # shard order, whatever order they finish in
        out.extend(future.result())
        bar.update(len(out) - bar.n)
    bar.close()
    return out
