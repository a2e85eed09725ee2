"""The built-in modules, by kind and name: the one list of what ``kgrag`` ships.

Pure data (module paths as strings): importing it imports no algorithm. ``kgrag.registry`` reads it to know
every built-in name without importing anything, and imports a module the first time one of its names is
looked up (``Registry.get``), so a stage loads only the modules its params choose. A module file registers
its names with ``REGISTRY.register(name, params=..., version=...)``; a test checks that every module listed
here registers exactly the names listed for it and that no other file registers anything.

To add a module: write the file, register it there, add one line here.
"""

from __future__ import annotations

#: kind -> name -> module that registers it
BUILTINS: dict[str, dict[str, str]] = {
    "loader": {
        "explagraphs": "kgrag.loaders.explagraphs",
        "gretriever": "kgrag.loaders.gretriever",
        "jsonl": "kgrag.loaders.jsonl",
        "metaqa": "kgrag.loaders.metaqa",
        "ntriples": "kgrag.loaders.ntriples",
        "triples": "kgrag.loaders.triples",
    },
    "retriever": {
        "khop": "kgrag.retrievers.khop",
        "lego": "kgrag.retrievers.lego",
        "none": "kgrag.retrievers.none",
        "pcst": "kgrag.retrievers.pcst",
        "relpath": "kgrag.retrievers.relpath",
    },
    "textualizer": {
        "csv": "kgrag.textualize",
        "none": "kgrag.textualize",
        "triples": "kgrag.textualize",
    },
    "backend": {
        "gretriever": "kgrag.backends.gretriever",
        "llamacpp": "kgrag.backends.llamacpp",
        "openai": "kgrag.backends.openai",
        "vllm": "kgrag.backends.vllm",
    },
    "reasoner": {
        "agent": "kgrag.reasoners.agent",
        "answer": "kgrag.reasoners.answer",
        "cot": "kgrag.reasoners.baselines",
        "cot-sc": "kgrag.reasoners.baselines",
        "explore": "kgrag.reasoners.explore",
        "fasttog": "kgrag.reasoners.fasttog",
        "io": "kgrag.reasoners.baselines",
        "rank": "kgrag.reasoners.rank",
        "tog": "kgrag.reasoners.tog",
    },
    "community_detector": {
        "girvan_newman": "kgrag.community.girvan_newman",
        "hierarchical": "kgrag.community.hierarchical",
        "louvain": "kgrag.community.louvain",
        "random": "kgrag.community.random_partition",
        "spectral": "kgrag.community.spectral",
    },
    "lego_extractor": {
        "ego": "kgrag.lego.extract_ego",
        "ppr": "kgrag.lego.extract_ppr",
        "rwr": "kgrag.lego.extract_rwr",
    },
    "lego_filter": {
        "beam": "kgrag.lego.filter_beam",
        "complete": "kgrag.lego.filter_complete",
        "shortest": "kgrag.lego.filter_shortest",
    },
    "lego_refiner": {
        "llm": "kgrag.lego.refine_llm",
        "random": "kgrag.lego.refine_random",
        "scored": "kgrag.lego.refine_scored",
    },
    "lego_scorer": {
        "bm25": "kgrag.lego.score_bm25",
        "llm": "kgrag.lego.score_llm",
        "loglik": "kgrag.lego.score_loglik",
        "reranker": "kgrag.lego.score_reranker",
        "st": "kgrag.lego.score_st",
    },
    "task_runner": {
        "dask": "kgrag.task_runners.dask_cluster",
        "local": "kgrag.task_runners.local",
    },
    "metric": {
        name: "kgrag.metrics"
        for name in ("answerable", "answers", "baselines", "cost", "demo_echoes", "intervals", "judge", "labels", "retrieval",
                     "retrieval_llm", "rouge_l")
    },
    "graph_encoder": {
        "gat": "kgrag.gretriever.encoders",
        "gcn": "kgrag.gretriever.encoders",
        "transformer": "kgrag.gretriever.encoders",
    },
}


def modules(*kinds: str) -> list[str]:
    """The distinct module paths of ``kinds`` (all kinds when none is given), sorted."""
    picked = kinds or tuple(BUILTINS)
    return sorted({m for k in picked for m in BUILTINS[k].values()})
