"""Name → implementation registries, one per module kind. A leaf: it imports no module it registers.

A module is one file that calls ``REGISTRY.register("name", params=ParamsModel, version="1")`` on its class
or function. The built-in names and the files that register them are listed in ``kgrag.catalogue`` (strings
only); ``get`` imports a listed file the first time one of its names is looked up, so a stage imports only the
modules its params choose, and layers point one way: plugins import the registry, never the reverse.
Unknown names fail and list the valid choices; registering a name twice fails.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
from dataclasses import dataclass
from typing import Any, Callable, Generic, TypeVar

from pydantic import BaseModel, ConfigDict

from kgrag.catalogue import BUILTINS

T = TypeVar("T")


class NoParams(BaseModel):
    """Params of a module that takes none."""

    model_config = ConfigDict(extra="forbid")


class UnknownModuleError(KeyError):
    """An unknown module name; the message lists the valid names."""

    def __str__(self) -> str:  # KeyError quotes its message; print it plainly
        return str(self.args[0])


class DuplicateModuleError(ValueError):
    """A name registered twice for the same kind."""


@dataclass(frozen=True)
class Entry(Generic[T]):
    """One registered implementation."""

    name: str
    impl: T
    params: type[BaseModel]
    version: str
    doc: str


class Registry(Generic[T]):
    """Registry of one module kind (``retriever``, ``backend``, ...)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, Entry[T]] = {}

    def register(
        self, name: str, *, params: type[BaseModel] = NoParams, version: str = "1"
    ) -> Callable[[T], T]:
        """Decorator registering ``impl`` under ``name`` with its params model and code version."""

        def deco(impl: T) -> T:
            if name in self._entries:
                raise DuplicateModuleError(
                    f"{self.kind} module {name!r} is already registered "
                    f"(by {_where(self._entries[name].impl)})"
                )
            doc = (inspect.getdoc(impl) or "").split("\n")[0]
            self._entries[name] = Entry(name, impl, params, _code_version(impl, version), doc)
            return impl

        return deco

    def get(self, name: str) -> Entry[T]:
        """The entry for ``name`` (importing its built-in module on first use); an unknown name raises and
        lists the valid ones."""
        if name not in self._entries:
            module = BUILTINS.get(self.kind, {}).get(name)
            if module is not None:
                importlib.import_module(module)
        try:
            return self._entries[name]
        except KeyError:
            raise UnknownModuleError(
                f"unknown {self.kind} module {name!r}; valid choices: {', '.join(self.names())}"
            ) from None

    def names(self) -> list[str]:
        """Registered and built-in names, sorted (imports nothing)."""
        return sorted(set(self._entries) | set(BUILTINS.get(self.kind, {})))

    def load_all(self) -> "Registry[T]":
        """Import every built-in module of this kind (for listings and contract tests)."""
        for name in BUILTINS.get(self.kind, {}):
            self.get(name)
        return self

    def __contains__(self, name: str) -> bool:
        return name in self._entries or name in BUILTINS.get(self.kind, {})


def _where(obj: Any) -> str:
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', '?')}"


def _code_version(impl: Any, version: str) -> str:
    """Declared version + hash of the module's source file: part of every cache key."""
    try:
        src = inspect.getsource(inspect.getmodule(impl))  # type: ignore[arg-type]
    except (OSError, TypeError):
        src = ""
    return f"{version}-{hashlib.sha256(src.encode()).hexdigest()[:12]}"


LOADERS: Registry[Any] = Registry("loader")
RETRIEVERS: Registry[Any] = Registry("retriever")
TEXTUALIZERS: Registry[Any] = Registry("textualizer")
BACKENDS: Registry[Any] = Registry("backend")
REASONERS: Registry[Any] = Registry("reasoner")
DETECTORS: Registry[Any] = Registry("community_detector")
EXTRACTORS: Registry[Any] = Registry("lego_extractor")
FILTERS: Registry[Any] = Registry("lego_filter")
REFINERS: Registry[Any] = Registry("lego_refiner")
SCORERS: Registry[Any] = Registry("lego_scorer")
TASK_RUNNERS: Registry[Any] = Registry("task_runner")
GRAPH_ENCODERS: Registry[Any] = Registry("graph_encoder")
METRICS: Registry[Any] = Registry("metric")
#: report.html's view of a reasoner's trace, registered under the reasoner's name:
#: ``(trace, graph_index, marks, question_data, uid) -> html`` (``kgrag.reporting.trace_views``)
TRACE_VIEWS: Registry[Any] = Registry("trace_view")

ALL: dict[str, Registry[Any]] = {
    r.kind: r
    for r in (LOADERS, RETRIEVERS, TEXTUALIZERS, BACKENDS, REASONERS, DETECTORS, EXTRACTORS, FILTERS, REFINERS,
              SCORERS, TASK_RUNNERS, GRAPH_ENCODERS, METRICS, TRACE_VIEWS)
}
assert set(ALL) == set(BUILTINS), "every kind in kgrag.catalogue needs its registry here"


def all_registries() -> dict[str, Registry[Any]]:
    """Every registry by kind, with every built-in module imported."""
    return {kind: reg.load_all() for kind, reg in ALL.items()}
