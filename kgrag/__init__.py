"""kgrag: declarative, DAG-orchestrated knowledge-graph retrieval-augmented generation.

The package's folders are its layers (README "Architecture"): ``kg/``, ``index/``, ``llm/``, ``retrieval/``,
``reasoning/``, ``evaluation/``, ``reporting/``, ``apps/``, with the foundation, the experiment assembly and the
CLI at the top level. Code written against the flat layout before it gets an import error naming the new place.
"""

import sys as _sys
from importlib.abc import MetaPathFinder as _MetaPathFinder

__version__ = "0.1.0"

#: modules of the flat layout (and one later move) -> where they are now (an import of an old name fails with the new one)
MOVED = {
    "depgraph": "code.depgraph", "versioning": "code.versioning",
    "duckdb_io": "kg.duckdb_io", "store": "kg.store", "store_duckdb": "kg.store_duckdb", "kgview": "kg.kgview",
    "validate": "kg.validate", "synth": "kg.synth", "linking": "kg.linking", "loaders": "kg.loaders",
    "embed": "index.embed", "relplan": "index.relplan", "finetune": "retrieval.finetune",
    "llm.calls": "llm.calls", "clients": "llm.clients", "backends": "llm.backends", "generate": "llm.prompts",
    "textualize": "llm.textualize", "constrain": "llm.constrain",
    "runner": "retrieval.run", "retrievers": "retrieval.retrievers", "lego": "retrieval.lego",
    "reasoners": "reasoning.reasoners", "community": "reasoning.community", "answering": "reasoning.generate",
    "evaluate": "evaluation.evaluate", "metrics": "evaluation.metrics",
    "report": "reporting.report", "report_html": "reporting.report_html", "compare": "reporting.compare",
    "ask": "apps.ask", "serve": "apps.serve",
    # not of the flat layout: the G-Retriever backend moved up to its package (the llm layer imports none of it)
    "llm.backends.gretriever": "gretriever.backend",
}
MOVED.pop("llm.calls")  # kgrag.llm is now the LLM layer's package; its old contents are kgrag.llm.calls


class _Moved(_MetaPathFinder):
    """Last on ``sys.meta_path``: reached only when ``kgrag.<name>`` is not found, it names the new place."""

    def find_spec(self, fullname, path=None, target=None):
        if not fullname.startswith("kgrag."):
            return None
        rest = fullname[len("kgrag."):]
        for old, new in MOVED.items():
            if rest == old or rest.startswith(old + "."):
                raise ModuleNotFoundError(
                    f"kgrag.{rest} moved to kgrag.{new}{rest[len(old):]} (kgrag's folders are its layers: "
                    f"README \"Architecture\")", name=fullname)
        return None


if not any(isinstance(f, _Moved) for f in _sys.meta_path):
    _sys.meta_path.append(_Moved())
