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
    # no Prefect result is persisted: the flows' shard files are their results (Arrow, never a pickle)
    "PREFECT_RESULTS_PERSIST_BY_DEFAULT": "false",
    "PREFECT_LOGGING_LEVEL": "WARNING",
    "PREFECT_SERVER_LOGGING_LEVEL": "WARNING",
    # llama.cpp (and torch) run their threads through OpenMP, whose default busy-wait collapses throughput when
    # the 2 cores are shared (9.6 vs 29.7 tok/s measured): waiting threads sleep instead. Read when the OpenMP
    # runtime loads, so setup() runs before llama_cpp / torch are imported.
    "OMP_WAIT_POLICY": "PASSIVE",
    # A fresh Prefect home migrates its database on first start: slow on a busy 2-core machine.
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "180",
}


#: torch's CPU kernels (oneDNN) pick the widest vector instructions the processor has, and AVX-512 kernels round
#: differently from AVX2 ones: MiniLM's relation vectors (data/index) then differed in their last bits, and with
#: them dvc.lock, between an AVX-512 machine and the AVX2 ones that made the committed dvc.lock (seen 2026-12-04).
#: Capped at AVX2, which every x86-64 machine of the last decade has, data/index is the same bytes on both (the
#: llama.cpp wheel is built for the same target, Makefile). Only the index stage takes the cap
#: (:func:`stable_vectors`): in a training process it costs 4.5x on an AVX-512 host (G-Retriever's train-stage
#: test, 181 s against 40 s), and the other stages' outputs do not depend on it (relplan's question vectors differ
#: in their last bits with or without it; every output after relplan is the same bytes). An exported variable wins.
STABLE_VECTORS = {"ONEDNN_MAX_CPU_ISA": "AVX2"}


def stable_vectors() -> None:
    """Cap torch's oneDNN kernels at AVX2 in this process (:data:`STABLE_VECTORS`), before its first matrix
    product, so that the vectors it writes are the same bytes on AVX2 and AVX-512 machines."""
    for k, v in STABLE_VECTORS.items():
        os.environ.setdefault(k, v)


def setup(root: str | Path = ".") -> None:
    """Set the defaults (existing variables win); Prefect's home and results go under ``.kgrag_cache``."""
    for k, v in DEFAULTS.items():
        os.environ.setdefault(k, v)
    cache = (Path(root) / ".kgrag_cache").resolve()
    os.environ.setdefault("PREFECT_HOME", str(cache / "prefect_home"))
    os.environ.setdefault("PREFECT_LOCAL_STORAGE_PATH", str(cache / "prefect_results"))
    for var in ("PREFECT_HOME", "PREFECT_LOCAL_STORAGE_PATH"):
        Path(os.environ[var]).mkdir(parents=True, exist_ok=True)


#: set to 1 to see full Python tracebacks (stages and ``kgrag`` print a few lines per error otherwise)
TRACEBACK_ENV = "KGRAG_TRACEBACK"
MESSAGE_CHARS = 400


def _where(tb) -> str:
    """``file:line`` of the innermost traceback frame in this project's code (kgrag/, flows/, stages/)."""
    import traceback

    frames = traceback.extract_tb(tb)
    ours = [f for f in frames if any(f"/{d}/" in f.filename for d in ("kgrag", "flows", "stages"))]
    f = (ours or frames or [None])[-1]
    if f is None:
        return ""
    try:
        name = os.path.relpath(f.filename)
    except ValueError:
        name = f.filename
    return f"{name}:{f.lineno}"


def short_error(e: BaseException) -> str:
    """An error in a few lines: what (type and the message's first ``MESSAGE_CHARS`` characters), where (file:line),
    and how to see the rest."""
    msg = " ".join(str(e).split())
    msg = msg if len(msg) <= MESSAGE_CHARS else msg[:MESSAGE_CHARS] + f" … ({len(msg)} characters)"
    where = _where(e.__traceback__)
    return (f"error: {type(e).__name__}: {msg}" + (f"\n  at {where}" if where else "")
            + f"\n  ({TRACEBACK_ENV}=1 prints the whole traceback)")


class _ShortTracebacks:
    """Logging filter: a record carrying an exception keeps its message and the exception's short form, not the
    traceback (Prefect logs one per failed task and flow run)."""

    def filter(self, record) -> bool:  # noqa: D102
        if record.exc_info and record.exc_info[1] is not None:
            e = record.exc_info[1]
            msg = " ".join(str(e).split())[:MESSAGE_CHARS]
            record.msg = f"{record.getMessage()} [{type(e).__name__}: {msg}]"
            record.args, record.exc_info, record.exc_text = (), None, None
        return True


def short_errors() -> None:
    """Errors in a few lines, unless ``KGRAG_TRACEBACK`` is set: an uncaught exception prints
    :func:`short_error` and exits 1, and the logging handlers configured so far (Prefect's console handler)
    drop tracebacks. Call it after Prefect is imported (its logging set up)."""
    import logging
    import sys

    if os.environ.get(TRACEBACK_ENV):
        return

    def hook(kind, e, tb):
        if issubclass(kind, KeyboardInterrupt):
            print("interrupted", file=sys.stderr)
            return
        print(short_error(e.with_traceback(tb)), file=sys.stderr)

    sys.excepthook = hook
    for logger in [logging.getLogger(), *(logging.getLogger(n) for n in list(logging.root.manager.loggerDict))]:
        for h in getattr(logger, "handlers", []):
            if not any(isinstance(f, _ShortTracebacks) for f in h.filters):  # a shared handler: once
                h.addFilter(_ShortTracebacks())
