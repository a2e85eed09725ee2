"""Explicit Prefect cache keys: task name + module code version + params hash + input hash + shard."""

from __future__ import annotations

import hashlib
import inspect
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import kgrag


def _source(m: ModuleType) -> str:
    """A module's source; for a package, the sources of every .py file under it (sorted by path)."""
    if hasattr(m, "__path__"):
        files = sorted(f for d in m.__path__ for f in Path(d).rglob("*.py"))
        return "".join(f"{f.name}\n{f.read_text()}" for f in files)
    return inspect.getsource(m)


def code_version(*modules: ModuleType) -> str:
    """Hash of the source of the kgrag modules (or whole packages) a task runs through.

    TASK_SOURCE does not see imported code, so every task keys on this explicitly.
    """
    src = "".join(_source(m) for m in modules)
    return f"{kgrag.__version__}-{hashlib.sha256(src.encode()).hexdigest()[:12]}"


def folder_hash(folder: str | Path) -> str:
    """sha256 over the relative paths and bytes of every file under ``folder`` ("absent" when missing)."""
    folder = Path(folder)
    if not folder.exists():
        return "absent"
    h = hashlib.sha256()
    for f in sorted(p for p in folder.rglob("*") if p.is_file()):
        h.update(str(f.relative_to(folder)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


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


def progress(stage: str, done: int, total: int) -> None:
    """One progress line on stderr."""
    import sys

    print(f"[{stage}] {done}/{total} questions", file=sys.stderr, flush=True)
