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
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

from kgrag.gretriever.data import SYSTEM, Example, GraphArrays, graph_text, question_text


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
    project's CPU, reports/bench/gretriever.json).

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


def _torch_modules():
    import torch
    from torch import nn

    class LoraLinear(nn.Module):
        """The low-rank update B·A·dropout(x)·(alpha / r) of one frozen linear layer (B starts at zero).

        References
        ----------
        Hu et al., LoRA (2021), section 4.1.
        """

        def __init__(self, d_in: int, d_out: int, cfg: LoraConfig) -> None:
            super().__init__()
            self.A = nn.Parameter(torch.empty(cfg.r, d_in))
            self.B = nn.Parameter(torch.zeros(d_out, cfg.r))
            nn.init.kaiming_uniform_(self.A, a=math.sqrt(5))
            self.scale = cfg.alpha / cfg.r
            self.drop = nn.Dropout(cfg.dropout)

        def forward(self, x):
            return (self.drop(x.float()) @ self.A.t() @ self.B.t()) * self.scale

    return torch, nn, LoraLinear


def build_model(cfg: ModelConfig, llm: Any = None, tok: Any = None):
    """A ``GRetriever`` module for ``cfg`` (the LLM loaded from ``cfg.llm_dir`` unless given)."""
    torch, nn, LoraLinear = _torch_modules()
    from kgrag.gretriever.encoders import EncoderShape, build_encoder, mean_pool

    if llm is None or tok is None:
        llm, tok = load_llm(cfg.llm_dir, cfg.dtype, cfg.attention)

    class GRetriever(nn.Module):
        """Graph token(s) + soft prompt + LLM; ``loss`` for training, ``generate`` for answers.

        References
        ----------
        He et al., G-Retriever (2024), section 5.4, eqs. 9-12; Lester et al. (2021) for the soft prompt.
        """

        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(cfg.seed)
            self.cfg = cfg
            object.__setattr__(self, "llm", llm)  # not a submodule: its weights stay out of state_dict
            self.tok = tok
            self.parts = chat_parts(tok)
            d_llm = llm.get_input_embeddings().weight.shape[1]
            self.d_llm = d_llm
            if cfg.graph_token:
                out = cfg.encoder_hidden if cfg.projector else d_llm
                self.encoder = build_encoder(cfg.encoder, EncoderShape(
                    in_dim=cfg.node_dim, hidden=cfg.encoder_hidden, out_dim=out, layers=cfg.encoder_layers,
                    heads=cfg.encoder_heads, dropout=cfg.encoder_dropout))
                # G-Retriever's projector: Linear → Sigmoid → Linear to the LLM width (eq. 10)
                self.projector = (nn.Sequential(nn.Linear(out, cfg.projector_hidden), nn.Sigmoid(),
                                                nn.Linear(cfg.projector_hidden, d_llm))
                                  if cfg.projector else nn.Identity())
            if cfg.virtual_tokens > 0:
                # initialised from the embeddings of random vocabulary tokens (Lester et al., 2021, 3.2)
                g = torch.Generator().manual_seed(cfg.seed)
                emb = llm.get_input_embeddings().weight
                pick = torch.randint(0, emb.shape[0], (cfg.virtual_tokens,), generator=g)
                self.soft_prompt = nn.Parameter(emb[pick].detach().float().clone())
            self._hooks: list[Any] = []
            if cfg.lora is not None:
                self.lora = nn.ModuleDict()
                for name, mod in llm.named_modules():
                    if isinstance(mod, nn.Linear) and name.split(".")[-1] in cfg.lora.targets:
                        key = name.replace(".", "__")
                        self.lora[key] = LoraLinear(mod.in_features, mod.out_features, cfg.lora)
                        self._hooks.append(mod.register_forward_hook(self._lora_hook(key)))
                if not self._hooks:
                    raise ValueError(f"no linear layer of the LLM is named like {cfg.lora.targets}")

        def _lora_hook(self, key: str):
            def hook(module, inputs, output):
                return output + self.lora[key](inputs[0]).to(output.dtype)

            return hook

        def release(self) -> None:
            """Detach the LoRA hooks from the shared LLM (the object is unusable afterwards)."""
            for h in self._hooks:
                h.remove()
            self._hooks = []

        def train(self, mode: bool = True):
            super().train(mode)
            self.llm.eval()  # the LLM stays in eval mode (frozen)
            return self

        # ---- inputs ------------------------------------------------------------------------------

        def graph_tokens(self, graphs: Sequence[GraphArrays]):
            """(B, 1, d_llm) graph tokens ĥ_g = MLP(POOL(GNN(S*))) of a batch of graphs."""
            xs, eis, eas, batch = [], [], [], []
            offset = 0
            for i, g in enumerate(graphs):
                xs.append(torch.from_numpy(g.x))
                eis.append(torch.from_numpy(g.edge_index) + offset)
                eas.append(torch.from_numpy(g.edge_attr))
                batch.append(torch.full((g.num_nodes,), i, dtype=torch.long))
                offset += g.num_nodes
            x = torch.cat(xs) if xs else torch.zeros(0, cfg.node_dim)
            ei = torch.cat(eis, dim=1) if eis else torch.zeros(2, 0, dtype=torch.long)
            ea = torch.cat(eas) if eas else torch.zeros(0, cfg.node_dim)
            b = torch.cat(batch) if batch else torch.zeros(0, dtype=torch.long)
            h = self.encoder(x.reshape(-1, cfg.node_dim), ei, ea.reshape(-1, cfg.node_dim)) if len(x) else \
                torch.zeros(0, cfg.encoder_hidden if cfg.projector else self.d_llm)
            return self.projector(mean_pool(h, b, len(graphs)))[:, None, :]

        def assemble(self, examples: Sequence[Example], graphs: Sequence[GraphArrays] | None, *,
                     with_labels: bool):
            """Left-padded ``inputs_embeds`` [anchor; graph token; virtual tokens; prompt (; target)] (no anchor
            without soft tokens), attention mask, position ids and labels (-100 outside the target)."""
            emb_layer = self.llm.get_input_embeddings()
            seqs, labs = [], []
            for ex in examples:
                p = prompt_ids(self.tok, self.parts, ex, textualize=cfg.textualize,
                               max_text_length=cfg.max_text_length)
                t = label_ids(self.tok, self.parts, ex.label, max_new_tokens=cfg.max_new_tokens) if with_labels else []
                seqs.append(p + t)
                labs.append([-100] * len(p) + t)
            n_soft = (1 if cfg.graph_token else 0) + max(cfg.virtual_tokens, 0)
            # soft tokens follow one fixed anchor token (the tokenizer's BOS), as G-Retriever puts the graph
            # token after BOS: position 0 is the attention sink of a causal LM, and a trained vector there
            # would perturb every position's attention
            n_lead = n_soft + (1 if n_soft else 0)
            width = n_lead + max(len(s) for s in seqs)
            B = len(seqs)
            ids = torch.full((B, width), self.parts.pad_id, dtype=torch.long)
            mask = torch.zeros((B, width), dtype=torch.long)
            labels = torch.full((B, width), -100, dtype=torch.long)
            for i, (s, lab) in enumerate(zip(seqs, labs)):
                start = width - len(s)
                ids[i, start:] = torch.tensor(s)
                labels[i, start:] = torch.tensor(lab)
                mask[i, start - n_lead:] = 1
                if n_soft:
                    ids[i, start - n_lead] = self.parts.anchor
            embeds = emb_layer(ids)
            soft = []
            if cfg.graph_token:
                if graphs is None:
                    raise ValueError("this model reads a graph token: pass the examples' graphs")
                soft.append(self.graph_tokens(graphs).to(embeds.dtype))
            if cfg.virtual_tokens > 0:
                soft.append(self.soft_prompt[None].expand(B, -1, -1).to(embeds.dtype))
            if soft:
                soft_t = torch.cat(soft, dim=1)  # (B, n_soft, d)
                rows = []
                for i, s in enumerate(seqs):
                    start = width - len(s)
                    rows.append(torch.cat([embeds[i, : start - n_soft], soft_t[i], embeds[i, start:]], dim=0))
                embeds = torch.stack(rows)
            position_ids = (mask.cumsum(-1) - 1).clamp(min=0)
            return embeds, mask, position_ids, labels

        # ---- training and generation ---------------------------------------------------------------

        def loss(self, examples: Sequence[Example], graphs: Sequence[GraphArrays] | None = None):
            """Mean next-token cross-entropy over the target tokens (eq. 12); logits only where needed."""
            embeds, mask, pos, labels = self.assemble(examples, graphs, with_labels=True)
            hidden = self.llm.base_model(inputs_embeds=embeds, attention_mask=mask, position_ids=pos,
                                         use_cache=False).last_hidden_state
            target = labels[:, 1:]
            keep = target != -100
            logits = self.llm.get_output_embeddings()(hidden[:, :-1][keep])
            return torch.nn.functional.cross_entropy(logits.float(), target[keep])

        @torch.no_grad()
        def generate(self, examples: Sequence[Example], graphs: Sequence[GraphArrays] | None = None, *,
                     max_new_tokens: int | None = None) -> list[tuple[str, int, int]]:
            """Greedy answers: (text, prompt tokens incl. soft ones, generated tokens) per example."""
            was = self.training
            self.eval()
            try:
                embeds, mask, pos, _ = self.assemble(examples, graphs, with_labels=False)
                out = self.greedy(embeds, mask, pos, max_new_tokens or cfg.max_new_tokens)
            finally:
                self.train(was)
            res = []
            for i in range(len(examples)):
                seq = out[i]
                n = next((j for j, t in enumerate(seq) if t in self.parts.stop_ids), len(seq))
                text = self.tok.decode(seq[:n], skip_special_tokens=True).strip()
                res.append((text, int(mask[i].sum()), n))
            return res

        def greedy(self, embeds, mask, pos, max_new_tokens: int) -> list[list[int]]:
            """Greedy decoding with the KV cache from left-padded ``inputs_embeds``: logits only at each
            row's last position (``generate`` of transformers computes them for the whole prompt), stopping
            when every row has produced a stop token."""
            stop = torch.tensor(self.parts.stop_ids)
            emb_layer, head = self.llm.get_input_embeddings(), self.llm.get_output_embeddings()
            out = self.llm.base_model(inputs_embeds=embeds, attention_mask=mask, position_ids=pos, use_cache=True)
            cache, last = out.past_key_values, out.last_hidden_state[:, -1]
            done = torch.zeros(len(embeds), dtype=torch.bool)
            steps: list[torch.Tensor] = []
            next_pos = pos[:, -1:] + 1
            for _ in range(max_new_tokens):
                tok = head(last).float().argmax(-1)
                tok = torch.where(done, torch.full_like(tok, self.parts.pad_id), tok)
                steps.append(tok)
                done |= torch.isin(tok, stop)
                if bool(done.all()) or len(steps) == max_new_tokens:
                    break
                mask = torch.cat([mask, torch.ones(len(mask), 1, dtype=mask.dtype)], dim=1)
                out = self.llm.base_model(inputs_embeds=emb_layer(tok[:, None]), attention_mask=mask,
                                          position_ids=next_pos, past_key_values=cache, use_cache=True)
                cache, last = out.past_key_values, out.last_hidden_state[:, -1]
                next_pos = next_pos + 1
            return torch.stack(steps, dim=1).tolist() if steps else [[] for _ in range(len(embeds))]

    return GRetriever()


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

