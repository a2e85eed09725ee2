"""Process environment defaults: telemetry off, model hubs offline, Prefect state inside the repo."""

from __future__ import annotations

import os
from pathlib import Path

DEFAULTS = {
    "DO_NOT_TRACK": "1",
    "DVC_NO_ANALYTICS": "1",
    "GX_ANALYTICS_ENABLED": "false",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "PREFECT_RESULTS_PERSIST_BY_DEFAULT": "true",
    "PREFECT_LOGGING_LEVEL": "WARNING",
    "PREFECT_SERVER_LOGGING_LEVEL": "WARNING",
    # llama.cpp (and torch) run their threads through OpenMP, whose default busy-wait collapses throughput when
    # the 2 cores are shared (9.6 vs 29.7 tok/s measured): waiting threads sleep instead. Read when the OpenMP
    # runtime loads, so setup() runs before llama_cpp / torch are imported.
    "OMP_WAIT_POLICY": "PASSIVE",
    # A fresh Prefect home migrates its database on first start: slow on a busy 2-core machine.
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "180",
}


def setup(root: str | Path = ".") -> None:
    """Set the defaults (existing variables win); Prefect's home and results go under ``.kgrag_cache``."""
    for k, v in DEFAULTS.items():
        os.environ.setdefault(k, v)
    cache = (Path(root) / ".kgrag_cache").resolve()
    os.environ.setdefault("PREFECT_HOME", str(cache / "prefect_home"))
    os.environ.setdefault("PREFECT_LOCAL_STORAGE_PATH", str(cache / "prefect_results"))
    for var in ("PREFECT_HOME", "PREFECT_LOCAL_STORAGE_PATH"):
        Path(os.environ[var]).mkdir(parents=True, exist_ok=True)
