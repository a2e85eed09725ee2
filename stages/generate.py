"""Stage generate: the selected LLM backend answers every question from its retrieved context."""

from __future__ import annotations

import pyarrow as pa

from stages._common import params_from_argv, timed
from kgrag import io, schema as S, timings
from kgrag.duckdb_io import file_hash, kg_hash, read_tables


def main(argv: list[str] | None = None) -> None:
    """Run the stage."""
    params = params_from_argv(__doc__, argv)
    p = params.generate
    from flows.generate import generate_flow
    from flows.runners import run_flow

    db = (io.VALIDATED / "kg.duckdb").resolve()  # absolute: shard tasks may run in other processes
    out = io.GENERATE / "generations.parquet"
    with timed("generate", timings.stage_dir("generate"), outputs=[out]) as info:
        questions = read_tables(db, ("questions",))["questions"].to_pylist()
        retrieved = io.read_parquet(io.RETRIEVE / "retrieved.parquet").to_pylist()
        # graph reasoners walk the KG themselves: the questions' topic ids and the index are inputs too
        index_hash = "-".join(file_hash(io.INDEX / f) for f in ("entities.parquet", "relations.parquet")
                              if (io.INDEX / f).exists())
        rows = run_flow(generate_flow, params.cluster, question_rows=questions, retrieved_rows=retrieved,
                        db_path=str(db), params=p, separator=params.evaluate.answer_separator, reason=params.reason,
                        cache_path=str((io.CACHE / "llm_calls.sqlite").resolve()),
                        index_dir=str(io.INDEX.resolve()), index_model=params.index.model,
                        inputs_hash=f"{kg_hash(db)}-{index_hash}")
        # the DVC output holds the answers only; wall times and call-cache use go to the run records
        io.write_parquet(out, pa.Table.from_pylist(rows, schema=S.GENERATIONS))
        timings.write_questions("generate", rows)
        info.update(backend=p.backend, reasoner=params.reason.method, questions=len(rows), failed=sum(r[S.FAILED] for r in rows),
                    cached=sum(r[S.CACHED] for r in rows), seed=p.seed)


if __name__ == "__main__":
    main()
