"""The paper's Table 4 instances as stage choices (hyperparameters of Table 7).

Each preset maps the stages ``extract``, ``prune`` (semantic scorer after extraction, or None), ``filter``
and ``refine`` to ``{name, params}``. The *fine-tuned ST* instances (5: GSR, 12, 18: KELP) score with the
model the ``finetune_path_scorer`` stage writes to ``data/finetune/st_model`` (MiniLM trained with the paper's margin
loss on MetaQA dev paths). The *fine-tuned LLM* instances (7: RoG, 14, 20) run with whatever model the LLM
backend serves (SmolLM2-135M-Instruct by default): kgrag does not fine-tune LLMs for retrieval, so they
equal their vanilla-LLM twins (6, 13, 19) unless ``llm`` points at a fine-tuned model.

References
----------
Cao et al., LEGO-GraphRAG (2024), Table 4 (instances 0-20) and Table 7 (max_ent = 2000,
restart_prob = 0.8, path_num = 64, window = 24, beam_width = 128, top_k = 64).
"""

from __future__ import annotations

from typing import Any

from kgrag.io import ST_MODEL

PPR: dict[str, Any] = {"name": "ppr", "params": {"max_ent": 2000, "damping": 0.8}}
RWR: dict[str, Any] = {"name": "rwr", "params": {"path_num": 64}}
SHORTEST: dict[str, Any] = {"name": "shortest", "params": {}}
COMPLETE: dict[str, Any] = {"name": "complete", "params": {}}
RANDOM: dict[str, Any] = {"name": "random", "params": {"top_k": 64, "seed": 0}}


FINETUNED_ST = str(ST_MODEL)  # written by the finetune_path_scorer stage, relative to the project root


def _scorer(name: str) -> dict[str, Any]:
    if name == "st-ft":
        return {"name": "st", "params": {"model": FINETUNED_ST}}
    return {"name": name, "params": {}}


def _prune(scorer: str) -> dict[str, Any]:
    return {"scorer": _scorer(scorer), "window": 24}


def _beam(scorer: str) -> dict[str, Any]:
    return {"name": "beam", "params": {"beam_width": 128, "scorer": _scorer(scorer)}}


def _scored(scorer: str) -> dict[str, Any]:
    return {"name": "scored", "params": {"top_k": 64, "scorer": _scorer(scorer)}}


def _llm_refine() -> dict[str, Any]:
    return {"name": "llm", "params": {"top_k": 64}}


def _inst(extract=PPR, prune=None, filter=SHORTEST, refine=RANDOM) -> dict[str, Any]:  # noqa: A002
    return {"extract": extract, "prune": prune, "filter": filter, "refine": refine}


PRESETS: dict[str, dict[str, Any]] = {
    # basic instance
    "lego-00": _inst(),
    # subgraph-extraction group
    "lego-01": _inst(extract=RWR),
    "lego-02": _inst(prune=_prune("bm25")),
    "lego-03": _inst(prune=_prune("st")),
    "lego-04": _inst(prune=_prune("reranker")),
    "lego-05": _inst(prune=_prune("st-ft")),  # fine-tuned ST (GSR)
    "lego-06": _inst(prune=_prune("llm")),
    "lego-07": _inst(prune=_prune("llm")),  # fine-tuned LLM (RoG) → the plain generation LLM
    # path-filtering group
    "lego-08": _inst(filter=COMPLETE),
    "lego-09": _inst(filter=_beam("bm25")),
    "lego-10": _inst(filter=_beam("st")),
    "lego-11": _inst(filter=_beam("reranker")),
    "lego-12": _inst(filter=_beam("st-ft")),  # fine-tuned ST
    "lego-13": _inst(filter=_beam("llm")),
    "lego-14": _inst(filter=_beam("llm")),  # fine-tuned LLM → the plain generation LLM
    # path-refinement group
    "lego-15": _inst(refine=_scored("bm25")),
    "lego-16": _inst(refine=_scored("st")),
    "lego-17": _inst(refine=_scored("reranker")),
    "lego-18": _inst(refine=_scored("st-ft")),  # fine-tuned ST (KELP)
    "lego-19": _inst(refine=_llm_refine()),
    "lego-20": _inst(refine=_llm_refine()),  # fine-tuned LLM → the plain generation LLM
}
