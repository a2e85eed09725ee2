"""Entity vectors encoded when a question first needs them, and kept on disk by text.

The ``index`` stage no longer embeds every entity name (``index.entities: lazy``, the default): at MetaQA's 43k
names that took 200 s on a 2-core machine, at 25M entities it would take about 18 hours and 38 GB. Retrievers
and reasoners read ``index.entity_vectors[ids]`` as before; :class:`EntityVectors` encodes the names of the ids
not seen yet, in one batch, and keeps their vectors in a :class:`VectorCache`:

- keyed by model, the model package's version and the text (``kgrag.index.zeroshot.entity_text`` of the name),
  so it is shared by every run, experiment, stage process and Dask worker that reads the same folder
  (``$KGRAG_VECTOR_CACHE``, default ``~/.cache/kgrag/vectors``; on a cluster, a folder on shared storage);
- written as Parquet parts, each to a temporary name then renamed, so a reader sees whole parts only and two
  processes may add parts at once; parts are merged when they grow many;
- a model given as a local folder (the fine-tuned scorer) has no disk cache (the key cannot see its weights):
  its vectors are kept for the process only.

A vector is the one of its first encoding: the batch it was encoded in moves it only in the last float bits
(about 1e-7), below the precision every ranking rounds to (``kgrag.ranking.COSINE_DECIMALS``).
"""

from __future__ import annotations

import functools
import hashlib
import os
import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

#: environment variable naming the vector cache's folder
CACHE_ENV = "KGRAG_VECTOR_CACHE"
#: parts in a model's folder above which a reader merges them into one
MERGE_PARTS = 64
KEY, VECTOR = "key", "vector"


def cache_folder() -> Path:
    """The vector cache's folder: ``$KGRAG_VECTOR_CACHE``, else ``~/.cache/kgrag/vectors``."""
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "kgrag" / "vectors")


