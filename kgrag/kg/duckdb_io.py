"""The KG's tables on disk: Parquet files (what DVC tracks) and the DuckDB file built from them (what the stores
query). Kept apart from ``store`` so that the ingest stage does not depend on the retrieval view.

The ingest and validate stages write each table of ``TABLES`` to ``<folder>/<table>.parquet``
(:func:`write_tables`): pyarrow writes no time stamp and no random identifier, so the same tables give the
same bytes on every run and machine (same pyarrow), and DVC records the same hashes in ``dvc.lock``. A DuckDB
file does not: two files written by the same statements differ in a header checksum and a random database
identifier, so every run would change the hash of the stage's output and the deps of every stage downstream.

``<folder>/kg.duckdb`` (``DB_NAME``) is therefore derived, not tracked: built from the Parquet files beside it
(:func:`build_duckdb`, the tables in the files' row order) with a stamp of the files it was built from (name,
size, modification time), and rebuilt by :func:`ensure_duckdb` when missing or stale (another version of the
Parquet files checked out, a fresh clone after ``dvc pull``). ``read_tables``, ``KGStore`` and ``DuckKGStore``
call it, so ``KGStore("data/validated/kg.duckdb")`` works wherever the Parquet files are. The project's
``.dvcignore`` keeps ``kg.duckdb`` out of the hashes of the ``data/ingest`` and ``data/validated`` outputs.
Cache keys that name the KG use :func:`kg_hash` (the Parquet files' contents), not the DuckDB file's bytes.

Nothing is written in place (:func:`write_tables`, :func:`write_duckdb`): files are written under temporary names,
removed when the write fails (a full disk), and renamed when whole, so no half-written store is ever taken for one.

A DuckDB file with no Parquet tables beside it (written by :func:`write_duckdb`, e.g. by tests) is used as it
is.

Every DuckDB file :func:`write_duckdb` writes with an ``entities`` table also holds table ``NAME_LOOKUP``
(:func:`write_name_lookup`): each entity name and alias under its linking key (``kgrag.kg.linking.name_key``),
with an ART index on the key, so that ``DuckKGStore`` links a question by looking its candidate spans up in the
index instead of scanning every name.
"""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from kgrag.io import ROW_GROUP, file_hash, write_parquet

TABLES = ("entities", "relations", "triples", "questions")
DB_NAME = "kg.duckdb"  # the derived DuckDB file of a folder of KG tables (listed in .dvcignore)
STAMP = "_kgrag_source"  # table of a derived DuckDB file: the Parquet files it was built from
NAME_LOOKUP = "name_lookup"  # table of names and aliases by linking key (kgrag.schema.NAME_LOOKUP), indexed
NAME_BATCH = 1 << 18  # entities read at a time while the name look-up table is written


