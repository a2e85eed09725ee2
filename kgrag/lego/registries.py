"""The four LEGO sub-registries (one per stage kind, plus relevance scorers)."""

from typing import Any

from kgrag.registry import Registry

EXTRACTORS: Registry[Any] = Registry("lego extractor")
FILTERS: Registry[Any] = Registry("lego filter")
REFINERS: Registry[Any] = Registry("lego refiner")
SCORERS: Registry[Any] = Registry("lego scorer")
