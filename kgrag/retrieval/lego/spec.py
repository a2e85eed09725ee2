"""A stage choice in params: ``{name: <registered module>, params: {...}}``, checked against its registry."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, Field, ValidationError, model_validator

from kgrag.config.base import Strict
from kgrag.retrieval.lego.registries import EXTRACTORS, FILTERS, REFINERS, SCORERS
from kgrag.registry import Registry, UnknownModuleError


class StageSpec(Strict):
    """A module name of one LEGO registry and its params (validated by the module's params model)."""

    _registry: ClassVar[Registry[Any]]
    name: str = Field(description="registered module name")
    params: dict[str, Any] = Field(default_factory=dict, description="the module's params (its own model)")

    @model_validator(mode="after")
    def _check(self) -> "StageSpec":
        try:
            entry = self._registry.get(self.name)
        except UnknownModuleError as e:
            raise ValueError(str(e)) from None
        try:
            entry.params.model_validate(self.params)
        except ValidationError as e:
            first = e.errors()[0]
            loc = ".".join(str(p) for p in (self.name, *first["loc"]))
            raise ValueError(f"{loc}: {first['msg']}") from None
        return self

    def module(self) -> tuple[Any, BaseModel]:
        """(implementation, validated params)."""
        entry = self._registry.get(self.name)
        return entry.impl, entry.params.model_validate(self.params)


class ExtractorSpec(StageSpec):
    """Choice of subgraph extractor."""

    _registry = EXTRACTORS


class FilterSpec(StageSpec):
    """Choice of path filter."""

    _registry = FILTERS


class RefinerSpec(StageSpec):
    """Choice of path refiner."""

    _registry = REFINERS


class ScorerSpec(StageSpec):
    """Choice of relevance scorer."""

    _registry = SCORERS
