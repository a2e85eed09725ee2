"""The packaged GGUF LLM → a Hugging Face folder that training and the ``gretriever`` backend load."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any


def convert_gguf(*, gguf: str | Path, out_dir: str | Path) -> dict[str, Any]:
    """De-quantize a GGUF causal LM with transformers (needs the ``gguf`` package) and save it as a Hugging
    Face folder (float32 safetensors, config without the quantization entry, tokenizer with its chat
    template). Returns what was converted (file, sha256, parameter count, architecture)."""
    import shutil

    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    gguf, out_dir = Path(gguf), Path(out_dir)
    sha = hashlib.sha256()
    with open(gguf, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            sha.update(chunk)
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    quant = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    cfg = quant.config.to_dict()
    cfg.pop("quantization_config", None)
    cfg.pop("_name_or_path", None)
    cfg.pop("_model_name_or_path", None)
    config = AutoConfig.for_model(**cfg)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(quant.state_dict(), strict=True)  # a model loaded from GGUF cannot be saved as is
    model.tie_weights()
    shutil.rmtree(out_dir, ignore_errors=True)
    model.save_pretrained(out_dir)
    tok.save_pretrained(out_dir)
    info = {"gguf": gguf.name, "sha256": sha.hexdigest(), "parameters": int(sum(p.numel() for p in model.parameters())),
            "architecture": type(model).__name__, "hidden_size": int(config.hidden_size),
            "layers": int(config.num_hidden_layers)}
    (out_dir / "source.json").write_text(json.dumps(info, indent=2) + "\n")
    return info
