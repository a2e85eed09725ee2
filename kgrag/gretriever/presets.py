"""The model configurations of G-Retriever's Table 3 and the ablations of its Table 6, by name.

A preset fixes the structure (graph token or not, projector, soft-prompt tokens, LoRA, textualized graph)
and the retrieval the rows see (``pcst``: G-Retriever's PCST subgraph; ``none``: the whole neighbourhood,
its text cut at the max text length, as the paper's prompt-tuning, LoRA and GraphToken baselines, which
have no retrieval). Sizes and optimisation come from ``params.yaml`` (``gretriever``). On ExplaGraphs the
graph is given whole (k = 0, Appendix B.1), so ``pcst`` and ``none`` see the same rows there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from kgrag.registry import UnknownModuleError

if TYPE_CHECKING:
    from kgrag.gretriever.model import ModelConfig


@dataclass(frozen=True)
class Preset:
    """One configuration; ``row`` is its row label in the paper's table ``table``."""

    name: str
    table: str
    row: str
    train: bool = True
    graph_token: bool = False
    projector: bool = True
    virtual_tokens: int = 0  # soft-prompt tokens; -1 = ``gretriever.virtual_tokens`` (the paper's 10)
    lora: bool = False
    textualize: bool = True
    retrieval: Literal["pcst", "none"] = "pcst"


PRESETS: dict[str, Preset] = {p.name: p for p in (
    # Table 3
    Preset("inference_only", "3", "Inference-only: zero-shot", train=False, retrieval="none"),
    Preset("prompt_tuning", "3", "Frozen LLM w/ PT: prompt tuning", virtual_tokens=-1, retrieval="none"),
    Preset("graphtoken", "3", "Frozen LLM w/ PT: GraphToken", graph_token=True, textualize=False, retrieval="none"),
    Preset("g_retriever", "3", "Frozen LLM w/ PT: G-Retriever", graph_token=True),
    Preset("lora", "3", "Tuned LLM: LoRA", lora=True, retrieval="none"),
    Preset("g_retriever_lora", "3", "Tuned LLM: G-Retriever w/ LoRA", graph_token=True, lora=True),
    # Table 6 (each removes one part of G-Retriever; B.3)
    Preset("no_graph_encoder", "6", "w/o graph encoder (10 soft tokens instead)", virtual_tokens=-1),
    Preset("no_projector", "6", "w/o projection layer", graph_token=True, projector=False),
    Preset("no_textualized_graph", "6", "w/o textualized graph", graph_token=True, textualize=False),
    Preset("no_retrieval", "6", "w/o retrieval", graph_token=True, retrieval="none"),
)}


def get_preset(name: str) -> Preset:
    """The preset ``name``; an unknown name fails listing the choices."""
    try:
        return PRESETS[name]
    except KeyError:
        raise UnknownModuleError(f"unknown G-Retriever preset {name!r}; valid choices: {', '.join(PRESETS)}") from None


# The paper's numbers (He et al., 2024): Table 3 (ExplaGraphs accuracy, WebQSP Hit@1 in %), Table 6 (WebQSP
# Hit@1 in %), Table 7 (encoders, G-Retriever with a frozen LLM). Llama2-7b, 4 seeds, mean.
PAPER = {
    "inference_only": {"explagraphs": 0.5650, "webqsp": 41.06},
    "prompt_tuning": {"explagraphs": 0.5763, "webqsp": 48.34},
    "graphtoken": {"explagraphs": 0.8508, "webqsp": 57.05},
    "g_retriever": {"explagraphs": 0.8516, "webqsp": 70.49},
    "lora": {"explagraphs": 0.8538, "webqsp": 66.03},
    "g_retriever_lora": {"explagraphs": 0.8705, "webqsp": 73.79},
    "no_graph_encoder": {"webqsp": 54.62},
    "no_projector": {"webqsp": 69.70},
    "no_textualized_graph": {"webqsp": 56.96},
    "no_retrieval": {"webqsp": 63.84},
}
PAPER_ENCODERS = {"gcn": {"explagraphs": 0.8394, "webqsp": 70.70}, "gat": {"explagraphs": 0.8430, "webqsp": 70.27},
                  "transformer": {"explagraphs": 0.8516, "webqsp": 70.49}}


def model_config(preset: Preset, g: Any, *, embed_model: str, node_dim: int) -> "ModelConfig":
    """The model config of ``preset`` with the shared sizes of ``g`` (``params.gretriever``)."""
    from kgrag.gretriever.model import LoraConfig, ModelConfig

    e, lo = g.encoder, g.lora
    return ModelConfig(
        llm_dir=g.llm_dir, graph_token=preset.graph_token, encoder=e.name, encoder_hidden=e.hidden,
        encoder_layers=e.layers, encoder_heads=e.heads, encoder_dropout=e.dropout, projector=preset.projector,
        projector_hidden=e.projector_hidden, node_dim=node_dim, embed_model=embed_model,
        virtual_tokens=g.virtual_tokens if preset.virtual_tokens < 0 else preset.virtual_tokens,
        lora=LoraConfig(r=lo.r, alpha=lo.alpha, dropout=lo.dropout, targets=tuple(lo.targets)) if preset.lora else None,
        textualize=preset.textualize, max_text_length=g.max_text_length, max_new_tokens=g.max_new_tokens,
        dtype=g.train.dtype, attention=g.train.attention, seed=g.train.seed,
    )
