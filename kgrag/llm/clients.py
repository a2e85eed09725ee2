"""The one factory that turns a params section into an LLM client: the chosen backend behind the call cache
and the retry policy.

Every place that talks to an LLM (the generate flow, ``kgrag ask``, the evaluate stage's judge, LEGO's LLM
stages, the benches) builds its client here, from whichever section names the backend:

- ``generate`` (``GenerateParams``) and ``evaluate.judge_backend`` (``JudgeBackendParams``): ``backend`` plus
  the backend's own sub-section (``module_params()``);
- ``retrieve.lego.llm`` (``LLMSettings``): ``backend`` plus ``backend_params`` and its own ``cache``.

Clients are shared per process and configuration (a backend loads its model once).
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from kgrag.llm.calls import CallCache, LLMClient
from kgrag.registry import BACKENDS


#: the call cache every stage shares (``kgrag.io.CACHE / "llm_calls.sqlite"``)
DEFAULT_CACHE = ".kgrag_cache/llm_calls.sqlite"

_CLIENTS: dict[str, LLMClient] = {}
_LOCK = threading.Lock()


def backend_params(section: Any, overrides: dict[str, Any] | None = None) -> BaseModel:
    """The validated params of the backend a section names, with ``overrides`` (e.g. ``n_threads``) applied."""
    entry = BACKENDS.get(section.backend)
    if hasattr(section, "module_params"):
        bp = section.module_params()
    else:
        bp = entry.params.model_validate(getattr(section, "backend_params", None) or {})
    if overrides:
        bp = entry.params.model_validate({**bp.model_dump(), **overrides})
    return bp


def client_for(section: Any, *, cache: str | Path | None = DEFAULT_CACHE, overrides: dict[str, Any] | None = None,
               shared: bool = True) -> LLMClient:
    """An ``LLMClient`` for a params section that names a backend.

    Parameters
    ----------
    section
        ``GenerateParams``, ``JudgeBackendParams`` or ``LLMSettings`` (anything with ``backend``,
        ``timeout_s``, ``retries`` and either ``module_params()`` or ``backend_params``); ``backoff_s`` defaults
        to 0.5 s where the section has none.
    cache
        SQLite call cache path; None = no cache (benches that time the backend itself).
    overrides
        Backend params replacing the section's (``{"n_threads": 1}``), validated by the backend's model.
    shared
        Reuse one client per process and configuration (False: a fresh backend, e.g. to time a cold load).
    """
    bp = backend_params(section, overrides)
    retries = int(getattr(section, "retries", 2))
    backoff = float(getattr(section, "backoff_s", 0.5))
    timeout = float(getattr(section, "timeout_s", 120.0))
    key = json.dumps([section.backend, bp.model_dump(mode="json"), timeout, retries, backoff,
                      str(cache) if cache else None], sort_keys=True, default=str)

    def build() -> LLMClient:
        backend = BACKENDS.get(section.backend).impl(bp, timeout_s=timeout)
        return LLMClient(backend, cache=CallCache(cache) if cache else None, retries=retries, backoff_s=backoff)

    if not shared:
        return build()
    with _LOCK:
        if key not in _CLIENTS:
            _CLIENTS[key] = build()
        return _CLIENTS[key]
