"""Stage ingest: dataset files → Parquet tables + a DuckDB file; unparseable lines → quarantine."""

from __future__ import annotations

from stages._common import params_from_argv, timed
from kgrag import io, timings
from kgrag.registry import LOADERS
from kgrag.duckdb_io import write_duckdb

MODULE_KINDS = ('loader',)  # looked up by name (kgrag.depgraph)


def main(argv: list[str] | None = None) -> None:
    """Run the stage."""
    p = params_from_argv(__doc__, argv).data
    with timed("ingest", timings.stage_dir("ingest"), outputs=[io.INGEST / "kg.duckdb"]) as info:
        loader = LOADERS.get(p.dataset).impl
        kg = loader(**p.loader_kwargs())  # the selected loader's validated params + sample + seed
        tables = {"entities": kg.entities, "relations": kg.relations, "triples": kg.triples, "questions": kg.questions}
        for name, t in tables.items():
            io.write_parquet(io.INGEST / f"{name}.parquet", t)
        io.write_parquet(io.QUARANTINE / "ingest.parquet", kg.quarantine)
        write_duckdb(io.INGEST / "kg.duckdb", tables)
        info.update({n: t.num_rows for n, t in tables.items()}, quarantined=kg.quarantine.num_rows, seed=p.seed,
                    dataset=p.dataset, **kg.stats)
    print(f"[ingest] {info}")


if __name__ == "__main__":
    main()
