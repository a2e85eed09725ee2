"""A lean encoder for sentence-transformers BERT + mean-pooling models: ``torch`` + ``tokenizers`` +
``safetensors`` only, without importing ``sentence_transformers`` or ``transformers`` (about 10 s of import per
process on a small machine, paid by every stage that embeds text).

It computes what ``SentenceTransformer(folder, device="cpu").encode(texts, normalize_embeddings=True)`` computes,
bit for bit (sentence-transformers 6.2 + transformers 5.24 on CPU), by running the same torch operations on the
same shapes in the same order:

* batching (``SentenceTransformer._inference``): inputs sorted by ``np.argsort([-len(text)])``, cut into batches
  of ``batch_size``, results put back in input order;
* tokenization (the transformers ``BertTokenizer`` the processor is): the folder's ``tokenizer.json`` with
  truncation ``longest_first`` at the model's max length and padding to the longest text of the batch, right;
  ``token_type_ids`` zeros. Texts are not stripped (sentence-transformers 6 does not; BERT's pre-tokenizer drops
  the surrounding whitespace anyway);
* ``BertModel`` in eval mode, ``sdpa`` attention: embeddings ``(word + token_type) + position`` then LayerNorm;
  per layer q/k/v ``linear -> view(B, L, heads, head_dim) -> transpose(1, 2)``,
  ``scaled_dot_product_attention(q, k, v, attn_mask, dropout_p=0.0, scale=head_dim ** -0.5, is_causal=False)``
  where ``attn_mask`` is None when no text of the batch is padded and otherwise the boolean ``(B, 1, L, L)``
  contiguous mask that ``transformers.masking_utils.sdpa_mask`` builds (the mask form selects the CPU kernel
  path, so it is reproduced exactly), output ``transpose(1, 2).contiguous().reshape(B, L, -1)``, dense,
  LayerNorm(x + residual), intermediate dense, exact (erf) GELU, output dense, LayerNorm(x + residual);
* Pooling mean (``Pooling._forward_padded``): ``(tokens * mask).sum(1, dtype=float32) /
  clamp(mask.sum(1, dtype=float32), min=1e-9)``; Normalize ``F.normalize(p=2, dim=-1)``; ``encode``'s own
  ``normalize_embeddings`` ``F.normalize(p=2, dim=1)`` again.

Everything runs under ``torch.inference_mode()`` as ``encode`` does; thread settings are torch's defaults, as
for sentence-transformers. The BERT pooler (unused by mean pooling) is not computed.

Only folders whose every setting is one this module reproduces are accepted (:func:`check` says why a folder is
not): ``modules.json`` exactly [Transformer, Pooling(mean), optional Normalize], a ``bert`` config, float32
``model.safetensors``, a BERT WordPiece ``tokenizer.json`` agreeing with ``tokenizer_config.json``, no prompts.
Anything else (other architectures or pooling, a Dense module, prompts, ...) is for the real
``SentenceTransformer`` (``kgrag.index.encoder.load_model`` falls back to it).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import numpy as np

TRANSFORMER = {"sentence_transformers.models.Transformer", "sentence_transformers.base.modules.transformer.Transformer"}
POOLING = {"sentence_transformers.models.Pooling", "sentence_transformers.sentence_transformer.modules.pooling.Pooling"}
NORMALIZE = {"sentence_transformers.models.Normalize", "sentence_transformers.base.modules.normalize.Normalize"}

#: sentence_bert_config.json as sentence-transformers 6 writes it for a plain feature-extraction Transformer
_ST6_TRANSFORMER_CONFIG = {
    "transformer_task": "feature-extraction",
    "modality_config": {"text": {"method": "forward", "method_output_name": "last_hidden_state"}},
    "module_output_name": "token_embeddings",
}
#: the legacy boolean pooling keys; only the mean one may be true
_LEGACY_POOLING = ("pooling_mode_cls_token", "pooling_mode_max_tokens", "pooling_mode_mean_tokens",
                   "pooling_mode_mean_sqrt_len_tokens", "pooling_mode_weightedmean_tokens", "pooling_mode_lasttoken")
#: special tokens of a BERT tokenizer (transformers' BertTokenizer defaults)
_SPECIAL_DEFAULTS = {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]", "cls_token": "[CLS]",
                     "mask_token": "[MASK]"}
#: the largest int transformers uses as "no model_max_length"
_VERY_LARGE_INTEGER = int(1e30)


class Unsupported(ValueError):
    """The folder holds a model (or a setting) this encoder does not reproduce."""


def _json(path: Path) -> Any:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _token_str(v: Any) -> str | None:
    """A special token as tokenizer_config.json spells it: a string or an AddedToken dict."""
    if isinstance(v, dict):
        return v.get("content")
    return v


def check(folder: str | Path) -> dict[str, Any]:
    """The settings of the sentence-transformers model in ``folder``, or :class:`Unsupported` naming the first
    one this encoder does not reproduce."""
    folder = Path(folder)

    def need(cond: bool, why: str) -> None:
        if not cond:
            raise Unsupported(f"{folder}: {why}")

    need((folder / "modules.json").is_file(), "no modules.json")
    modules = _json(folder / "modules.json")
    need(isinstance(modules, list) and len(modules) in (2, 3),
         "modules.json is not [Transformer, Pooling(, Normalize)]")
    kinds = [TRANSFORMER, POOLING, NORMALIZE][: len(modules)]
    for m, kind in zip(modules, kinds):
        need(isinstance(m, dict) and m.get("type") in kind, f"module {m!r} is not one of {sorted(kind)}")
        need(not m.get("kwargs"), f"module {m.get('name')} has forward kwargs")
    need(modules[0].get("path", "") in ("", "."), "the Transformer module is not at the folder's root")

    # the model-level config: no prompts, no truncation of the output
    cfg_st = _json(folder / "config_sentence_transformers.json") if (
        folder / "config_sentence_transformers.json").is_file() else {}
    need(cfg_st.get("model_type", "SentenceTransformer") == "SentenceTransformer", "not a SentenceTransformer")
    need(all(not p for p in (cfg_st.get("prompts") or {}).values()), "the model has prompts")
    need(cfg_st.get("default_prompt_name") is None, "the model has a default prompt")
    need(cfg_st.get("truncate_dim") is None, "the model truncates its output dimension")
    need(not (folder / "adapter_config.json").exists(), "a PEFT adapter")

    # the Transformer module's own config
    sb_file = next((folder / n for n in ("sentence_bert_config.json", "sentence_roberta_config.json",
                                         "sentence_distilbert_config.json", "sentence_camembert_config.json",
                                         "sentence_albert_config.json", "sentence_xlm-roberta_config.json",
                                         "sentence_xlnet_config.json") if (folder / n).is_file()), None)
    sb = _json(sb_file) if sb_file is not None else {}
    for k, v in sb.items():
        if k in _ST6_TRANSFORMER_CONFIG:
            need(v == _ST6_TRANSFORMER_CONFIG[k], f"sentence_bert_config {k}={v!r}")
        elif k == "do_lower_case":
            need(not v, "sentence_bert_config do_lower_case")
        elif k == "max_seq_length":
            need(v is None or (isinstance(v, int) and v > 0), f"max_seq_length {v!r}")
        else:
            need(False, f"sentence_bert_config key {k!r}")

    # the BERT config
    need((folder / "config.json").is_file(), "no config.json")
    cfg = _json(folder / "config.json")
    need(cfg.get("model_type") == "bert", f"model_type {cfg.get('model_type')!r} is not bert")
    need(cfg.get("hidden_act", "gelu") == "gelu", f"hidden_act {cfg.get('hidden_act')!r}")
    need(cfg.get("position_embedding_type", "absolute") == "absolute", "position embeddings are not absolute")
    need(not cfg.get("is_decoder", False) and not cfg.get("add_cross_attention", False), "a decoder")
    need(not cfg.get("chunk_size_feed_forward", 0), "chunked feed-forward")
    need(cfg.get("dtype", cfg.get("torch_dtype")) in (None, "float32"), "not float32")
    need(not cfg.get("_attn_implementation") and not cfg.get("attn_implementation"), "a set attention kernel")
    need(not cfg.get("output_hidden_states", False), "output_hidden_states")
    need(not cfg.get("quantization_config"), "quantized")
    hidden, heads = int(cfg.get("hidden_size", 768)), int(cfg.get("num_attention_heads", 12))
    need(hidden % heads == 0, "hidden size is not a multiple of the head count")
    max_pos = int(cfg.get("max_position_embeddings", 512))

    _check_pooling(folder, modules, hidden, need)
    tcfg, ids = _check_tokenizer(folder, need)

    # the max length: sentence_bert_config's max_seq_length; else the tokenizer's model_max_length capped at
    # the model's max_position_embeddings (sentence_transformers Transformer.__init__)
    max_len = sb.get("max_seq_length")
    if max_len is None:
        mml = tcfg.get("model_max_length", _VERY_LARGE_INTEGER)
        max_len = min(int(mml) if mml is not None else _VERY_LARGE_INTEGER, max_pos)
    need(0 < max_len <= max_pos, f"max length {max_len} beyond {max_pos} positions")

    weights = folder / "model.safetensors"
    need(weights.is_file(), "no model.safetensors")
    return {
        "folder": str(folder), "hidden": hidden, "heads": heads, "layers": int(cfg.get("num_hidden_layers", 12)),
        "eps": float(cfg.get("layer_norm_eps", 1e-12)), "max_length": int(max_len), "normalize": len(modules) == 3,
        "pad_id": ids["[PAD]"], "weights": str(weights),
    }



def _check_pooling(folder: Path, modules: list, hidden: int, need: Callable[[bool, str], None]) -> None:
    """:func:`check`'s Pooling (mean only, of the hidden size) and Normalize modules."""
    # pooling: mean only
    need(modules[1].get("path") not in (None, ""), "Pooling has no folder")
    pcfg_file = folder / modules[1]["path"] / "config.json"
    need(pcfg_file.is_file(), "no Pooling config")
    pcfg = _json(pcfg_file)
    if "pooling_mode" in pcfg:
        mode = pcfg["pooling_mode"]
        need(mode == "mean" or mode == ["mean"], f"pooling_mode {mode!r}")
    else:
        on = [k for k in _LEGACY_POOLING if pcfg.get(k)]
        need(on == ["pooling_mode_mean_tokens"], f"pooling {on}")
    allowed = {"pooling_mode", "include_prompt", "embedding_dimension", "word_embedding_dimension", *_LEGACY_POOLING}
    need(set(pcfg) <= allowed, f"Pooling config keys {sorted(set(pcfg) - allowed)}")
    dim = pcfg.get("embedding_dimension", pcfg.get("word_embedding_dimension", hidden))
    need(dim == hidden, "Pooling dimension differs from the hidden size")
    if len(modules) == 3 and modules[2].get("path"):
        ncfg_file = folder / modules[2]["path"] / "config.json"
        ncfg = _json(ncfg_file) if ncfg_file.is_file() else {}
        need(ncfg.get("module_input_name", "sentence_embedding") == "sentence_embedding"
             and ncfg.get("module_output_name") in (None, "sentence_embedding"), "Normalize on another feature")


