"""Low-rank adapters on the top layers of a Llama-architecture model, merged back into its weights for serving.

Only projections whose GGUF tensors llama.cpp stores in Hugging Face's layout are adapted: ``v_proj``,
``o_proj``, ``up_proj``, ``down_proj``, ``gate_proj`` (``q_proj`` / ``k_proj`` are permuted for rotary embeddings in
GGUF; leaving them frozen keeps the merge a plain addition, :mod:`kgrag.tune.gguf`).

References
----------
Hu et al., "LoRA: Low-Rank Adaptation of Large Language Models", ICLR 2022, section 4.1 (W + B A, B initialised
to zero, scaled by alpha / r).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

#: projections that may be adapted, and their GGUF tensor names (``blk.{i}.<name>.weight``)
GGUF_NAMES = {"v_proj": "attn_v", "o_proj": "attn_output", "up_proj": "ffn_up", "down_proj": "ffn_down",
              "gate_proj": "ffn_gate"}


@dataclass(frozen=True)
class LoraSpec:
    """Which layers and projections get adapters, their rank and scale."""

    layers: int = 8
    targets: tuple[str, ...] = ("v_proj", "o_proj", "up_proj", "down_proj")
    r: int = 8
    alpha: float = 16.0


def add_lora(model: Any, spec: LoraSpec, seed: int) -> dict[str, Any]:
    """Freeze ``model`` and wrap the ``spec.targets`` projections of its top ``spec.layers`` layers with adapters
    (A: Kaiming-uniform from ``seed``, B: zeros, so the wrapped model starts equal to the base). Returns
    {"<layer>.<projection>": adapter module}."""
    import torch
    from torch import nn

    class LoraLinear(nn.Module):
        """``base(x) + (x A^T B^T) * alpha / r``."""

        def __init__(self, base: nn.Linear) -> None:
            super().__init__()
            self.base = base
            self.A = nn.Parameter(torch.empty(spec.r, base.in_features))
            self.B = nn.Parameter(torch.zeros(base.out_features, spec.r))
            nn.init.kaiming_uniform_(self.A, a=math.sqrt(5))
            self.scale = spec.alpha / spec.r

        def forward(self, x):
            return self.base(x) + (x @ self.A.t() @ self.B.t()) * self.scale

        def delta(self):
            """The merged update ``B A * scale`` (out x in), as the base weight's addend."""
            return (self.B @ self.A) * self.scale

    bad = [t for t in spec.targets if t not in GGUF_NAMES]
    if bad:
        raise ValueError(f"tune.targets: {bad} cannot be merged into the GGUF; choose among {', '.join(GGUF_NAMES)}")
    torch.manual_seed(seed)
    for p in model.parameters():
        p.requires_grad_(False)
    n = model.config.num_hidden_layers
    out = {}
    for i in range(max(n - spec.layers, 0), n):
        block = model.model.layers[i]
        for parent in (block.self_attn, block.mlp):
            for name in spec.targets:
                if isinstance(getattr(parent, name, None), nn.Linear):
                    wrapped = LoraLinear(getattr(parent, name))
                    setattr(parent, name, wrapped)
                    out[f"{i}.{name}"] = wrapped
    return out


def adapter_state(adapters: dict[str, Any]) -> dict[str, Any]:
    """The adapters' tensors by ``<layer>.<projection>.A`` / ``.B`` (what a checkpoint and the stage's output
    hold; the base weights are never saved)."""
    return {f"{k}.{x}": getattr(m, x).detach().clone() for k, m in adapters.items() for x in ("A", "B")}


def load_adapter_state(adapters: dict[str, Any], state: dict[str, Any]) -> None:
    """Put ``state`` (:func:`adapter_state`) back into the adapters."""
    import torch

    with torch.no_grad():
        for k, m in adapters.items():
            m.A.copy_(state[f"{k}.A"])
            m.B.copy_(state[f"{k}.B"])


def deltas(adapters: dict[str, Any]) -> dict[str, Any]:
    """{GGUF tensor name: float32 numpy update (out x in)} of every adapter."""
    out = {}
    for k, m in adapters.items():
        layer, proj = k.split(".")
        out[f"blk.{layer}.{GGUF_NAMES[proj]}.weight"] = m.delta().detach().float().numpy()
    return out
