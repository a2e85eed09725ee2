"""The shared scorers of relations, paths and triples (LEGO-GraphRAG's scoring modules): the LEGO
chain, relpath and ToG use them, each registered as a `lego_scorer`."""
