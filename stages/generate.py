"""Stage generate: the selected reasoner and LLM backend answer every question from its retrieved context
(Prefect flow over shard files)."""

from __future__ import annotations

from pathlib import Path

import pyarrow.compute as pc

from stages._common import params_from_argv, timed
from kgrag import io, schema as S, timings
from kgrag.experiment import Files
from kgrag.index.embed import index_files_hash
from kgrag.kg.duckdb_io import kg_hash, questions_file
from kgrag.kg.store import resolve_store


def main(argv: list[str] | None = None) -> None:
    """Run the stage."""
    params = params_from_argv(__doc__, argv)
    p = params.generate
    from flows.generate import generate_flow
    from flows.runners import run_flow

    files = Files.of()  # the experiment's files, absolute: shard tasks may run in other processes
    db = Path(files.db)
    params = resolve_store(params, db)  # retrieve.store chosen once for every shard task (the reasoners read the KG)
    out = io.GENERATE / "generations.parquet"
    with timed("generate", timings.stage_dir("generate"), outputs=[out]) as info:
        # graph reasoners walk the KG themselves: the questions' topic ids and the index are inputs too
        index_hash = index_files_hash(io.INDEX)
        res = run_flow(generate_flow, params.cluster, questions=str(questions_file(db, io.CACHE)),
                       retrieved=str((io.RETRIEVE / "retrieved.parquet").resolve()), db_path=files.db,
                       params=params, cache_path=files.cache, shard_dir=files.shards, index_dir=files.index,
                       inputs_hash=f"{kg_hash(db)}-{index_hash}")
        # the DVC output holds the answers only; wall times and call-cache use go to the run records
        record = timings.questions_path("generate")
        n = io.stream_shards(res["shards"], {out: S.GENERATIONS, record: S.GENERATE_TIMINGS})
        cached = io.read_parquet(record).column(S.CACHED)
        info.update(backend=p.backend, reasoner=params.reason.method, questions=n, failed=res["failed"],
                    cached=int(pc.sum(cached).as_py() or 0), seed=p.seed)


if __name__ == "__main__":
    main()
