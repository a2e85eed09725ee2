"""The retrieve flow: shard the questions file by row range, submit each unfinished shard as a task to the
flow's task runner (``params.cluster``: this process or Dask workers), return the shard files in order.

Tasks receive file paths, hashes and row ranges, never rows (``flows.cache``): a shard task reads its slice of
the questions file and writes its rows to ``.kgrag_cache/shards/retrieve/<key>.arrow``, keyed by (task, module
code version, kgrag core version, params hash, input file hash, question ids). An interrupted stage resumes with
the finished shards and a changed param re-runs only what it touches.
"""

from __future__ import annotations

from kgrag.env import setup

setup()

from pathlib import Path  # noqa: E402

import pyarrow as pa  # noqa: E402
from prefect import flow, task  # noqa: E402
from prefect.cache_policies import NO_CACHE  # noqa: E402

from flows.runners import default_task_runner  # noqa: E402
from flows.cache import closure_version, progress_bar, ranges, shard_file, shard_key_parts  # noqa: E402
from kgrag import io, schema as S  # noqa: E402
from kgrag.experiment import Experiment, Files  # noqa: E402
from kgrag.params import Params  # noqa: E402
from kgrag.registry import RETRIEVERS  # noqa: E402
from kgrag.retrieval.run import key_hash, retrieve_with  # noqa: E402
from kgrag.kg.store import questions_from_table  # noqa: E402


@task(name="retrieve_shard", cache_policy=NO_CACHE, persist_result=False)
def retrieve_shard(*, out: str, questions: str, start: int, stop: int, db_path: str, index_dir: str,
                   params_json: str) -> str:
    """Retrieve questions ``[start, stop)`` of the questions file; writes the shard file ``out``. The experiment
    (KG store of ``retrieve.store``, index, retriever) is assembled from the params by ``kgrag.experiment``."""
    exp = Experiment.from_json(params_json, Files(db=db_path, index=index_dir))
    qs = questions_from_table(io.read_rows(questions, start, stop), declared_hops=exp.params.retrieve.oracle_hops)
    rows = retrieve_with(exp, qs)
    return str(io.write_arrow(out, pa.Table.from_pylist(rows, schema=S.RETRIEVE_SHARD)))


@flow(name="retrieve", log_prints=False, persist_result=False, task_runner=default_task_runner())
def retrieve_flow(*, questions: str, db_path: str, db_hash: str, index_dir: str, index_hash: str,
                  params: Params, shard_dir: str) -> list[str]:
    """Retrieve a subgraph for every question of the questions file, shard by shard, with the experiment of
    ``params`` (the whole params file: its ``retrieve`` section, ``index.model``); returns the shard files in
    question order (``kgrag.io.stream_shards`` joins them)."""
    entry = RETRIEVERS.get(params.retrieve.method)
    params_json, rp = params.model_dump_json(by_alias=True), params.retrieve
    core = closure_version("flows.retrieve")
    ids = io.read_column(questions, S.QUESTION_ID)
    shards: list[tuple[Path, int, object]] = []  # (shard file, questions, future or None when finished)
    for start, stop in ranges(len(ids), rp.shard_size):
        key = shard_key_parts(task="retrieve", module_version=f"{entry.name}-{entry.version}", core=core,
                              params_hash=key_hash(rp) + params.index.model, inputs=f"{db_hash}-{index_hash}",
                              ids=ids[start:stop])
        out = shard_file(shard_dir, key)
        future = None if out.is_file() else retrieve_shard.submit(  # a finished shard is not submitted again
            out=str(out), questions=questions, start=start, stop=stop, db_path=db_path, index_dir=index_dir,
            params_json=params_json)
        shards.append((out, stop - start, future))
    bar = progress_bar("retrieve", len(ids))
    for _, n, future in shards:  # shard order, whatever order they finish in
        if future is not None:
            future.result()
        bar.update(n)
    bar.close()
    return [str(out) for out, _, _ in shards]
