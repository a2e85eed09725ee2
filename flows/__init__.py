"""Prefect flows: retrieve, generate and evaluate as cached tasks over question shards."""
