"""The G-Retriever model: graph encoder → projector → graph token, prepended (with optional soft-prompt
virtual tokens) to the embedded prompt of a frozen decoder LLM, optionally with LoRA on its attention.

The LLM's own weights never train: every one of them has ``requires_grad=False``. LoRA adds low-rank
updates through forward hooks on the target projections, so the LLM modules stay as loaded and the
trainable state (``GRetriever.state_dict``) holds only the encoder, projector, soft prompt and LoRA
matrices. The prompt is the LLM's chat template around ``[textualized graph;] question``; the target text
follows the assistant header and ends with the template's end-of-turn token.
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kgrag.gretriever.data import SYSTEM, Example, graph_text, question_text


@dataclass(frozen=True)
class LoraConfig:
    """LoRA on the LLM's linear projections named ``targets`` (module name suffixes)."""

    r: int = 8
    alpha: float = 16.0
    dropout: float = 0.05
    targets: tuple[str, ...] = ("q_proj", "v_proj")


@dataclass(frozen=True)
class ModelConfig:
    """Everything that fixes a G-Retriever model's structure and inputs (saved with each checkpoint)."""

    llm_dir: str
    graph_token: bool = True  # graph encoder + (projector) → one graph token
    encoder: str = "transformer"
    encoder_hidden: int = 1024
    encoder_layers: int = 4
    encoder_heads: int = 4
    encoder_dropout: float = 0.0
    projector: bool = True  # False: the encoder's output width is the LLM's (Table 6, w/o projection layer)
    projector_hidden: int = 2048
    node_dim: int = 384  # text-embedding size of node / edge features
    embed_model: str = "all-MiniLM-L6-v2"
    virtual_tokens: int = 0  # soft-prompt tokens (prompt tuning; Table 6 w/o graph encoder)
    lora: LoraConfig | None = None
    textualize: bool = True  # put the textualized graph in the prompt (False: Table 6 w/o textualized graph)
    max_text_length: int = 512  # tokens of the textualized graph kept (the question is never cut)
    max_new_tokens: int = 32  # target tokens kept in training; generation budget
    dtype: str = "float32"  # the frozen LLM's weights: auto | float32 | bfloat16 (trainable parts stay float32)
    attention: str = "eager"  # the LLM's attention implementation: eager | sdpa
    seed: int = 0  # initialisation of the trainable parts

    def to_dict(self) -> dict[str, Any]:
        """Plain dict (JSON-safe)."""
        return json.loads(json.dumps(asdict(self)))

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "ModelConfig":
        """Inverse of ``to_dict``."""
        d = dict(d)
        if d.get("lora") is not None:
            lo = dict(d["lora"])
            lo["targets"] = tuple(lo.get("targets", ()))
            d["lora"] = LoraConfig(**lo)
        return ModelConfig(**d)

    def digest(self) -> str:
        """Short hash of the config."""
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()[:16]

    @property
    def trains(self) -> bool:
        """Whether the config has any trainable part."""
        return self.graph_token or self.virtual_tokens > 0 or self.lora is not None


BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")  # CPU features with native bfloat16 matrix instructions


def resolve_dtype(dtype: str, cpuinfo: str | None = None) -> str:
    """The frozen LLM's weight dtype for ``dtype``: ``auto`` is ``bfloat16`` where the CPU has native bf16
    matrix instructions (``avx512_bf16`` / ``amx_bf16`` in /proc/cpuinfo), else ``float32``.

    Measured: on an Intel Xeon with them a training step ran 2.5x faster in bf16 than float32; on an AMD EPYC
    without them a (724 x 576) x (576 x 1536) product took 132 ms in bf16 against 17 ms in float32 (one
    thread), so a fixed ``bfloat16`` made training 8x slower there.
    """
    if dtype != "auto":
        return dtype
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(errors="replace")
        except OSError:
            cpuinfo = ""
    flags = set()
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            flags.update(line.split(":", 1)[-1].split())
    return "bfloat16" if flags & set(BF16_CPU_FLAGS) else "float32"


