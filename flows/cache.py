"""Explicit Prefect cache keys: task name + module code version + params hash + input hash + shard."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from kgrag.versioning import closure_version, code_version, folder_hash  # noqa: F401 (the flows' cache-key helpers)


def shard_key(_context: Any, parameters: dict[str, Any]) -> str:
    """cache_key_fn of every shard task: the caller passes all key parts in ``key``."""
    return hashlib.sha256(json.dumps(parameters["key"], sort_keys=True).encode()).hexdigest()


def shard_key_parts(
    *, task: str, module_version: str, core: str, params_hash: str, inputs: str, ids: list[str]
) -> dict:
    """The parts of a shard's cache key."""
    return {
        "task": task, "module": module_version, "core": core, "params": params_hash,
        "inputs": inputs, "ids": hashlib.sha256("\n".join(ids).encode()).hexdigest(),
    }


def shards(items: list, size: int) -> list[list]:
    """Consecutive chunks of ``size`` items."""
    return [items[i : i + size] for i in range(0, len(items), size)]


def progress_bar(stage: str, total: int):
    """A tqdm bar on stderr counting the stage's questions (rate and ETA in questions); advanced as shards
    finish (``bar.update(n)``); close it when done."""
    import sys

    from tqdm import tqdm

    return tqdm(total=total, desc=stage, unit="q", file=sys.stderr, mininterval=1.0, smoothing=0.1)


def progress(stage: str, done: int, total: int) -> None:
    """One progress line on stderr."""
    import sys

    print(f"[{stage}] {done}/{total} questions", file=sys.stderr, flush=True)
