"""Code and input versions for cache keys (Prefect shard keys, the LEGO instance table)."""

from __future__ import annotations

import functools
import hashlib
import inspect
from pathlib import Path
from types import ModuleType

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


@functools.lru_cache(maxsize=None)
def closure_version(entry: str) -> str:
    """Hash of every project file module ``entry`` (``flows.retrieve``) can run: its import closure plus the
    built-in modules of the kinds it looks up (``kgrag.code.depgraph.closure``, the same set as its stage's DVC
    deps), so no hand-kept module list can miss a file. Computed once per process (the source does not change
    under a running stage)."""
    from kgrag.code.depgraph import closure

    root = Path(kgrag.__file__).resolve().parents[1]
    h = hashlib.sha256()
    for rel in sorted(closure(root, entry)):
        h.update(rel.encode())
        h.update((root / rel).read_bytes())
    return f"{kgrag.__version__}-{h.hexdigest()[:12]}"


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


def machine() -> dict:
    """Where numbers were taken: CPU model, cores, Python, platform."""
    import os
    import platform

    cpu = ""
    try:
        cpu = next(ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"cpu": cpu or platform.processor(), "cores": os.cpu_count(), "python": platform.python_version(),
            "platform": platform.platform()}
