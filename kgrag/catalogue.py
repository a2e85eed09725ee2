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
        "explagraphs": "kgrag.kg.loaders.explagraphs",
        "gretriever": "kgrag.kg.loaders.gretriever",
        "irn": "kgrag.kg.loaders.irn",
        "jsonl": "kgrag.kg.loaders.jsonl",
        "metaqa": "kgrag.kg.loaders.metaqa",
        "ntriples": "kgrag.kg.loaders.ntriples",
        "rog": "kgrag.kg.loaders.rog",
        "triples": "kgrag.kg.loaders.triples",
    },
    "retriever": {
        "khop": "kgrag.retrieval.retrievers.khop",
        "lego": "kgrag.retrieval.retrievers.lego",
        "none": "kgrag.retrieval.retrievers.none",
        "pcst": "kgrag.retrieval.retrievers.pcst",
        "relpath": "kgrag.retrieval.retrievers.relpath",
    },
    "textualizer": {
        "csv": "kgrag.llm.textualize",
        "grouped": "kgrag.llm.textualize",
        "none": "kgrag.llm.textualize",
        "triples": "kgrag.llm.textualize",
    },
    "backend": {
        "gretriever": "kgrag.gretriever.backend",
        "llamacpp": "kgrag.llm.backends.llamacpp",
        "openai": "kgrag.llm.backends.openai",
        "vllm": "kgrag.llm.backends.vllm",
    },
    "reasoner": {
        "agent": "kgrag.reasoning.reasoners.agent",
        "answer": "kgrag.reasoning.reasoners.answer",
        "cot": "kgrag.reasoning.reasoners.baselines",
        "cot-sc": "kgrag.reasoning.reasoners.baselines",
        "explore": "kgrag.reasoning.reasoners.explore",
        "fasttog": "kgrag.reasoning.reasoners.fasttog",
        "io": "kgrag.reasoning.reasoners.baselines",
        "rank": "kgrag.reasoning.reasoners.rank",
        "tog": "kgrag.reasoning.reasoners.tog",
    },
    "community_detector": {
        "girvan_newman": "kgrag.reasoning.community.girvan_newman",
        "hierarchical": "kgrag.reasoning.community.hierarchical",
        "louvain": "kgrag.reasoning.community.louvain",
        "random": "kgrag.reasoning.community.random_partition",
        "spectral": "kgrag.reasoning.community.spectral",
    },
    "lego_extractor": {
        "ego": "kgrag.retrieval.lego.extract_ego",
        "ppr": "kgrag.retrieval.lego.extract_ppr",
        "rwr": "kgrag.retrieval.lego.extract_rwr",
    },
    "lego_filter": {
        "beam": "kgrag.retrieval.lego.filter_beam",
        "complete": "kgrag.retrieval.lego.filter_complete",
        "shortest": "kgrag.retrieval.lego.filter_shortest",
    },
    "lego_refiner": {
        "llm": "kgrag.retrieval.lego.refine_llm",
        "random": "kgrag.retrieval.lego.refine_random",
        "scored": "kgrag.retrieval.lego.refine_scored",
    },
    "lego_scorer": {
        "bm25": "kgrag.retrieval.scorers.bm25",
        "llm": "kgrag.retrieval.scorers.llm",
        "loglik": "kgrag.retrieval.scorers.loglik",
        "reranker": "kgrag.retrieval.scorers.reranker",
        "st": "kgrag.retrieval.scorers.st",
    },
    "task_runner": {
        "dask": "kgrag.task_runners.dask_cluster",
        "local": "kgrag.task_runners.local",
    },
    "metric": {
        name: "kgrag.evaluation.metrics"
        for name in ("answerable", "answers", "baselines", "cost", "demo_echoes", "intervals", "judge", "labels", "retrieval",
                     "retrieval_llm", "rouge_l")
    },
    # report.html's view of a reasoner's trace (a reasoner without one gets the generic table and the scored
    # decisions); a plugin reasoner registers its own with @TRACE_VIEWS.register(name)
    "trace_view": {name: "kgrag.reporting.trace_views" for name in ("agent", "explore", "fasttog", "tog")},
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
