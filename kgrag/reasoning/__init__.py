"""Reasoning: the reasoners, community detectors, and the generate stage's per-shard run (generate.py)."""
