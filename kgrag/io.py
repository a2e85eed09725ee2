"""Artifact paths of the default DAG and small read/write helpers used by stages and flows."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

DATA = Path("data")
INGEST = DATA / "ingest"
QUARANTINE = DATA / "quarantine"
VALIDATED = DATA / "validated"
INDEX = DATA / "index"
FINETUNE = DATA / "finetune"
ST_MODEL = FINETUNE / "st_model"  # the fine-tuned sentence-transformer (LEGO "Fine-tuned ST")
RELPLAN = DATA / "relplan"  # relation-path plan of the relpath retriever (kgrag.index.relplan)
TUNE = DATA / "tune"  # stage tune_answer_scorer's LoRA-tuned LLM (kgrag.tune): model.gguf, tune.json
RETRIEVE = DATA / "retrieve"
GENERATE = DATA / "generate"
TIMINGS = DATA / "timings"  # run records (wall times, call-cache use): no DVC output (kgrag.timings)
REPORTS = Path("reports")
CACHE = Path(".kgrag_cache")
SHARDS = CACHE / "shards"  # the flows' shard results: one Arrow file per shard, named by its cache key
#: rows per Parquet row group of the per-question tables the flows read by range (questions, retrieved,
#: generations): a shard task reads only the groups its range overlaps, so its memory follows the shard
ROW_GROUP = 512


def write_parquet(path: str | Path, table: pa.Table, row_group_size: int | None = None) -> None:
    """Write a table atomically (temp file + rename); ``row_group_size`` rows per group (None: pyarrow's)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    pq.write_table(table, tmp, row_group_size=row_group_size)
    os.replace(tmp, path)


def stream_parquet(path: str | Path, schema: pa.Schema, tables: Iterable[pa.Table],
                   row_group_size: int | None = ROW_GROUP) -> int:
    """Write the tables one after another into one Parquet file, atomically, holding one at a time.

    Each table is cast to ``schema`` (its columns selected by name, so a shard file's extra columns are left
    out). Returns the number of rows written.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    n = 0
    with pq.ParquetWriter(tmp, schema) as w:
        for t in tables:
            t = t.select(schema.names).cast(schema)
            w.write_table(t, row_group_size=row_group_size)
            n += t.num_rows
    os.replace(tmp, path)
    return n


def stream_shards(paths: Iterable[str | Path], outputs: dict[str | Path, pa.Schema],
                  row_group_size: int = ROW_GROUP) -> int:
    """Stream shard files (:func:`write_arrow`) in order into several Parquet files at once, each taking its
    schema's columns (a stage's DVC output and its run records), one shard in memory at a time; atomic.
    Returns the number of rows."""
    tmps = {Path(p): Path(p).with_suffix(Path(p).suffix + ".tmp") for p in outputs}
    for p in tmps:
        p.parent.mkdir(parents=True, exist_ok=True)
    writers = {Path(p): pq.ParquetWriter(tmps[Path(p)], schema) for p, schema in outputs.items()}
    n = 0
    try:
        for path in paths:
            t = read_arrow(path)
            for p, w in writers.items():
                w.write_table(t.select(w.schema.names).cast(w.schema), row_group_size=row_group_size)
            n += t.num_rows
    finally:
        for w in writers.values():
            w.close()
    for p, tmp in tmps.items():
        os.replace(tmp, p)
    return n


def stream_tables(path: str | Path, tables: Iterable[pa.Table], row_group_size: int | None = None) -> int:
    """Write tables whose schemas may differ (a column all null in one, typed in another, as ``from_pylist``
    infers them) into one Parquet file, atomically, holding one table at a time: each is spilled to an Arrow file
    beside ``path``, then all are cast to their unified schema and streamed into the file. One table gives the
    same file as :func:`write_parquet`. Returns the number of rows."""
    import shutil
    import tempfile

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    spill = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        parts, schemas = [], []
        for i, t in enumerate(tables):
            parts.append(write_arrow(spill / f"{i:06d}.arrow", t))
            schemas.append(t.schema)
        if not parts:
            raise ValueError(f"stream_tables: no table to write to {path}")
        schema = pa.unify_schemas(schemas, promote_options="permissive") if len(schemas) > 1 else schemas[0]

        def conformed(part: Path) -> pa.Table:  # a column another table has: nulls here (stream_parquet casts)
            t = read_arrow(part)
            for name in schema.names:
                if name not in t.column_names:
                    t = t.append_column(name, pa.nulls(t.num_rows, schema.field(name).type))
            return t

        return stream_parquet(path, schema, (conformed(p) for p in parts), row_group_size=row_group_size)
    finally:
        shutil.rmtree(spill, ignore_errors=True)


class RowsById:
    """A Parquet file's rows looked up by a key column, read in order a batch at a time: ``take(keys)`` returns
    the rows of those keys, reading on until each is found (or the file ends: a key without a row is left out)
    and forgetting the rows it returns. Files written in the order they are asked for (a stage's outputs follow
    the questions' order) so hold about one batch; any other order is still answered, holding what it skipped."""

    def __init__(self, path: str | Path, key: str, *, columns: Sequence[str] | None = None,
                 batch_size: int = ROW_GROUP) -> None:
        self.key = key
        pf = pq.ParquetFile(path)
        cols = list(columns) if columns is not None else None
        if cols is not None and key not in cols:
            cols.append(key)
        self._batches = pf.iter_batches(batch_size=batch_size, columns=cols)
        self._held: dict[Any, dict] = {}
        self._done = False

    def take(self, keys: Sequence[Any]) -> list[dict]:
        need = {k for k in keys if k not in self._held}
        while need and not self._done:
            b = next(self._batches, None)
            if b is None:
                self._done = True
                break
            for row in b.to_pylist():
                self._held[row[self.key]] = row
                need.discard(row[self.key])
        return [self._held.pop(k) for k in keys if k in self._held]

    @property
    def held(self) -> int:
        """Rows read but not yet taken."""
        return len(self._held)


def write_arrow(path: str | Path, table: pa.Table) -> Path:
    """Write a table as an Arrow IPC file, atomically (temp file + rename): the flows' shard results."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_file(sink, table.schema) as w:
        w.write_table(table)
    os.replace(tmp, path)
    return path


def read_arrow(path: str | Path, columns: Sequence[str] | None = None) -> pa.Table:
    """Read an Arrow IPC file written by :func:`write_arrow` (memory-mapped)."""
    with pa.memory_map(str(path), "r") as src:
        t = pa.ipc.open_file(src).read_all()
    return t.select(list(columns)) if columns is not None else t


def num_rows(path: str | Path) -> int:
    """Rows of a Parquet file (from its footer)."""
    return pq.ParquetFile(path).metadata.num_rows


def read_column(path: str | Path, column: str) -> list:
    """One column of a Parquet file as a list (e.g. the question ids a flow shards by)."""
    return pq.read_table(path, columns=[column]).column(column).to_pylist()


def read_rows(path: str | Path, start: int, stop: int, columns: Sequence[str] | None = None) -> pa.Table:
    """Rows ``[start, stop)`` of a Parquet file, reading only the row groups that hold them."""
    pf = pq.ParquetFile(path)
    groups, offset, first = [], 0, None
    for g in range(pf.metadata.num_row_groups):
        n = pf.metadata.row_group(g).num_rows
        if offset + n > start and offset < stop:
            groups.append(g)
            first = offset if first is None else first
        offset += n
    cols = list(columns) if columns is not None else None
    if not groups:
        return pf.schema_arrow.empty_table().select(cols) if cols else pf.schema_arrow.empty_table()
    t = pf.read_row_groups(groups, columns=cols)
    return t.slice(start - first, stop - start)


def take_rows(path: str | Path, indices: Sequence[int], columns: Sequence[str] | None = None) -> pa.Table:
    """Rows at ``indices`` (file order of the indices given) of a Parquet file, reading only the row groups
    that hold them."""
    if not len(indices):
        t = pq.ParquetFile(path).schema_arrow.empty_table()
        return t.select(list(columns)) if columns is not None else t
    lo, hi = min(indices), max(indices) + 1
    t = read_rows(path, lo, hi, columns)
    return t.take(pa.array([i - lo for i in indices], type=pa.int64()))


def iter_batches(path: str | Path, columns: Sequence[str], batch_size: int = 4096) -> Iterator[pa.RecordBatch]:
    """Stream a Parquet file's columns in batches."""
    yield from pq.ParquetFile(path).iter_batches(batch_size=batch_size, columns=list(columns))


def read_parquet(path: str | Path) -> pa.Table:
    """Read a Parquet file."""
    return pq.read_table(path)


def write_json(path: str | Path, obj: Any) -> None:
    """Write JSON atomically, keys sorted, 2-space indent."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")
    os.replace(tmp, path)


def read_json(path: str | Path) -> Any:
    """Read a JSON file."""
    return json.loads(Path(path).read_text())


def file_hash(path: str | Path, chunk: int = 1 << 20) -> str:
    """sha256 of a file's bytes, first 16 hex digits (input part of cache keys; the outputs a run record
    describes)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while b := f.read(chunk):
            h.update(b)
    return h.hexdigest()[:16]