def _check_tokenizer(folder: Path, need: Callable[[bool, str], None]) -> tuple[dict, dict[str, int]]:
    """:func:`check`'s tokenizer: (tokenizer_config.json, the special tokens' ids)."""
    # the tokenizer: transformers' BertTokenizer rebuilds the normalizer, pre-tokenizer and WordPiece model from
    # tokenizer_config.json and takes the vocab and post-processor from tokenizer.json; accept the folder when
    # tokenizer.json already holds exactly that
    need((folder / "tokenizer.json").is_file(), "no tokenizer.json")
    tcfg = _json(folder / "tokenizer_config.json") if (folder / "tokenizer_config.json").is_file() else {}
    need(tcfg.get("tokenizer_class", "BertTokenizer") in ("BertTokenizer", "BertTokenizerFast"),
         f"tokenizer_class {tcfg.get('tokenizer_class')!r}")
    need(tcfg.get("padding_side", "right") == "right" and tcfg.get("truncation_side", "right") == "right",
         "padding or truncation on the left")
    need(not tcfg.get("split_special_tokens", False), "split_special_tokens")
    need(not tcfg.get("add_bos_token") and not tcfg.get("add_eos_token"), "add_bos/eos_token")
    need(not tcfg.get("extra_special_tokens") and not tcfg.get("additional_special_tokens"), "extra special tokens")
    need(not (folder / "added_tokens.json").exists(), "added_tokens.json")
    stm = _json(folder / "special_tokens_map.json") if (folder / "special_tokens_map.json").is_file() else {}
    need(all(_token_str(v) == _SPECIAL_DEFAULTS.get(k) for k, v in stm.items()),
         "special_tokens_map.json differs from BERT's")
    specials = {k: _token_str(tcfg.get(k, d)) for k, d in _SPECIAL_DEFAULTS.items()}
    need(specials == _SPECIAL_DEFAULTS, f"special tokens {specials}")
    tj = _json(folder / "tokenizer.json")
    expect_norm = {"type": "BertNormalizer", "clean_text": True,
                   "handle_chinese_chars": tcfg.get("tokenize_chinese_chars", True),
                   "strip_accents": tcfg.get("strip_accents"), "lowercase": tcfg.get("do_lower_case", True)}
    need(tj.get("normalizer") == expect_norm, f"normalizer {tj.get('normalizer')} is not {expect_norm}")
    need(tj.get("pre_tokenizer") == {"type": "BertPreTokenizer"}, "pre-tokenizer is not BertPreTokenizer")
    model = tj.get("model") or {}
    need(model.get("type") == "WordPiece" and model.get("unk_token") == "[UNK]"
         and model.get("continuing_subword_prefix", "##") == "##"
         and model.get("max_input_chars_per_word", 100) == 100, "not a BERT WordPiece model")
    vocab = model.get("vocab") or {}
    ids = {t: vocab.get(t) for t in _SPECIAL_DEFAULTS.values()}
    need(all(i is not None for i in ids.values()), "special tokens missing from the vocabulary")
    added = tj.get("added_tokens") or []
    need(all(a.get("special") and not a.get("normalized") and not a.get("lstrip") and not a.get("rstrip")
             and not a.get("single_word") and vocab.get(a.get("content")) == a.get("id") for a in added)
         and {a["content"] for a in added} == set(_SPECIAL_DEFAULTS.values()), "added tokens are not BERT's")
    cls_id, sep_id = ids["[CLS]"], ids["[SEP]"]
    pp = tj.get("post_processor") or {}
    need(pp.get("type") == "TemplateProcessing"
         and pp.get("single") == [{"SpecialToken": {"id": "[CLS]", "type_id": 0}},
                                  {"Sequence": {"id": "A", "type_id": 0}},
                                  {"SpecialToken": {"id": "[SEP]", "type_id": 0}}]
         and (pp.get("special_tokens") or {}).get("[CLS]", {}).get("ids") == [cls_id]
         and (pp.get("special_tokens") or {}).get("[SEP]", {}).get("ids") == [sep_id],
         "post-processor is not [CLS] $A [SEP]")
    pad_type_id = tcfg.get("pad_token_type_id", 0)
    need(pad_type_id == 0, "pad_token_type_id")
    return tcfg, ids

