"""Artifact paths of the default DAG and small read/write helpers used by stages and flows."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

DATA = Path("data")
INGEST = DATA / "ingest"
QUARANTINE = DATA / "quarantine"
VALIDATED = DATA / "validated"
INDEX = DATA / "index"
FINETUNE = DATA / "finetune"
ST_MODEL = FINETUNE / "st_model"  # the fine-tuned sentence-transformer (LEGO "Fine-tuned ST")
RELPLAN = DATA / "relplan"  # relation-path plan of the relpath retriever (kgrag.relplan)
RETRIEVE = DATA / "retrieve"
GENERATE = DATA / "generate"
TIMINGS = DATA / "timings"  # run records (wall times, call-cache use): no DVC output (kgrag.timings)
REPORTS = Path("reports")
CACHE = Path(".kgrag_cache")


def write_parquet(path: str | Path, table: pa.Table) -> None:
    """Write a table atomically (temp file + rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    pq.write_table(table, tmp)
    os.replace(tmp, path)


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
