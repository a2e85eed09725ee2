"""Stage retrieve: the selected retrieval module on every question (Prefect flow over shard files)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from stages._common import params_from_argv, timed
from kgrag import io, schema as S, timings
from kgrag.experiment import Files
from kgrag.index.embed import index_files_hash
from kgrag.kg.duckdb_io import kg_hash, questions_file
from kgrag.kg.store import resolve_store
from kgrag.retrieval.run import prepare_store


def main(argv: list[str] | None = None) -> None:
    """Run the stage."""
    params = params_from_argv(__doc__, argv)
    p = params.retrieve
    from flows.cache import folder_hash
    from flows.retrieve import retrieve_flow
    from flows.runners import run_flow

    files = Files.of()  # the experiment's files, absolute: shard tasks may run in other processes
    db = Path(files.db)
    # the store (retrieve.store: auto = memory when the KG fits retrieve.memory_budget_gb) is chosen once, here,
    # from the KG's counts alone: a KG too big for store: memory stops before anything is loaded, and every shard
    # task opens the store chosen (auto resolved to memory is store: memory: same store, same cache key)
    params = resolve_store(params, db)
    store = params.retrieve.store
    # the DuckDB store's sidecar (and relpath's edge groups) are built once, here, not by every shard task at once
    prepare_store(params.retrieve, db, io.CACHE / "duckstore")
    out = io.RETRIEVE / "retrieved.parquet"
    with timed("retrieve", timings.stage_dir("retrieve"), outputs=[out]) as info:
        # the fine-tuned scorer model (presets lego-05/12/18) and relpath's plan are inputs too
        index_hash = "-".join([index_files_hash(io.INDEX), folder_hash(io.ST_MODEL), folder_hash(io.RELPLAN)])
        shards = run_flow(retrieve_flow, params.cluster, questions=str(questions_file(db, io.CACHE)),
                          db_path=files.db, db_hash=kg_hash(db), index_dir=files.index,
                          index_hash=index_hash, params=params, shard_dir=files.shards)
        # the DVC output holds the results only; the wall times go to the run records (kgrag.timings)
        record = timings.questions_path("retrieve")
        n = io.stream_shards(shards, {out: S.RETRIEVED, record: S.RETRIEVE_TIMINGS})
        ms = io.read_column(record, S.RETRIEVE_MS)
        info.update(method=p.method, store=store, questions=n, median_ms=float(np.percentile(ms, 50)) if ms else None,
                    p90_ms=float(np.percentile(ms, 90)) if ms else None)


if __name__ == "__main__":
    main()
