"""Continuation scoring on llama.cpp's low-level API: one context, several sequences sharing a prompt's KV state.

Used by the ``llamacpp`` backend for scoring requests (``LLMRequest.continuations``). For one prompt and its
continuations ``c_1 .. c_m``:

1. the prompt's tokens are evaluated once in sequence 0; the longest token prefix it shares with the previous
   prompt is kept in the KV cache and not evaluated again (the fixed head of every prompt: instruction and
   worked example);
2. sequence 0's cells are shared with sequences ``1 .. m`` (``llama_memory_seq_cp``: with a unified KV cache
   this tags the cells, nothing is copied);
3. the continuations' tokens go into ONE ``llama_decode`` batch, continuation ``j`` in sequence ``j`` at
   positions ``P, P+1, ...`` so it attends to the prompt and to itself only;
4. ``log p(c_j) = sum_t log softmax(logits)[c_j,t]``, the first token's from the prompt's last logits, token t's
   from the logits after token t-1 (a continuation's last token is never evaluated: its logits are not needed);
5. sequences ``1 .. m`` are dropped (``llama_memory_seq_rm``), the prompt stays for the next call.

No logits are read from a 1-token ``llama_decode``: llama.cpp's CPU kernels for a batch of one token differ from
the batched ones (measured here: up to 0.2 nats on SmolLM2), so the last 2 prompt tokens are always evaluated
again and a 1-token candidate batch is padded; scores then agree with a from-scratch evaluation within 1e-3.

References
----------
Luo et al., Graph-constrained Reasoning (GCR, 2024, arXiv 2410.13080): answers restricted to KG entities and
ranked by the LLM's likelihood.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np


def chat_tokens(llm: Any, messages: list[dict[str, str]]) -> list[int]:
    """The prompt tokens ``llm.create_chat_completion(messages)`` evaluates: the GGUF's chat template rendered
    as llama-cpp-python 0.3.x renders it (``Jinja2ChatFormatter``, generation prompt added), tokenized with
    special tokens parsed."""
    from llama_cpp import llama_chat_format

    template = llm.metadata.get("tokenizer.chat_template")
    if template is None:
        raise ValueError("the GGUF has no tokenizer.chat_template: cannot build the chat prompt for scoring")
    eos_id, bos_id = llm.token_eos(), llm.token_bos()
    eos = llm._model.token_get_text(eos_id) if eos_id != -1 else ""
    bos = llm._model.token_get_text(bos_id) if bos_id != -1 else ""
    fmt = llama_chat_format.Jinja2ChatFormatter(template=template, eos_token=eos, bos_token=bos,
                                                 stop_token_ids=[eos_id])
    res = fmt(messages=messages)
    return list(llm.tokenize(res.prompt.encode("utf-8"), add_bos=not res.added_special, special=True))


def continuation_tokens(llm: Any, text: str) -> list[int]:
    """Tokens of a continuation as the reply's start: no BOS, special-token text left as text."""
    return list(llm.tokenize(text.encode("utf-8"), add_bos=False, special=False))


def log_softmax_at(logits: np.ndarray, token: int) -> float:
    """``log softmax(logits)[token]`` in float64."""
    x = logits.astype(np.float64)
    m = x.max()
    return float(x[token] - m - np.log(np.exp(x - m).sum()))


