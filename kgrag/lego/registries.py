"""The four LEGO sub-registries (one per stage kind, plus relevance scorers)."""

from typing import Any

from kgrag.registry import Registry

EXTRACTORS: Registry[Any] = Registry("lego_extractor")
FILTERS: Registry[Any] = Registry("lego_filter")
REFINERS: Registry[Any] = Registry("lego_refiner")
SCORERS: Registry[Any] = Registry("lego_scorer")
