"""The vector index retrieval reads (:class:`EmbeddingIndex`: the ``index`` stage's files) and its Parquet format.

The encoder itself (model, ``encode``) is :mod:`kgrag.index.encoder`, re-exported here.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from kgrag import ranking
from kgrag.index.encoder import (  # noqa: F401 (re-exported: the encoder's names as kgrag.index.embed's)
    CACHE_ENV, CACHE_MIN_TEXTS, PACKAGED, encode, load_model, model_path)

VECTOR = "vector"


def write_vectors(path: str | Path, ids: np.ndarray, vecs: np.ndarray) -> None:
    """Store vectors as Parquet: ``id`` and a fixed-size ``vector`` list column."""
    dim = vecs.shape[1] if vecs.ndim == 2 else 0
    flat = pa.array(vecs.reshape(-1), pa.float32())
    table = pa.table({"id": pa.array(ids, pa.int64()), VECTOR: pa.FixedSizeListArray.from_arrays(flat, dim)})
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)


def read_vectors(path: str | Path) -> np.ndarray:
    """Vectors from Parquet as a dense matrix indexed by id (row i = id i)."""
    t = pq.read_table(path)
    ids = t.column("id").to_numpy()
    col = t.column(VECTOR).combine_chunks()
    dim = col.type.list_size
    vecs = col.values.to_numpy(zero_copy_only=False).reshape(-1, dim)
    out = np.zeros((int(ids.max()) + 1 if len(ids) else 0, dim), dtype=np.float32)
    out[ids] = vecs
    return out


@dataclass(frozen=True)
class EmbeddingIndex:
    """Entity, relation and (optionally) triple vectors, all unit-normalized, row = id. ``entity_vectors`` is a
    matrix, or :class:`kgrag.index.entity_vectors.EntityVectors` (encoded when first read) where the index stage
    embedded no entity (``index.entities: lazy``)."""

    model: str
    entity_vectors: Any
    relation_vectors: np.ndarray
    triple_vectors: np.ndarray | None = None

    @staticmethod
    def load(folder: str | Path, model: str, kg: Any = None) -> "EmbeddingIndex":
        """Read an index folder written by the ``index`` stage. Where it holds no entity vectors
        (``index.entities: lazy``), they are encoded from ``kg``'s names when first read, through the vector
        cache (:mod:`kgrag.index.entity_vectors`)."""
        folder = Path(folder)
        tri, ents = folder / "triples.parquet", folder / "entities.parquet"
        if ents.exists():
            entity_vectors = read_vectors(ents)
        elif kg is None:
            raise ValueError(f"the index {folder} holds no entity vectors (index.entities: lazy); open it with its KG "
                             "(EmbeddingIndex.load(folder, model, kg=...)) to encode them when first read")
        else:
            from kgrag.index.entity_vectors import EntityVectors, shared_cache

            entity_vectors = EntityVectors(kg, shared_cache(model))
        return EmbeddingIndex(
            model=model,
            entity_vectors=entity_vectors,
            relation_vectors=read_vectors(folder / "relations.parquet"),
            triple_vectors=read_vectors(tri) if tri.exists() else None,
        )

    def encode(self, texts: list[str]) -> np.ndarray:
        """Embed queries with the index's model."""
        return encode(texts, model=self.model)

    def search_entities(self, query_vec: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Exact k-NN over entity vectors: (ids, cosine scores rounded to ``kgrag.ranking.COSINE_DECIMALS``),
        best first, ties by id."""
        scores = ranking.rounded(self.entity_vectors @ query_vec, ranking.COSINE_DECIMALS)
        top = ranking.top_k(scores, k, decimals=ranking.COSINE_DECIMALS)  # row = id: ties by id
        return top.astype(np.int64), scores[top]


@functools.lru_cache(maxsize=2)
def open_index(folder: str, model: str, kg: Any = None) -> EmbeddingIndex:
    """A process-wide cached ``EmbeddingIndex`` (``kg``: the KG whose entity names a lazy index encodes)."""
    return EmbeddingIndex.load(folder, model, kg)


def has_index(folder: str | Path | None) -> bool:
    """``folder`` holds an index the ``index`` stage wrote (its ``meta.json``; an older index: its entity table)."""
    return bool(folder) and (Path(folder, "meta.json").exists() or Path(folder, "entities.parquet").exists())


def index_files_hash(folder: str | Path) -> str:
    """A hash of an index folder's files (its stage's outputs), for the flows' cache keys."""
    from kgrag.io import file_hash

    names = ("entities.parquet", "relations.parquet", "triples.parquet", "meta.json")
    return "-".join(file_hash(Path(folder) / f) for f in names if (Path(folder) / f).exists())
