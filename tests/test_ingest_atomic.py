"""A write of the KG's tables that fails half-way (a disk that fills during ingest) leaves no half-written store
that a later run would take as complete (issue 55 item 3): ``write_tables`` (the ingest and validate stages'
writer) and ``write_duckdb`` write under temporary names and rename only whole files.

Real files throughout: the failure is a real partial write, cut off by an OSError(ENOSPC) raised from the
Parquet writer (the one stand-in, for control flow) or by a source of record batches that fails part-way.
"""

from __future__ import annotations

import errno

import pyarrow as pa
import pytest

from kgrag.kg import duckdb_io
from kgrag.kg.duckdb_io import DB_NAME, TABLES, ensure_duckdb, is_derived, read_tables, write_duckdb, write_tables
from kgrag.kg.store import KGStore
from tests.test_store_auto import synth_tables


def _full_disk_on(table_name: str, monkeypatch) -> None:
    """Make the Parquet write of ``table_name`` fail part-way as a full disk does: half its bytes written, then
    ENOSPC."""
    real = duckdb_io.write_parquet

    def write(path, table, row_group_size=None):
        if path.name.startswith(f"{table_name}.parquet"):
            tmp = path.with_name(path.name + ".tmp")
            sink = pa.BufferOutputStream()
            import pyarrow.parquet as pq

            pq.write_table(table, sink)
            tmp.write_bytes(sink.getvalue().to_pybytes()[: sink.getvalue().size // 2])
            raise OSError(errno.ENOSPC, "No space left on device")
        real(path, table, row_group_size=row_group_size)

    monkeypatch.setattr(duckdb_io, "write_parquet", write)


def _leftovers(folder) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name not in {f"{t}.parquet" for t in TABLES} | {DB_NAME})


@pytest.mark.parametrize("fails", ["relations", "triples", "questions"])
def test_a_first_ingest_that_fails_leaves_no_store(tmp_path, monkeypatch, fails):
    """Into an empty folder: nothing that looks like a KG is left (no table file, no DuckDB file, no temporary)."""
    folder = tmp_path / "ingest"
    _full_disk_on(fails, monkeypatch)
    with pytest.raises(OSError, match="No space left"):
        write_tables(folder, synth_tables(500))
    assert sorted(p.name for p in folder.iterdir()) == []
    assert not is_derived(folder / DB_NAME)


def test_a_failed_ingest_over_an_old_store_keeps_the_old_one_whole(tmp_path, monkeypatch):
    """Over a previous run's store: its four tables stay as they were (no mix of new and old), no temporary is
    left, and the store opens as the old KG."""
    folder = tmp_path / "ingest"
    old = synth_tables(800, seed=1)
    write_tables(folder, old)
    before = {t: (folder / f"{t}.parquet").read_bytes() for t in TABLES}
    _full_disk_on("triples", monkeypatch)  # entities and relations of the new KG would be written first
    with pytest.raises(OSError):
        write_tables(folder, synth_tables(500, seed=2))
    assert {t: (folder / f"{t}.parquet").read_bytes() for t in TABLES} == before
    assert _leftovers(folder) == []
    kg = KGStore(folder / DB_NAME)
    assert (kg.num_triples, kg.num_entities) == (old["triples"].num_rows, old["entities"].num_rows)


def _failing(table: pa.Table, after: int) -> pa.RecordBatchReader:
    """The rows of ``table`` as a stream that fails (ENOSPC) after ``after`` batches."""
    def batches():
        for i, b in enumerate(table.to_batches(max_chunksize=100)):
            if i == after:
                raise OSError(errno.ENOSPC, "No space left on device")
            yield b

    return pa.RecordBatchReader.from_batches(table.schema, batches())


def test_a_duckdb_write_that_fails_midway_leaves_no_file(tmp_path):
    """write_duckdb cut off while the triples stream in: no DuckDB file, no temporary or WAL; over an old file, the
    old file unchanged."""
    tables = synth_tables(1_000)
    db = tmp_path / "kg.duckdb"
    with pytest.raises(Exception, match="No space left"):
        write_duckdb(db, {**tables, "triples": _failing(tables["triples"], after=3)})
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    write_duckdb(db, tables)
    before = db.read_bytes()
    with pytest.raises(Exception, match="No space left"):
        write_duckdb(db, {**tables, "triples": _failing(tables["triples"], after=3)})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kg.duckdb"] and db.read_bytes() == before


def test_a_derived_duckdb_file_that_fails_is_rebuilt_whole(tmp_path, monkeypatch):
    """The DuckDB file built from the Parquet tables (build_duckdb) cut off: no DuckDB file is left, and the next
    reader (ensure_duckdb) builds a whole one from the tables."""
    folder = tmp_path / "validated"
    tables = synth_tables(600)
    write_tables(folder, tables)
    (folder / DB_NAME).unlink()
    real = duckdb_io.write_name_lookup

    def fail(*a, **k):  # the last table written: everything else is in the temporary file by now
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(duckdb_io, "write_name_lookup", fail)
    with pytest.raises(OSError):
        ensure_duckdb(folder / DB_NAME)
    assert not (folder / DB_NAME).exists() and _leftovers(folder) == []
    monkeypatch.setattr(duckdb_io, "write_name_lookup", real)
    got = read_tables(folder / DB_NAME, ("triples",))["triples"]
    assert got.num_rows == tables["triples"].num_rows
