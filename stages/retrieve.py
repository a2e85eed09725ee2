"""Stage retrieve: the selected retrieval module on every question (Prefect flow, cached shards)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from stages._common import params_from_argv, timed
from kgrag import io, schema as S, timings
from kgrag.duckdb_io import file_hash, kg_hash, read_tables


def main(argv: list[str] | None = None) -> None:
    """Run the stage."""
    params = params_from_argv(__doc__, argv)
    p = params.retrieve
    from flows.cache import folder_hash
    from flows.retrieve import retrieve_flow
    from flows.runners import run_flow

    db = (io.VALIDATED / "kg.duckdb").resolve()  # absolute: shard tasks may run in other processes
    out = io.RETRIEVE / "retrieved.parquet"
    with timed("retrieve", timings.stage_dir("retrieve"), outputs=[out]) as info:
        questions = read_tables(db, ("questions",))["questions"].to_pylist()
        # the fine-tuned scorer model (presets lego-05/12/18) and relpath's plan are inputs too
        index_hash = "-".join([*(file_hash(io.INDEX / f) for f in ("entities.parquet", "relations.parquet")),
                               folder_hash(io.ST_MODEL), folder_hash(io.RELPLAN)])
        rows = run_flow(retrieve_flow, params.cluster, question_rows=questions, db_path=str(db),
                        db_hash=kg_hash(db), index_dir=str(io.INDEX.resolve()), index_hash=index_hash,
                        index_model=params.index.model, params=p)
        # the DVC output holds the results only; the wall times go to the run records (kgrag.timings)
        io.write_parquet(out, pa.Table.from_pylist(rows, schema=S.RETRIEVED))
        timings.write_questions("retrieve", rows)
        ms = [r[S.RETRIEVE_MS] for r in rows]
        info.update(method=p.method, questions=len(rows), median_ms=float(np.percentile(ms, 50)) if ms else None,
                    p90_ms=float(np.percentile(ms, 90)) if ms else None)


if __name__ == "__main__":
    main()