def _text_key(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()[:16]


def model_key(model: str) -> str | None:
    """The cache's name for ``model``: the packaged model with its package version, or None for a local model
    folder (no disk cache)."""
    from kgrag.index.encoder import PACKAGED

    if model not in PACKAGED:
        return None
    from importlib.metadata import PackageNotFoundError, version

    try:
        v = version(PACKAGED[model].replace("_", "-"))
    except PackageNotFoundError:
        v = "unknown"
    return f"{model}-{v}"


class VectorCache:
    """Unit vectors of texts encoded by one model, on disk under ``folder`` / :func:`model_key` (``folder``
    None: :func:`cache_folder`), and in memory for the process. ``encoded`` counts the texts this instance
    encoded (the others came from the disk or memory)."""

    def __init__(self, model: str, folder: str | Path | None = None, batch_size: int = 256) -> None:
        self.model, self.batch_size = model, batch_size
        key = model_key(model)
        self.dir = None if key is None else Path(folder or cache_folder()) / key
        self._mem: dict[bytes, np.ndarray] = {}
        self._read: set[str] = set()
        self.encoded = 0

    def get(self, texts: list[str]) -> np.ndarray:
        """The vectors of ``texts`` (float32, one row each): from memory, else from the disk's parts, else encoded
        in one batch (sorted distinct texts) and written as a new part."""
        from kgrag.index.encoder import encode

        keys = [_text_key(t) for t in texts]
        if any(k not in self._mem for k in keys):
            self._refresh()
        todo = sorted({t for t, k in zip(texts, keys) if k not in self._mem})
        if todo:
            vecs = encode(todo, model=self.model, batch_size=self.batch_size)
            new = [_text_key(t) for t in todo]
            self._mem.update(zip(new, vecs))
            self.encoded += len(todo)
            self._write(new, vecs)
        if not keys:
            return np.zeros((0, self.dim), np.float32)
        return np.stack([self._mem[k] for k in keys])

    @property
    def dim(self) -> int:
        """The model's vector size."""
        from kgrag.index.encoder import load_model

        m = load_model(self.model)
        dim = getattr(m, "get_embedding_dimension", None) or m.get_sentence_embedding_dimension
        return int(dim())

    # ---- disk -----------------------------------------------------------------------------------------------
    def _parts(self) -> list[Path]:
        return sorted(self.dir.glob("*.parquet")) if self.dir is not None and self.dir.exists() else []

    def _refresh(self) -> None:
        """Read the parts not read yet (a part another process removed while merging is skipped: its rows are
        in the merged part, read on the next refresh)."""
        parts = self._parts()
        for p in parts:
            if p.name in self._read:
                continue
            try:
                t = pq.read_table(p)
            except (FileNotFoundError, OSError):
                continue
            self._read.add(p.name)
            col = t.column(VECTOR).combine_chunks()
            vecs = col.values.to_numpy(zero_copy_only=False).reshape(-1, col.type.list_size)
            for k, v in zip(t.column(KEY).to_pylist(), vecs):
                self._mem.setdefault(k, v)
        if len(parts) > MERGE_PARTS:
            self._merge(parts)

    def _write(self, keys: list[bytes], vecs: np.ndarray, name: str | None = None) -> None:
        if self.dir is None:
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        name = name or f"part-{uuid.uuid4().hex}.parquet"
        flat = pa.array(np.ascontiguousarray(vecs, np.float32).reshape(-1), pa.float32())
        table = pa.table({KEY: pa.array(keys, pa.binary(16)),
                          VECTOR: pa.FixedSizeListArray.from_arrays(flat, vecs.shape[1])})
        tmp = self.dir / f".{name}.{os.getpid()}.tmp"
        pq.write_table(table, tmp)
        os.replace(tmp, self.dir / name)  # atomic: readers see the whole part or none
        self._read.add(name)

    def _merge(self, parts: list[Path]) -> None:
        """One part holding every vector read so far, then the parts it replaces removed."""
        keys = sorted(self._mem)
        self._write(keys, np.stack([self._mem[k] for k in keys]), name=f"merged-{uuid.uuid4().hex}.parquet")
        for p in parts:
            if p.name in self._read:  # never one this process could not read
                p.unlink(missing_ok=True)


def shared_cache(model: str) -> VectorCache:
    """The process's one :class:`VectorCache` of ``model`` in :func:`cache_folder` (the lazy index's entity names
    and the relation-path plan's question texts read the same parts once)."""
    return _shared(model, str(cache_folder()))


@functools.lru_cache(maxsize=4)
def _shared(model: str, folder: str) -> VectorCache:
    return VectorCache(model, folder)


class EntityVectors:
    """``index.entity_vectors`` without an index of every entity: ``vectors[ids]`` is the matrix of the ids' name
    vectors (a zero row for an entity without a name, as the eager index held), encoded on first use through a
    :class:`VectorCache`. ``vectors @ q`` (a search over all entities) encodes every name not cached yet."""

    dtype = np.dtype(np.float32)

    def __init__(self, kg, cache: VectorCache) -> None:
        self.kg, self.cache = kg, cache

    def __len__(self) -> int:
        return int(self.kg.num_entities)

    @property
    def shape(self) -> tuple[int, int]:
        return len(self), self.cache.dim

    def __getitem__(self, ids) -> np.ndarray:
        from kgrag.index.zeroshot import entity_text

        ids = np.arange(len(self))[ids] if isinstance(ids, slice) else np.asarray(ids, dtype=np.int64)
        flat = ids.reshape(-1)
        if len(flat) and (int(flat.min()) < -len(self) or int(flat.max()) >= len(self)):
            raise IndexError(f"entity id out of range 0..{len(self) - 1}")
        names = self.kg.entity_names[flat]
        named = [i for i, n in enumerate(names) if n is not None]
        out = np.zeros((len(flat), self.cache.dim), np.float32)
        if named:
            out[named] = self.cache.get([entity_text(names[i]) for i in named])
        return out.reshape(*ids.shape, out.shape[1]) if ids.ndim != 1 else out

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        a = self[np.arange(len(self))]
        return a if dtype is None else a.astype(dtype)

    def __matmul__(self, other) -> np.ndarray:
        return np.asarray(self) @ other
