"""The flows' shard cache: one Arrow file per shard, named by its key (task name + module code version + core
code version + params hash + input hash + question ids), under ``.kgrag_cache/shards/<task>/``.

A flow passes its tasks file paths, hashes and row ranges, never rows (Prefect caps a flow run's parameters at
512 KB, and a pickled row list is a file anyone could swap): a shard task reads its own slice of the stage's
input files and writes its rows to the shard file, and the stage streams the shard files into its output. A
shard whose file exists is not submitted again, so an interrupted stage resumes with its finished shards, and a
changed param re-runs only what it touches.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from kgrag.code.versioning import closure_version, code_version, folder_hash  # noqa: F401 (the flows' cache-key helpers)

#: suffix of a shard file whose rows hold failed LLM calls: written for the stage's output, never taken as a
#: finished shard (the next run submits the shard again; its successful calls come from the call cache)
PARTIAL = ".partial.arrow"


def shard_key_parts(
    *, task: str, module_version: str, core: str, params_hash: str, inputs: str, ids: list[str]
) -> dict:
    """The parts of a shard's cache key."""
    return {
        "task": task, "module": module_version, "core": core, "params": params_hash,
        "inputs": inputs, "ids": hashlib.sha256("\n".join(ids).encode()).hexdigest(),
    }


def shard_file(shard_dir: str | Path, key: dict) -> Path:
    """The finished-shard file of ``key``: ``<shard_dir>/<task>/<sha256 of the key>.arrow``."""
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()
    return Path(shard_dir) / key["task"] / f"{digest}.arrow"


def partial_file(path: str | Path) -> Path:
    """Where a shard with failed calls writes its rows (beside its finished-shard file, never read as one)."""
    path = Path(path)
    return path.with_name(path.name.removesuffix(".arrow") + PARTIAL)


def ranges(n: int, size: int) -> list[tuple[int, int]]:
    """Consecutive ``[start, stop)`` row ranges of ``size`` rows covering ``n`` rows."""
    return [(i, min(i + size, n)) for i in range(0, n, size)]


def progress_bar(stage: str, total: int):
    """A tqdm bar on stderr counting the stage's questions (rate and ETA in questions); advanced as shards
    finish (``bar.update(n)``); close it when done."""
    import sys

    from tqdm import tqdm

    return tqdm(total=total, desc=stage, unit="q", file=sys.stderr, mininterval=1.0, smoothing=0.1)