def write_duckdb(path: str | Path, tables: dict[str, pa.Table | pa.RecordBatchReader],
                 stamp: list[tuple[str, int, int]] | None = None) -> None:
    """Write the tables into a fresh DuckDB file (replacing any old one) in one step.

    Parameters
    ----------
    path : str or Path
        The DuckDB file. It is written under a temporary name beside it and renamed, so that a reader never
        sees a half-written file.
    tables : dict of str to pyarrow.Table or pyarrow.RecordBatchReader
        Table name to rows, created in the file in this order, rows in their given order.
    stamp : list of (str, int, int), optional
        ``(file name, size, modification time in ns)`` of the Parquet files the tables come from, stored in
        table ``STAMP`` (see :func:`build_duckdb`); None for a file of its own.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    for p in (tmp, Path(f"{tmp}.wal")):
        p.unlink(missing_ok=True)
    try:
        con = duckdb.connect(str(tmp))
        try:
            for name, table in tables.items():
                con.register("_src", table)
                con.execute(f'CREATE TABLE "{name}" AS SELECT * FROM _src')
                con.unregister("_src")
            if "entities" in tables:
                write_name_lookup(con, "entities", NAME_LOOKUP)
            if stamp is not None:
                con.execute(f'CREATE TABLE "{STAMP}" (file VARCHAR, size BIGINT, mtime_ns BIGINT)')
                con.executemany(f'INSERT INTO "{STAMP}" VALUES (?, ?, ?)', [list(s) for s in stamp])
            con.execute("CHECKPOINT")
        finally:
            con.close()
    except BaseException:  # a full disk, a failing source: no partial file left (the old one, if any, stays)
        _unlink(tmp, Path(f"{tmp}.wal"))
        raise
    Path(f"{path}.wal").unlink(missing_ok=True)
    os.replace(tmp, path)
    Path(f"{tmp}.wal").unlink(missing_ok=True)


def _unlink(*paths: Path) -> None:
    for p in paths:
        p.unlink(missing_ok=True)


def write_name_lookup(con: duckdb.DuckDBPyConnection, entities: str, out: str) -> None:
    """Create table ``out`` (``kgrag.schema.NAME_LOOKUP``: ``name_key``, ``entity_id``, ``name``) from the
    entities table ``entities`` of connection ``con``: one row per name and alias of each entity
    (``kgrag.kg.linking.name_rows``, the keys computed by the same Python function the linker applies to a
    question's spans, so every store matches alike), sorted by key, with an ART index on the key.

    Parameters
    ----------
    con : duckdb.DuckDBPyConnection
        A writable connection.
    entities : str
        The entities table, qualified if needed (``kg.entities``); its optional ``aliases`` column is read too.
    out : str
        The table to create, qualified if needed (``side.name_lookup``).

    References
    ----------
    DuckDB ART indexes ("Indexes", duckdb.org/docs/sql/indexes): a filter ``name_key IN (...)`` on an
    indexed column is an index scan when few rows match, a look-up cost independent of the table's size.
    """
    from kgrag import schema as S
    from kgrag.kg.linking import name_rows

    db, _, table = entities.rpartition(".")
    where = f"table_name = '{table}'" + (f" AND database_name = '{db}'" if db else "")
    cols = {r[0] for r in con.execute(f"SELECT column_name FROM duckdb_columns() WHERE {where}").fetchall()}
    pick = f"{S.ENTITY_ID}, {S.NAME}" + (f", {S.ALIASES}" if S.ALIASES in cols else "")
    con.execute(f"CREATE TABLE {out}_tmp ({S.NAME_KEY} VARCHAR, {S.ENTITY_ID} BIGINT, {S.NAME} VARCHAR)")
    reader = con.sql(f"SELECT {pick} FROM {entities} ORDER BY {S.ENTITY_ID}").to_arrow_reader(NAME_BATCH)
    batches = list(reader)  # fetched before the inserts below reuse the connection
    for b in batches:
        d = b.to_pydict()
        rows = name_rows(d[S.ENTITY_ID], d[S.NAME], d.get(S.ALIASES))
        part = pa.table({S.NAME_KEY: [k for _, k, _ in rows],
                         S.ENTITY_ID: pa.array([i for i, _, _ in rows], pa.int64()),
                         S.NAME: [n for _, _, n in rows]}, schema=S.NAME_LOOKUP)
        con.register("_names", part)
        con.execute(f"INSERT INTO {out}_tmp SELECT * FROM _names")
        con.unregister("_names")
    con.execute(f"CREATE TABLE {out} AS SELECT * FROM {out}_tmp ORDER BY {S.NAME_KEY}, {S.ENTITY_ID}")
    con.execute(f"DROP TABLE {out}_tmp")
    con.execute(f"CREATE INDEX {out.rpartition('.')[2]}_{S.NAME_KEY} ON {out} ({S.NAME_KEY})")


def table_files(db: str | Path) -> dict[str, Path]:
    """The Parquet file of each KG table beside DuckDB file ``db`` (``<folder>/<table>.parquet``)."""
    db = Path(db)
    return {name: db.with_name(f"{name}.parquet") for name in TABLES}


def is_derived(db: str | Path) -> bool:
    """Whether ``db`` is built from Parquet files: every table of ``TABLES`` has its file beside it."""
    return all(p.is_file() for p in table_files(db).values())


def _stamp(db: str | Path) -> list[tuple[str, int, int]]:
    out = []
    for path in table_files(db).values():
        st = path.stat()
        out.append((path.name, int(st.st_size), int(st.st_mtime_ns)))
    return out


def _read_stamp(db: Path) -> list[tuple[str, int, int]] | None:
    try:
        con = duckdb.connect(str(db), read_only=True)
    except duckdb.Error:
        return None
    try:
        rows = con.execute(f'SELECT file, size, mtime_ns FROM "{STAMP}" ORDER BY rowid').fetchall()
    except duckdb.Error:  # no stamp: written by write_duckdb alone, or by an older version of the stages
        return None
    finally:
        con.close()
    return [(str(f), int(s), int(m)) for f, s, m in rows]


def write_tables(folder: str | Path, tables: dict[str, pa.Table]) -> Path:
    """Write the KG tables as Parquet files (the DVC outputs) and build the DuckDB file from them.

    All or nothing: the four files are written under temporary names and renamed into place only once all are
    whole, and the DuckDB file is written under a temporary name and renamed (:func:`write_duckdb`); a write that
    fails (a full disk) removes its temporary files and leaves the folder's previous tables, if any, as they were.

    Parameters
    ----------
    folder : str or Path
        Where ``<table>.parquet`` and ``kg.duckdb`` go.
    tables : dict of str to pyarrow.Table
        One table for each name of ``TABLES``.

    Returns
    -------
    Path
        The DuckDB file ``<folder>/kg.duckdb``.
    """
    if set(tables) != set(TABLES):
        raise ValueError(f"KG tables {sorted(tables)}; expected {list(TABLES)}")
    db = Path(folder) / DB_NAME
    files = table_files(db)
    # all four files are written under temporary names first and renamed only when every one is whole: a write
    # that fails (a full disk) leaves the folder as it was, never a mix of new and old tables that is_derived
    # and ensure_duckdb would take for a KG (renames need no space)
    staged = {name: path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.new")
              for name, path in files.items()}
    try:
        for name, path in staged.items():
            # the questions are read by row range (the flows' shard tasks): groups of ROW_GROUP rows
            write_parquet(path, tables[name], row_group_size=ROW_GROUP if name == "questions" else None)
    except BaseException:
        _unlink(*staged.values(), *(p.with_name(p.name + ".tmp") for p in staged.values()))
        raise
    for name, path in staged.items():
        os.replace(path, files[name])
    return build_duckdb(db)  # written under a temporary name and renamed too (write_duckdb)


def questions_file(db: str | Path, cache: str | Path) -> Path:
    """The questions of DuckDB file ``db`` as a Parquet file the flows read by row range: the derived file's own
    ``questions.parquet``, else an export under ``cache`` named by the KG's hash (written once)."""
    own = table_files(db)["questions"]
    if is_derived(db):
        return Path(own).resolve()
    out = Path(cache, f"questions-{kg_hash(db)}.parquet").resolve()
    if not out.is_file():
        write_parquet(out, read_tables(db, ("questions",))["questions"], row_group_size=ROW_GROUP)
    return out


def build_duckdb(db: str | Path) -> Path:
    """(Re)build DuckDB file ``db`` from the Parquet files beside it (:func:`table_files`).

    Each table is streamed from its file in row order (``KGStore`` and ``DuckKGStore`` number the triples by
    it) with the Arrow types the file stores, so the file equals one written from the tables in memory. Its
    table ``STAMP`` names the files' sizes and modification times (:func:`ensure_duckdb` compares them).

    Parameters
    ----------
    db : str or Path
        The DuckDB file to write.

    Returns
    -------
    Path
        ``db``.
    """
    db = Path(db)
    stamp = _stamp(db)  # before reading: a file replaced meanwhile makes the stamp stale, not the tables
    files = [pq.ParquetFile(p) for p in table_files(db).values()]
    try:
        readers = {name: pa.RecordBatchReader.from_batches(f.schema_arrow, f.iter_batches())
                   for name, f in zip(TABLES, files)}
        write_duckdb(db, readers, stamp=stamp)
    finally:
        for f in files:
            f.close()
    return db


def ensure_duckdb(db: str | Path) -> Path:
    """DuckDB file ``db``, built or rebuilt first when it is derived (:func:`is_derived`) and missing or stale.

    Stale: its stamp does not name the Parquet files' current sizes and modification times (or it has no
    stamp). Processes that rebuild at the same time each write a file of their own and rename it over ``db``;
    all hold the same tables.

    Parameters
    ----------
    db : str or Path
        A DuckDB file of the KG tables (``<folder>/kg.duckdb``).

    Returns
    -------
    Path
        ``db``, current. A file that is not derived is returned as it is (missing or not).
    """
    db = Path(db)
    if is_derived(db) and (not db.is_file() or _read_stamp(db) != _stamp(db)):
        build_duckdb(db)
    return db


def kg_hash(db: str | Path) -> str:
    """Content hash of the KG behind DuckDB file ``db`` (part of cache keys): of its Parquet files when it is
    derived (the same on every run and machine), else of the file's own bytes.

    Parameters
    ----------
    db : str or Path
        A DuckDB file of the KG tables.

    Returns
    -------
    str
        16 hex digits.
    """
    if not is_derived(db):
        return file_hash(db)
    parts = [f"{name}:{file_hash(path)}" for name, path in table_files(db).items()]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def read_tables(path: str | Path, names: tuple[str, ...] = TABLES) -> dict[str, pa.Table]:
    """Read tables back from a DuckDB file (read-only; a derived file is brought up to date first,
    :func:`ensure_duckdb`)."""
    con = duckdb.connect(str(ensure_duckdb(path)), read_only=True)
    try:
        return {n: con.sql(f'SELECT * FROM "{n}"').to_arrow_table() for n in names}
    finally:
        con.close()


def aliases_by_id(con, table: str, id_col: str, database: str | None = None) -> np.ndarray | None:
    """Each row's aliases (a label table's other names: ``schema.ENTITIES_ALIASES``, ``RELATIONS_LABELLED``), an
    object array indexed by ``id_col``, from ``table`` of DuckDB ``database`` (None: the connection's own); None when
    the table has no aliases column (no label table)."""
    from kgrag import schema as S

    cols = {r[0] for r in con.execute("SELECT column_name FROM duckdb_columns() WHERE database_name = "
                                      "coalesce(?, current_database()) AND table_name = ?",
                                      [database, table.split(".")[-1]]).fetchall()}
    if S.ALIASES not in cols:
        return None
    t = con.sql(f"SELECT {id_col}, {S.ALIASES} FROM {table} ORDER BY {id_col}").to_arrow_table()
    ids = t.column(0).to_pylist()
    out = np.empty(max(ids) + 1 if ids else 0, dtype=object)
    for i, a in zip(ids, t.column(1).to_pylist()):  # one by one: numpy would read equal-length lists as rows
        out[i] = a
    return out


def relation_aliases(con, table: str, database: str | None = None) -> np.ndarray | None:
    """Each relation's aliases by relation id (:func:`aliases_by_id`), or None."""
    from kgrag import schema as S

    return aliases_by_id(con, table, S.RELATION_ID, database)
