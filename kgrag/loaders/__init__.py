"""Loaders: source files → entities, relations, triples, questions (+ quarantine)."""

from kgrag.loaders import metaqa  # noqa: F401