class ScoreEngine:
    """A second llama.cpp context on an already loaded ``Llama``'s weights, with ``n_seq_max`` sequences and a
    unified KV cache, for scoring continuations (see the module docstring)."""

    def __init__(self, llm: Any, *, n_ctx: int, n_batch: int, n_threads: int, n_seq_max: int = 64) -> None:
        import llama_cpp
        from llama_cpp import _internals

        self._lc = llama_cpp
        self.llm = llm
        p = llama_cpp.llama_context_default_params()
        n_batch = max(2, n_batch)
        p.n_ctx = n_ctx
        p.n_batch = n_batch
        p.n_ubatch = n_batch
        p.n_seq_max = max(3, min(n_seq_max, llama_cpp.llama_max_parallel_sequences()))  # seq 0, 1+, scratch
        p.kv_unified = True
        # as ``Llama(flash_attn=False)`` has it: the library default (auto) turns flash attention on, whose f16
        # accumulation moved log-probs by up to 0.2 nats against the generation context
        p.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
        p.no_perf = False  # llama.cpp's perf counters (bench/inference.py reads them)
        p.n_threads = n_threads
        p.n_threads_batch = n_threads
        self.ctx = _internals.LlamaContext(model=llm._model, params=p, verbose=False)
        self.n_ctx, self.n_batch, self.n_seq_max = n_ctx, n_batch, int(p.n_seq_max)
        self.n_vocab = llm.n_vocab()
        self.batch = llama_cpp.llama_batch_init(n_batch, 0, self.n_seq_max)
        self.cached: list[int] = []  # the tokens of sequence 0 in the KV cache
        self.evaluated = 0  # prompt tokens evaluated (prefill), for the benchmarks
        self.reused = 0  # prompt tokens found in the KV cache instead

    def close(self) -> None:
        """Free the batch and the context."""
        if self.batch is not None:
            self._lc.llama_batch_free(self.batch)
            self.batch = None
        self.ctx.close()

    def _decode(self, items: Sequence[tuple[int, int, int, bool]]) -> None:
        """One ``llama_decode`` of (token, position, sequence, wants logits) items (at most ``n_batch``)."""
        b = self.batch
        b.n_tokens = len(items)
        for i, (tok, pos, seq, lg) in enumerate(items):
            b.token[i] = tok
            b.pos[i] = pos
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = seq
            b.logits[i] = lg
        rc = self._lc.llama_decode(self.ctx.ctx, b)
        if rc != 0:
            raise RuntimeError(f"llama_decode returned {rc} (KV cache full? n_ctx={self.n_ctx})")

    def _logits(self, i: int) -> np.ndarray:
        return np.ctypeslib.as_array(self._lc.llama_get_logits_ith(self.ctx.ctx, i), shape=(self.n_vocab,)).copy()

    def prefill(self, tokens: Sequence[int]) -> np.ndarray:
        """Evaluate ``tokens`` in sequence 0, reusing the cached common prefix; the last token's logits."""
        tokens = list(tokens)
        if not tokens:
            raise ValueError("empty prompt")
        if len(tokens) >= self.n_ctx:
            raise ValueError(f"prompt of {len(tokens)} tokens does not fit n_ctx={self.n_ctx}")
        common = 0
        for a, b in zip(self.cached, tokens):
            if a != b:
                break
            common += 1
        # at least the last 2 tokens are evaluated again, in batches of 2 or more: llama.cpp's CPU kernels for a
        # 1-token batch differ from the batched ones (measured: up to 0.2 nats on SmolLM2), and a score must not
        # depend on how much of its prompt the previous call left in the cache
        keep = max(0, min(common, len(tokens) - 2))
        mem = self.ctx.memory
        self._lc.llama_memory_seq_rm(mem, 0, keep, -1)
        self.cached = tokens[:keep]
        rest = tokens[keep:]
        bounds = list(range(0, len(rest), self.n_batch)) + [len(rest)]
        if len(bounds) > 2 and bounds[-1] - bounds[-2] == 1:
            bounds[-2] -= 1  # no 1-token last chunk
        for s0, s1 in zip(bounds, bounds[1:]):
            chunk = rest[s0:s1]
            self._decode([(t, keep + s0 + i, 0, s1 == len(rest) and i == len(chunk) - 1) for i, t in enumerate(chunk)])
            self.cached += chunk
        self.evaluated += len(rest)
        self.reused += keep
        return self._logits(len(rest) - bounds[-2] - 1)

    def score(self, prompt: Sequence[int], continuations: Sequence[Sequence[int]]) -> list[tuple[float, int]]:
        """(sum of token log-probs, token count) of each continuation after ``prompt``."""
        last = self.prefill(prompt)
        P = len(self.cached)
        first = [log_softmax_at(last, c[0]) if c else 0.0 for c in continuations]
        out = [(first[j], len(c)) for j, c in enumerate(continuations)]
        # continuations of 2+ tokens: their tokens but the last, in as few batches as fit
        todo = [j for j, c in enumerate(continuations) if len(c) >= 2]
        for c in continuations:
            if P + len(c) > self.n_ctx:
                raise ValueError(f"prompt + continuation of {P + len(c)} tokens does not fit n_ctx={self.n_ctx}")
        mem = self.ctx.memory
        while todo:
            group: list[int] = []
            size = 0
            while todo and len(group) < self.n_seq_max - 2 and size + len(continuations[todo[0]]) - 1 <= self.n_batch:
                size += len(continuations[todo[0]]) - 1
                group.append(todo.pop(0))
            if not group:  # one continuation longer than a batch: scored alone, token by token batches
                group.append(todo.pop(0))
            items, where = [], []
            for k, j in enumerate(group):
                seq = k + 1
                self._lc.llama_memory_seq_cp(mem, 0, seq, -1, -1)
                c = continuations[j]
                for t in range(len(c) - 1):
                    where.append((j, t + 1, len(items)))
                    items.append((c[t], P + t, seq, True))
            totals = {j: 0.0 for j in group}
            for s in range(0, len(items), self.n_batch):
                chunk = items[s: s + self.n_batch]
                if len(chunk) == 1:  # a 1-token batch takes other kernels (see prefill): pad it with a copy
                    scratch = self.n_seq_max - 1  # in a scratch sequence, its logits unused
                    self._lc.llama_memory_seq_cp(mem, 0, scratch, -1, -1)
                    self._decode([chunk[0], (chunk[0][0], chunk[0][1], scratch, False)])
                    self._lc.llama_memory_seq_rm(mem, scratch, -1, -1)
                else:
                    self._decode(chunk)
                for j, t, idx in where:
                    if s <= idx < s + len(chunk):
                        totals[j] += log_softmax_at(self._logits(idx - s), continuations[j][t])
            for k, j in enumerate(group):
                self._lc.llama_memory_seq_rm(mem, k + 1, -1, -1)
                out[j] = (out[j][0] + totals[j], out[j][1])
        return out
