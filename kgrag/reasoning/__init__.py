"""Reasoning: the reasoners, community detectors, and the per-shard answering run."""
