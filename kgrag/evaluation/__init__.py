"""Evaluation: per-question scores and the metric registry."""
