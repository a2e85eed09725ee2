"""The four LEGO sub-registries (one per stage kind, plus relevance scorers); they live in ``kgrag.registry``."""

from kgrag.registry import EXTRACTORS, FILTERS, REFINERS, SCORERS  # noqa: F401
