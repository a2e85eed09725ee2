"""Shared fixtures: paths to the real data, tiny KGs for unit tests."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pytest

from kgrag import schema as S
from kgrag.env import setup
from kgrag.duckdb_io import write_duckdb
from kgrag.store import KGStore

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("KGRAG_SHARED", ROOT.parent / "shared"))
METAQA = SHARED / "data" / "metaqa"

setup(ROOT)


def tiny_tables(edges: list[tuple[str, str, str]], questions: list[dict] | None = None) -> dict[str, pa.Table]:
    """Tables of a small named KG."""
    names = sorted({h for h, _, _ in edges} | {t for _, _, t in edges})
    rels = sorted({r for _, r, _ in edges})
    eid = {n: i for i, n in enumerate(names)}
    rid = {n: i for i, n in enumerate(rels)}
    q = questions or []
    return {
        "entities": pa.table({S.ENTITY_ID: list(range(len(names))), S.NAME: names}, schema=S.ENTITIES),
        "relations": pa.table({S.RELATION_ID: list(range(len(rels))), S.NAME: rels}, schema=S.RELATIONS),
        "triples": pa.table(
            {S.HEAD: [eid[h] for h, _, _ in edges], S.RELATION: [rid[r] for _, r, _ in edges],
             S.TAIL: [eid[t] for _, _, t in edges]},
            schema=S.TRIPLES,
        ),
        "questions": pa.Table.from_pylist(q, schema=S.QUESTIONS),
    }


MOVIES = [
    ("Heat", "directed_by", "Michael Mann"),
    ("Heat", "starred_actors", "Al Pacino"),
    ("Heat", "starred_actors", "Robert De Niro"),
    ("Collateral", "directed_by", "Michael Mann"),
    ("Collateral", "starred_actors", "Tom Cruise"),
    ("The Irishman", "directed_by", "Martin Scorsese"),
    ("The Irishman", "starred_actors", "Robert De Niro"),
    ("The Irishman", "starred_actors", "Al Pacino"),
    ("Top Gun", "starred_actors", "Tom Cruise"),
    ("Top Gun", "release_year", "1986"),
    ("Island A", "has_tags", "Island B"),  # a component not connected to the rest
]


@pytest.fixture
def movies_db(tmp_path: Path) -> Path:
    """A DuckDB file of the tiny movie KG."""
    path = tmp_path / "kg.duckdb"
    write_duckdb(path, tiny_tables(MOVIES))
    return path


@pytest.fixture
def movies(movies_db: Path) -> KGStore:
    """The tiny movie KG as a store."""
    return KGStore(movies_db)
