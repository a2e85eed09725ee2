"""The G-Retriever ``nn.Module`` (:class:`GRetriever`), its LoRA layer and :func:`build_model`. torch is imported here,
at the top: :mod:`kgrag.gretriever.model` (the configs, the prompt ids, the LLM loader, checkpoints) stays free of it,
and callers import this module where they build a model."""

from __future__ import annotations

import math
from typing import Any, Sequence

import torch
from torch import nn

from kgrag.gretriever.data import Example, GraphArrays
from kgrag.gretriever.encoders import EncoderShape, build_encoder, mean_pool
from kgrag.gretriever.model import LoraConfig, ModelConfig, chat_parts, label_ids, load_llm, prompt_ids


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


class GRetriever(nn.Module):
    """Graph token(s) + soft prompt + LLM; ``loss`` for training, ``generate`` for answers.

    References
    ----------
    He et al., G-Retriever (2024), section 5.4, eqs. 9-12; Lester et al. (2021) for the soft prompt.
    """

    def __init__(self, cfg: ModelConfig, llm: Any, tok: Any) -> None:
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
        x = torch.cat(xs) if xs else torch.zeros(0, self.cfg.node_dim)
        ei = torch.cat(eis, dim=1) if eis else torch.zeros(2, 0, dtype=torch.long)
        ea = torch.cat(eas) if eas else torch.zeros(0, self.cfg.node_dim)
        b = torch.cat(batch) if batch else torch.zeros(0, dtype=torch.long)
        h = self.encoder(x.reshape(-1, self.cfg.node_dim), ei, ea.reshape(-1, self.cfg.node_dim)) if len(x) else \
            torch.zeros(0, self.cfg.encoder_hidden if self.cfg.projector else self.d_llm)
        return self.projector(mean_pool(h, b, len(graphs)))[:, None, :]

    def assemble(self, examples: Sequence[Example], graphs: Sequence[GraphArrays] | None, *,
                 with_labels: bool):
        """Left-padded ``inputs_embeds`` [anchor; graph token; virtual tokens; prompt (; target)] (no anchor
        without soft tokens), attention mask, position ids and labels (-100 outside the target)."""
        emb_layer = self.llm.get_input_embeddings()
        seqs, labs = [], []
        for ex in examples:
            p = prompt_ids(self.tok, self.parts, ex, textualize=self.cfg.textualize,
                           max_text_length=self.cfg.max_text_length)
            t = label_ids(self.tok, self.parts, ex.label, max_new_tokens=self.cfg.max_new_tokens) if with_labels else []
            seqs.append(p + t)
            labs.append([-100] * len(p) + t)
        n_soft = (1 if self.cfg.graph_token else 0) + max(self.cfg.virtual_tokens, 0)
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
        if self.cfg.graph_token:
            if graphs is None:
                raise ValueError("this model reads a graph token: pass the examples' graphs")
            soft.append(self.graph_tokens(graphs).to(embeds.dtype))
        if self.cfg.virtual_tokens > 0:
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
            out = self.greedy(embeds, mask, pos, max_new_tokens or self.cfg.max_new_tokens)
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


def build_model(cfg: ModelConfig, llm: Any = None, tok: Any = None) -> GRetriever:
    """A :class:`GRetriever` for ``cfg`` (the LLM loaded from ``cfg.llm_dir`` unless given)."""
    if llm is None or tok is None:
        llm, tok = load_llm(cfg.llm_dir, cfg.dtype, cfg.attention)
    return GRetriever(cfg, llm, tok)
