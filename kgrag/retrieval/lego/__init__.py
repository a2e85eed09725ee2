"""LEGO-GraphRAG retrieval modules: subgraph extraction → path filtering → path refinement, each swappable.

Four sub-registries hold the stage implementations, one file each, all plain keyword-only functions that
never mutate their inputs:

* ``EXTRACTORS``: ``fn(*, graph, seeds, hops, params, ctx) -> Extracted``
* ``FILTERS``: ``fn(*, graph, extracted, seeds, hops, params, ctx) -> list[Path]`` (best first)
* ``REFINERS``: ``fn(*, paths, texts, params, ctx) -> np.ndarray`` (indices of the kept paths, best first)
* ``SCORERS``: ``fn(*, query, docs, params, ctx) -> np.ndarray`` (one relevance score per doc, higher = better)

The ``lego`` retriever (``kgrag/retrieval/retrievers/lego.py``) chains them; ``kgrag/retrieval/lego/presets.py`` holds the
paper's Table 4 instances.

References
----------
Cao et al., LEGO-GraphRAG: Modularizing Graph-based Retrieval-Augmented Generation for Design Space
Exploration (2024), sections 3-4, Tables 2 and 4.
"""

from kgrag.retrieval.lego.registries import EXTRACTORS, FILTERS, REFINERS, SCORERS  # noqa: F401