def supported(folder: str | Path) -> bool:
    """Whether :class:`LeanBertEncoder` reproduces the sentence-transformers model in ``folder``."""
    try:
        check(folder)
    except (Unsupported, OSError, ValueError, TypeError, KeyError):
        return False
    return True


class LeanBertEncoder:
    """The sentence-transformers BERT mean-pooling model in ``folder``, on CPU, with the ``encode`` of a
    ``SentenceTransformer`` (the part of it kgrag uses) and the same vectors."""

    def __init__(self, folder: str | Path):
        import torch
        from safetensors.torch import load_file
        from tokenizers import Tokenizer

        spec = check(folder)
        self.folder = spec["folder"]
        self.max_seq_length = spec["max_length"]
        self._spec = spec
        self._hidden, self._heads = spec["hidden"], spec["heads"]
        self._head_dim = self._hidden // self._heads
        self._scale = self._head_dim ** -0.5  # BertSelfAttention.scaling
        self._eps = spec["eps"]
        self._normalize = spec["normalize"]

        tok = Tokenizer.from_file(str(Path(folder) / "tokenizer.json"))
        tok.enable_truncation(max_length=self.max_seq_length, stride=0, strategy="longest_first", direction="right")
        tok.enable_padding(direction="right", pad_id=spec["pad_id"], pad_type_id=0, pad_token="[PAD]")
        self.tokenizer = tok

        state = load_file(spec["weights"], device="cpu")
        word = "embeddings.word_embeddings.weight"
        for prefix in ("bert.", "model."):  # a checkpoint of a BERT with a head keeps the encoder under a prefix
            if word not in state and prefix + word in state:
                state = {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}

        def w(name: str) -> torch.Tensor:
            if name not in state:
                raise Unsupported(f"{self.folder}: weight {name} missing")
            t = state[name]
            if t.dtype != torch.float32:
                raise Unsupported(f"{self.folder}: weight {name} is {t.dtype}, not float32")
            return t.contiguous()

        self._emb = {k: w(f"embeddings.{k}") for k in (
            "word_embeddings.weight", "position_embeddings.weight", "token_type_embeddings.weight",
            "LayerNorm.weight", "LayerNorm.bias")}
        self._layers = []
        for i in range(spec["layers"]):
            p = f"encoder.layer.{i}."
            self._layers.append({k: w(p + k) for k in (
                "attention.self.query.weight", "attention.self.query.bias",
                "attention.self.key.weight", "attention.self.key.bias",
                "attention.self.value.weight", "attention.self.value.bias",
                "attention.output.dense.weight", "attention.output.dense.bias",
                "attention.output.LayerNorm.weight", "attention.output.LayerNorm.bias",
                "intermediate.dense.weight", "intermediate.dense.bias",
                "output.dense.weight", "output.dense.bias",
                "output.LayerNorm.weight", "output.LayerNorm.bias")})
        if f"encoder.layer.{spec['layers']}.attention.self.query.weight" in state:
            raise Unsupported(f"{self.folder}: more layers in the weights than in the config")
        if self._emb["word_embeddings.weight"].shape[1] != self._hidden:
            raise Unsupported(f"{self.folder}: embedding size differs from the hidden size")

    def __repr__(self) -> str:
        return f"LeanBertEncoder({self.folder!r}, max_seq_length={self.max_seq_length})"

    # ---- the SentenceTransformer interface kgrag uses -------------------------------------------------------
    def get_sentence_embedding_dimension(self) -> int:
        return self._hidden

    get_embedding_dimension = get_sentence_embedding_dimension

    def encode(self, sentences, batch_size: int = 32, show_progress_bar: bool | None = None,
               convert_to_numpy: bool = True, convert_to_tensor: bool = False, normalize_embeddings: bool = False):
        """Embeddings of ``sentences`` (a string or a list of strings), as ``SentenceTransformer.encode``."""
        import torch

        if batch_size <= 0:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size}.")
        if convert_to_tensor:
            convert_to_numpy = False
        single = isinstance(sentences, str)
        texts = [sentences] if single else (
            sentences if isinstance(sentences, list)
            else sentences.tolist() if isinstance(sentences, np.ndarray) else list(sentences))
        for t in texts:
            if not isinstance(t, str):
                raise TypeError(f"LeanBertEncoder encodes strings, not {type(t).__name__}")

        rows: list[torch.Tensor] = []
        order = np.argsort([-len(t) for t in texts])  # SentenceTransformer._inference's length sort
        ordered = [texts[i] for i in order]
        starts = range(0, len(ordered), batch_size)
        if show_progress_bar:
            from tqdm.autonotebook import trange

            starts = trange(0, len(ordered), batch_size, desc="Batches")
        with torch.inference_mode():
            for start in starts:
                emb = self._embed(ordered[start: start + batch_size])
                if normalize_embeddings:
                    emb = torch.nn.functional.normalize(emb, p=2, dim=1)
                rows.extend(emb)
        rows = [rows[i] for i in np.argsort(order)]

        if convert_to_tensor:
            out = torch.stack(rows) if rows else torch.tensor([])
        elif convert_to_numpy:
            out = torch.stack(rows).numpy() if rows else np.array([])
        else:
            out = rows
        return out[0] if single else out

    # ---- the model ------------------------------------------------------------------------------------------
    def _tokenize(self, texts: list[str]):
        import torch

        enc = self.tokenizer.encode_batch(texts, add_special_tokens=True)
        ids = torch.tensor([e.ids for e in enc], dtype=torch.long)
        mask = torch.tensor([e.attention_mask for e in enc], dtype=torch.long)
        types = torch.tensor([e.type_ids for e in enc], dtype=torch.long)
        return ids, types, mask

    def _embed(self, texts: list[str]):
        """Pooled (and, with a Normalize module, normalized) embeddings of one batch: the model's forward."""
        import torch
        import torch.nn.functional as F

        ids, types, mask = self._tokenize(texts)
        B, L = ids.shape
        e = self._emb
        # BertEmbeddings.forward: (word + token_type) + position, LayerNorm (dropout: eval, identity)
        h = F.embedding(ids, e["word_embeddings.weight"]) + F.embedding(types, e["token_type_embeddings.weight"])
        h = h + F.embedding(torch.arange(L).unsqueeze(0), e["position_embeddings.weight"])
        h = F.layer_norm(h, (self._hidden,), e["LayerNorm.weight"], e["LayerNorm.bias"], self._eps)

        # masking_utils.create_bidirectional_mask -> sdpa_mask: None without padding, else bool (B, 1, L, L)
        pad = mask.to(dtype=torch.bool)
        attn_mask = None if bool(pad.all()) else pad[:, None, None, :].expand(B, 1, L, L).contiguous()

        shape = (B, L, -1, self._head_dim)
        for p in self._layers:
            q, k, v = (F.linear(h, p[f"attention.self.{n}.weight"], p[f"attention.self.{n}.bias"])
                       .view(shape).transpose(1, 2) for n in ("query", "key", "value"))
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=0.0, is_causal=False,
                                               scale=self._scale)
            a = a.transpose(1, 2).contiguous().reshape(B, L, -1).contiguous()
            a = F.linear(a, p["attention.output.dense.weight"], p["attention.output.dense.bias"])
            h = F.layer_norm(a + h, (self._hidden,), p["attention.output.LayerNorm.weight"],
                             p["attention.output.LayerNorm.bias"], self._eps)
            x = F.gelu(F.linear(h, p["intermediate.dense.weight"], p["intermediate.dense.bias"]))
            x = F.linear(x, p["output.dense.weight"], p["output.dense.bias"])
            h = F.layer_norm(x + h, (self._hidden,), p["output.LayerNorm.weight"], p["output.LayerNorm.bias"],
                             self._eps)

        # Pooling._forward_padded, mode "mean"
        m = mask.unsqueeze(-1).to(h.dtype)
        pooled = (h * m).sum(dim=1, dtype=torch.float32) / torch.clamp(m.sum(dim=1, dtype=torch.float32), min=1e-9)
        if self._normalize:  # Normalize module
            pooled = F.normalize(pooled, p=2, dim=-1)
        return pooled
