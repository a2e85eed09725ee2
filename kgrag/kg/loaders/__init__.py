"""Loaders: source files → entities, relations, triples, questions (+ quarantine).

Shared helpers (line reading, quarantine, the KG builder, JSONL questions) are in ``common``.
"""
