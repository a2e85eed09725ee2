"""Name → implementation registries, one per module kind.

A module is one file that calls ``REGISTRY.register("name", params=ParamsModel)`` on its class.
Unknown names fail and list the valid choices; registering a name twice fails.
"""

from __future__ import annotations

import hashlib
import inspect
from dataclasses import dataclass
from typing import Any, Callable, Generic, TypeVar

from pydantic import BaseModel, ConfigDict

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
        """The entry for ``name``; an unknown name raises and lists the valid ones."""
        _ensure_loaded()
        try:
            return self._entries[name]
        except KeyError:
            raise UnknownModuleError(
                f"unknown {self.kind} module {name!r}; valid choices: {', '.join(self.names())}"
            ) from None

    def names(self) -> list[str]:
        """Registered names, sorted."""
        _ensure_loaded()
        return sorted(self._entries)

    def __contains__(self, name: str) -> bool:
        _ensure_loaded()
        return name in self._entries


def _where(obj: Any) -> str:
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', '?')}"


def _code_version(impl: Any, version: str) -> str:
    """Declared version + hash of the module's source file: part of every cache key."""
    try:
        src = inspect.getsource(inspect.getmodule(impl))  # type: ignore[arg-type]
    except (OSError, TypeError):
        src = ""
    return f"{version}-{hashlib.sha256(src.encode()).hexdigest()[:12]}"


RETRIEVERS: Registry[Any] = Registry("retriever")
BACKENDS: Registry[Any] = Registry("backend")
LOADERS: Registry[Any] = Registry("loader")
TEXTUALIZERS: Registry[Any] = Registry("textualizer")

ALL: dict[str, Registry[Any]] = {
    r.kind: r for r in (LOADERS, RETRIEVERS, TEXTUALIZERS, BACKENDS)
}

_loaded = False


def all_registries() -> dict[str, Registry[Any]]:
    """Every registry by kind, with the built-in modules loaded."""
    _ensure_loaded()
    return dict(ALL)


def _ensure_loaded() -> None:
    """Import the built-in module packages so that their registrations run."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    import kgrag.backends  # noqa: F401
    import kgrag.loaders  # noqa: F401
    import kgrag.retrievers  # noqa: F401
    import kgrag.textualize  # noqa: F401
    import kgrag.reasoners  # noqa: F401
    from kgrag.community import DETECTORS
    from kgrag.reasoners.core import REASONERS
    from kgrag.lego.registries import EXTRACTORS, FILTERS, REFINERS, SCORERS
    from kgrag.task_runners import TASK_RUNNERS

    ALL.update({r.kind: r for r in (EXTRACTORS, FILTERS, REFINERS, SCORERS, DETECTORS, REASONERS, TASK_RUNNERS)})