@functools.lru_cache(maxsize=2)
def load_llm(path: str, dtype: str = "float32", attention: str = "eager"):
    """(model, tokenizer) of a Hugging Face causal-LM folder, on CPU, in eval mode, every weight frozen,
    weights in ``dtype`` (``bfloat16`` halves memory traffic and runs the matmuls in bf16; ``auto``: see
    ``resolve_dtype``), attention by
    ``attention`` (``eager`` or ``sdpa``; same results up to rounding: eager was 1.6x faster in bf16 on the
    project's CPU of 2026-11-22, an Intel Xeon).

    Cached per process: several ``GRetriever`` objects may share it (LoRA hooks are per object).
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if dtype not in ("auto", "float32", "bfloat16"):
        raise ValueError(f"dtype {dtype!r}: choose auto, float32 or bfloat16")
    dtype = resolve_dtype(dtype)
    tok = AutoTokenizer.from_pretrained(path)
    if attention not in ("eager", "sdpa"):
        raise ValueError(f"attention {attention!r}: choose eager or sdpa")
    llm = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype), attn_implementation=attention)
    llm.eval()
    for p in llm.parameters():
        p.requires_grad_(False)
    return llm, tok


@dataclass
class ChatParts:
    """Token ids of the chat template around the user message, and of the end-of-turn token(s)."""

    prefix: list[int]
    suffix: list[int]
    eos: list[int]
    pad_id: int
    stop_ids: list[int] = field(default_factory=list)
    anchor: int = 0  # the token put before soft tokens (BOS)


def chat_parts(tok: Any) -> ChatParts:
    """Split the tokenizer's chat template (system = ``SYSTEM``) around a placeholder user message."""
    mark = "\u2063USER\u2063"
    msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": mark}]
    if getattr(tok, "chat_template", None):
        text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
        full = tok.apply_chat_template(msgs + [{"role": "assistant", "content": "x"}], tokenize=False)
        end = full[len(text):].split("x", 1)[1]  # what the template writes after an assistant message
    else:
        text, end = f"{SYSTEM}\n\n{mark}\n\nAnswer: ", tok.eos_token or ""
    before, after = text.split(mark)
    before_ids = tok(before, add_special_tokens=False)["input_ids"]
    eos = tok(end.strip() or (tok.eos_token or ""), add_special_tokens=False)["input_ids"] or [tok.eos_token_id]
    pad = tok.pad_token_id if tok.pad_token_id is not None else (tok.eos_token_id or 0)
    stop = sorted({i for i in [eos[0], tok.eos_token_id] if i is not None})
    return ChatParts(prefix=before_ids,
                     suffix=tok(after, add_special_tokens=False)["input_ids"], eos=eos, pad_id=int(pad),
                     stop_ids=stop, anchor=int(tok.bos_token_id if tok.bos_token_id is not None else before_ids[0]))


def prompt_ids(tok: Any, parts: ChatParts, ex: Example, *, textualize: bool, max_text_length: int) -> list[int]:
    """Token ids of one prompt: template prefix, textualized graph (cut to ``max_text_length`` tokens),
    question, template suffix (up to the assistant header).

    References
    ----------
    He et al., G-Retriever (2024), eq. 11 (h_t = TextEmbedder([textualize(S*); x_q])) and Appendix B.1
    (max text length 512).
    """
    ids = list(parts.prefix)
    if textualize and ex.triples:
        ids += tok(graph_text(ex.triples), add_special_tokens=False)["input_ids"][:max_text_length]
        ids += tok("\n\n", add_special_tokens=False)["input_ids"]
    ids += tok(question_text(ex.question), add_special_tokens=False)["input_ids"]
    return ids + list(parts.suffix)


def label_ids(tok: Any, parts: ChatParts, label: str, *, max_new_tokens: int) -> list[int]:
    """Target ids: the label's tokens (at most ``max_new_tokens``) then the end-of-turn token(s)."""
    return tok(label, add_special_tokens=False)["input_ids"][:max_new_tokens] + list(parts.eos)


def trainable_parameters(model: Any) -> list[Any]:
    """The parameters that train (encoder, projector, soft prompt, LoRA)."""
    return [p for p in model.parameters() if p.requires_grad]


def load_best(model: Any, out_dir: str | Path) -> dict[str, Any]:
    """Load ``best.pt``'s weights into ``model``; returns its record (epoch, validation values). Here, not in
    ``train``: the ``gretriever`` backend loads a checkpoint without the training code (nor its DVC deps)."""
    import torch

    ck = torch.load(Path(out_dir) / "best.pt", map_location="cpu", weights_only=True)
    model.load_state_dict(ck["trainable"])
    return {k: v for k, v in ck.items() if k != "trainable"}

