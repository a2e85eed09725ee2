"""The params framework's models: ``Strict`` (unknown keys are errors), ``ModuleSection`` (a section that picks a
registered module by name and holds per-module sub-sections), the validation depth, ``ParamsError`` and
``section_hash``. Sections are declared by the packages that use them (``kgrag.kg.params``,
``kgrag.retrieval.params``, ...); ``kgrag.params`` assembles them into the whole ``params.yaml``.

Module choices are checked against the registries by name (the catalogue: nothing imported); a module's
sub-section is validated by that module's own params model. How deep loading goes (``load(..., modules=...)``):

- ``selected`` (the default, every stage): the sub-sections of the modules the params choose are validated, which
  imports those modules and no other; an unselected module's sub-section is checked to be a mapping under a known
  name, and validated when it is first used (``ModuleSection.module_params``);
- ``all`` (``kgrag check``): every sub-section is validated, importing every module the file names.
"""

from __future__ import annotations

import hashlib
import json
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, ClassVar, Sequence

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from kgrag.registry import Registry


class ParamsError(ValueError):
    """Invalid params: the message names file, line and key."""


class Strict(BaseModel):
    """Base of every params model: unknown keys are errors."""

    model_config = ConfigDict(extra="forbid", frozen=True)


#: how deep params validation goes: "selected" (the chosen modules' sub-sections) or "all" (every sub-section)
_DEPTH: ContextVar[str] = ContextVar("kgrag_params_depth", default="selected")
DEPTHS = ("selected", "all")


@contextmanager
def depth(modules: str):
    """Validate to depth ``modules`` (``selected`` or ``all``) inside the block."""
    if modules not in DEPTHS:
        raise ValueError(f"modules: {modules!r}; valid: {', '.join(DEPTHS)}")
    token = _DEPTH.set(modules)
    try:
        yield
    finally:
        _DEPTH.reset(token)


def validating_all() -> bool:
    """Whether every sub-section is validated now (``kgrag check``), not only the selected modules'."""
    return _DEPTH.get() == "all"


def validate_module(reg: Registry[Any], key: str, value: Any) -> BaseModel:
    """A module's sub-section validated by its params model (imports that module); ValueError "key.loc: msg"."""
    if isinstance(value, BaseModel):
        return value
    try:
        return reg.get(key).params.model_validate(value or {})
    except ValidationError as e:
        first = e.errors()[0]
        loc = ".".join(str(p) for p in (key, *first["loc"]))
        raise ValueError(f"{loc}: {first['msg']}") from None


def unknown_module(reg: Registry[Any], field: str, name: Any) -> ValueError:
    """The error of a params key ``field`` naming ``name``, which ``reg`` does not know: it lists the valid choices."""
    return ValueError(f"{field}: unknown {reg.kind} module {name!r}; valid choices: {', '.join(reg.names())}")


def check_module(reg: Registry[Any], field: str, name: Any) -> None:
    """Raises :func:`unknown_module`'s error unless ``reg`` knows ``name`` (the value of params key ``field``)."""
    if name not in reg:
        raise unknown_module(reg, field, name)


class ModuleSection(BaseModel):
    """A section that picks a module by name and may hold per-module sub-sections. The choice is checked by
    name (nothing imported); the chosen module's sub-section is validated at load, the others when first used
    (or all of them under ``load(..., modules="all")``, ``kgrag check``).

    A section says what it picks from in its class line: ``class RetrieveParams(ModuleSection,
    registry=RETRIEVERS, selector="method", section="retrieve")``."""

    model_config = ConfigDict(extra="allow", frozen=True)
    _registry: ClassVar[Registry[Any]]  # the modules it picks from
    _selector: ClassVar[str]  # the field that names the chosen one
    _section: ClassVar[str]  # its key path in params.yaml (error messages)

    def __init_subclass__(cls, *, registry: Registry[Any], selector: str, section: str, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._registry, cls._selector, cls._section = registry, selector, section

    @model_validator(mode="after")
    def _check_modules(self) -> "ModuleSection":
        reg = self._registry
        chosen = getattr(self, self._selector)
        check_module(reg, self._selector, chosen)
        everything = validating_all()
        extra = self.model_extra or {}
        for key, value in list(extra.items()):
            if key not in reg:
                fields = ", ".join(self.__class__.model_fields)
                raise ValueError(
                    f"unknown key {key!r}: neither a field ({fields}) nor a {reg.kind} module "
                    f"({', '.join(reg.names())})"
                )
            if value is not None and not isinstance(value, (dict, BaseModel)):
                raise ValueError(f"{key}: a module's section must be a mapping, got {type(value).__name__}")
            if everything or key == chosen:
                extra[key] = validate_module(reg, key, value)
        return self

    @property
    def name(self) -> str:
        """The selected module's name."""
        return str(getattr(self, self._selector))

    def module_params(self, name: str | None = None) -> BaseModel:
        """Validated params of module ``name`` (default: the selected one), defaults filled in. An unselected
        module's sub-section is validated here, on first use (a ``ParamsError`` names its key)."""
        name = name or self.name
        extra = self.model_extra if self.model_extra is not None else {}
        got = extra.get(name)
        if isinstance(got, BaseModel):
            return got
        if name not in self._registry:
            raise ParamsError(f"params: {self._section}: {unknown_module(self._registry, 'module', name)}")
        try:
            model = validate_module(self._registry, name, got)
        except ValueError as e:
            raise ParamsError(f"params: {self._section}.{e} (`kgrag check` validates every section)") from None
        if name in extra:
            extra[name] = model  # validated once
        return model


def inside(path: str, root: str) -> bool:
    """Whether ``path`` is the file or folder ``root`` or lies below it (links resolved)."""
    import os

    p, r = os.path.realpath(str(path)), os.path.realpath(str(root))
    return p == r or p.startswith(r.rstrip(os.sep) + os.sep)


def section_hash(model: BaseModel, drop: Sequence[str] = ()) -> str:
    """Stable hash of a params model (part of cache keys), the top-level keys ``drop`` left out."""
    data = {k: v for k, v in model.model_dump(mode="json", by_alias=True).items() if k not in drop}
    blob = json.dumps(data, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]

