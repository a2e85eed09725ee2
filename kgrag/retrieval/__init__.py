"""Retrieval: the retrievers, the LEGO-GraphRAG chain, the shared path/triple scorers, scorer fine-tuning, the per-shard retrieve run."""
