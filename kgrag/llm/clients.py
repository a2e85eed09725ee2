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

from pydantic import BaseModel, Field, model_validator

from kgrag.config.base import Strict
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


class LLMSettings(Strict):
    """The LLM of a retrieval module that calls one (``retrieve.lego.llm``: LEGO's LLM scorers and refiner;
    ``retrieve.relpath.llm``: the loglik planner), built only when a chosen stage calls it."""

    backend: str = Field("llamacpp", description="registered LLM backend (`kgrag modules`)")
    backend_params: dict[str, Any] = Field(default_factory=dict, description="the backend's params")
    timeout_s: float = Field(120.0, gt=0.0, description="per-call timeout")
    retries: int = Field(2, ge=0, description="retries after a failed call")
    backoff_s: float = Field(0.5, ge=0.0, description="first retry delay; doubles each retry")
    cache: str | None = Field(".kgrag_cache/llm_calls.sqlite", description="SQLite call cache; None = no cache")

    @model_validator(mode="after")
    def _check_backend(self) -> "LLMSettings":
        BACKENDS.get(self.backend).params.model_validate(self.backend_params)
        return self


_SETTINGS_CLIENTS: dict[str, Any] = {}


def llm_client(settings: LLMSettings) -> Any:
    """A process-wide ``LLMClient`` per settings (backend loaded on first use)."""
    key = json.dumps(settings.model_dump(mode="json"), sort_keys=True)
    with _LOCK:
        if key not in _SETTINGS_CLIENTS:
            _SETTINGS_CLIENTS[key] = client_for(settings, cache=settings.cache, shared=False)
        return _SETTINGS_CLIENTS[key]
