"""The KG's DuckDB file: write the tables, read them back, hash the file (kept apart from ``store`` so that
the ingest stage does not depend on the retrieval view)."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow as pa

from kgrag.io import file_hash  # noqa: F401 (hash the file: moved to kgrag.io, which the run records use too)

TABLES = ("entities", "relations", "triples", "questions")


def write_duckdb(path: str | Path, tables: dict[str, pa.Table]) -> None:
    """Write the tables into a fresh DuckDB file (replacing any old one)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for p in (path, path.with_suffix(path.suffix + ".wal")):
        p.unlink(missing_ok=True)
    con = duckdb.connect(str(path))
    try:
        for name, table in tables.items():
            con.register("_src", table)
            con.execute(f'CREATE TABLE "{name}" AS SELECT * FROM _src')
            con.unregister("_src")
        con.execute("CHECKPOINT")
    finally:
        con.close()


def read_tables(path: str | Path, names: tuple[str, ...] = TABLES) -> dict[str, pa.Table]:
    """Read tables back from a DuckDB file (read-only)."""
    con = duckdb.connect(str(path), read_only=True)
    try:
        return {n: con.sql(f'SELECT * FROM "{n}"').to_arrow_table() for n in names}
    finally:
        con.close()
