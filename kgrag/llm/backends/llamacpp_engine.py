"""Continuation scoring on llama.cpp's low-level API: one context, several sequences sharing a prompt's KV state.

Used by the ``llamacpp`` backend for scoring requests (``LLMRequest.continuations``). For one prompt and its
continuations ``c_1 .. c_m``:

1. the prompt's tokens are evaluated once in sequence 0; the longest token prefix it shares with the previous
   prompt is kept in the KV cache and not evaluated again (the fixed head of every prompt: instruction and
   worked example);
2. sequence 0's cells are shared with the other sequences (``llama_memory_seq_cp``);
3. the continuations' tokens go into ONE ``llama_decode`` batch (per group of ``n_seq_max``), each continuation
   in its own sequence at positions ``P, P+1, ...`` so it attends to the prompt and to itself only;
4. ``log p(c_j) = sum_t log softmax(logits)[c_j,t]``, the first token's from the prompt's last logits, token t's
   from the logits after token t-1 (a continuation's last token is never evaluated: its logits are not needed);
5. the continuations' cells are dropped (``llama_memory_seq_rm``), the prompt stays for the next call.

Layout (``exact``). A score must be a function of (prompt, continuation) alone, not of the candidates scored
beside it. In one unified KV cache (``exact=False``) continuation ``j`` sits after the cells of continuations
``1 .. j-1``, and its log-probs moved by up to 0.28 nats against scoring it alone (``bench/multiseq.py``;
ggml-org/llama.cpp#24962); the likely cause: llama.cpp's CPU attention sums over KV *cells* in SIMD lanes and
blocks, so the result depends on which cells a sequence's tokens occupy. With ``exact=True`` (the default) every
sequence has its own KV stream (``kv_unified = false``): the prompt sits in cells ``0 .. P-1`` of stream 0 and
of a whole-stream copy in each other stream, and a continuation follows at ``P ..`` of its stream (the first of
a group in stream 0 itself, dropped afterwards), the layout of a from-scratch evaluation, whatever the
neighbours. Each
continuation is padded (its last token repeated, logits unused) to a multiple of ``PAD_TOKENS`` tokens, so no
micro-batch llama.cpp cuts from the batch (it splits streams into equal-length groups) holds 1 token: a 1-token
batch takes other CPU kernels (measured here: up to 0.2 nats on SmolLM2). Measured: together, alone and in a
fresh context the scores are bit-identical (``tests/test_rank.py``, ``bench/multiseq.py``); cost: see
reports/bench/multiseq.json.

No logits are read from a 1-token ``llama_decode`` (see above): the last 2 prompt tokens are always evaluated
again, so a score does not depend on how much of its prompt the previous call left in the cache.

References
----------
Luo et al., Graph-constrained Reasoning (GCR, 2024, arXiv 2410.13080): answers restricted to KG entities and
ranked by the LLM's likelihood.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from kgrag.llm.calls import PermanentLLMError


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


#: a continuation's evaluated tokens are padded to a multiple of this (``exact`` layout; module docstring)
PAD_TOKENS = 4
#: ``exact``: KV cells of each stream at first; doubled when a call needs more (up to ``n_ctx``)
MIN_STREAM_CELLS = 512


def padded_tokens(continuation: Sequence[int]) -> int:
    """Tokens a continuation is evaluated as in the ``exact`` layout: all but its last, padded to a multiple of
    ``PAD_TOKENS``."""
    return -(-(len(continuation) - 1) // PAD_TOKENS) * PAD_TOKENS


class ScoreEngine:
    """A second llama.cpp context on an already loaded ``Llama``'s weights, with ``n_seq_max`` sequences, for
    scoring continuations (see the module docstring).

    ``exact=True`` (default ``n_seq_max`` 8): one KV stream per sequence, ``MIN_STREAM_CELLS`` cells each at first,
    doubled up to ``n_ctx`` when a call needs more (memory: ``n_seq_max`` times that), scores independent of the
    other continuations of a call; ``exact=False`` (default 64 sequences): one unified cache of ``n_ctx`` cells
    shared by all sequences, faster, scores that can depend on the neighbours (module docstring)."""

    def __init__(self, llm: Any, *, n_ctx: int, n_batch: int, n_threads: int, n_seq_max: int | None = None,
                 exact: bool = True) -> None:
        import llama_cpp

        self._lc = llama_cpp
        self.llm = llm
        n_batch = max(PAD_TOKENS if exact else 2, n_batch)
        if n_seq_max is None:
            n_seq_max = 8 if exact else 64
        n_seq = max(1 if exact else 3, min(n_seq_max, llama_cpp.llama_max_parallel_sequences()))  # 0, 1+(, scratch)
        self.exact = exact
        self.n_ctx, self.n_batch, self.n_seq_max = n_ctx, n_batch, n_seq
        self.n_threads = n_threads
        # the continuations' decode in per-sequence streams runs on ONE thread: its graph is many small per-stream
        # operations, each a thread barrier; measured here (31 candidates x 5 prompts, 2 cores, passive OpenMP
        # wait): 1 thread 3.4 s, 2 threads 5.9 s. Prompts (one stream) keep n_threads.
        self.stream_threads = 1
        self.n_vocab = llm.n_vocab()
        self.ctx: Any = None
        self.stream_cells = 0  # exact: KV cells of each stream (grown on demand up to n_ctx)
        self._make_context(n_ctx if not exact else min(n_ctx, MIN_STREAM_CELLS))
        self.batch = llama_cpp.llama_batch_init(n_batch, 0, self.n_seq_max)
        self.evaluated = 0  # prompt tokens evaluated (prefill), for the benchmarks
        self.reused = 0  # prompt tokens found in the KV cache instead

    def _make_context(self, cells: int) -> None:
        """(Re)create the llama.cpp context; ``exact``: streams of ``cells`` KV cells each. A stream copy
        (``llama_memory_seq_cp`` across streams) copies the whole stream, so streams are kept as small as the
        calls need (measured on the default experiment: 4096-cell streams 159 q/min, 1024-cell 170)."""
        from llama_cpp import _internals

        lc = self._lc
        if self.ctx is not None:
            self.ctx.close()
        p = lc.llama_context_default_params()
        p.n_ctx = cells * self.n_seq_max if self.exact else cells  # exact: each stream gets n_ctx / n_seq_max
        p.n_batch = self.n_batch
        p.n_ubatch = self.n_batch
        p.n_seq_max = self.n_seq_max
        p.kv_unified = not self.exact
        # as ``Llama(flash_attn=False)`` has it: the library default (auto) turns flash attention on, whose f16
        # accumulation moved log-probs by up to 0.2 nats against the generation context
        p.flash_attn_type = lc.LLAMA_FLASH_ATTN_TYPE_DISABLED
        p.no_perf = False  # llama.cpp's perf counters (bench/inference.py reads them)
        p.n_threads = self.n_threads
        p.n_threads_batch = self.n_threads
        self.ctx = _internals.LlamaContext(model=self.llm._model, params=p, verbose=False)
        self._threads_set = self.n_threads
        self.stream_cells = cells
        self.cached: list[int] = []  # the tokens of sequence 0 in the KV cache

    def _fit(self, cells: int) -> None:
        """``exact``: streams of at least ``cells`` cells (doubling, at most ``n_ctx``; the cache is lost)."""
        if self.exact and cells > self.stream_cells:
            size = self.stream_cells
            while size < cells:
                size *= 2
            self._make_context(min(size, self.n_ctx))

    def close(self) -> None:
        """Free the batch and the context."""
        if self.batch is not None:
            self._lc.llama_batch_free(self.batch)
            self.batch = None
        self.ctx.close()

    def _decode(self, items: Sequence[tuple[int, int, int, bool]], threads: int | None = None) -> None:
        """One ``llama_decode`` of (token, position, sequence, wants logits) items (at most ``n_batch``), on
        ``threads`` CPU threads (default ``n_threads``)."""
        threads = threads or self.n_threads
        if threads != self._threads_set:
            self._lc.llama_set_n_threads(self.ctx.ctx, threads, threads)
            self._threads_set = threads
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
            raise PermanentLLMError(f"prompt of {len(tokens)} tokens does not fit n_ctx={self.n_ctx}")
        self._fit(len(tokens))
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
        if self.exact and continuations:
            self._fit(len(prompt) + max(padded_tokens(c) for c in continuations))
        last = self.prefill(prompt)
        P = len(self.cached)
        first = [log_softmax_at(last, c[0]) if c else 0.0 for c in continuations]
        out = [(first[j], len(c)) for j, c in enumerate(continuations)]
        # continuations of 2+ tokens: their tokens but the last, in as few batches as fit
        todo = [j for j, c in enumerate(continuations) if len(c) >= 2]
        for c in continuations:
            need = P + (padded_tokens(c) if self.exact else len(c))
            if need > self.n_ctx:
                raise PermanentLLMError(f"prompt + continuation of {need} tokens does not fit n_ctx={self.n_ctx}")
        if self.exact:
            return self._score_streams(continuations, P, todo, out)
        return self._score_unified(continuations, P, todo, out)

    def _score_streams(self, continuations: Sequence[Sequence[int]], P: int, todo: list[int],
                       out: list[tuple[float, int]]) -> list[tuple[float, int]]:
        """``exact`` layout: the k-th continuation of a group in stream k (stream 0 holds the prompt itself;
        streams 1.. a copy of it), padded to a multiple of ``PAD_TOKENS``; groups of up to ``n_seq_max``
        continuations and ``n_batch`` tokens."""
        mem = self.ctx.memory
        # one continuation longer than a batch is evaluated in batches of PAD_TOKENS multiples (never 1 token)
        step = max(PAD_TOKENS, self.n_batch // PAD_TOKENS * PAD_TOKENS)
        while todo:
            group, items, where = [], [], []
            while todo and len(group) < self.n_seq_max:
                c = continuations[todo[0]]
                padded = padded_tokens(c)
                if group and len(items) + padded > step:
                    break
                j = todo.pop(0)
                seq = len(group)
                group.append(j)
                if seq:
                    self._lc.llama_memory_seq_cp(mem, 0, seq, -1, -1)
                for t in range(padded):
                    real = t < len(c) - 1
                    if real:
                        where.append((j, t + 1, len(items)))
                    items.append((c[t] if real else c[-1], P + t, seq, real))
            totals = {j: 0.0 for j in group}
            for s in range(0, len(items), step):
                chunk = items[s: s + step]
                self._decode(chunk, threads=self.stream_threads)
                for j, t, idx in where:
                    if s <= idx < s + len(chunk):
                        totals[j] += log_softmax_at(self._logits(idx - s), continuations[j][t])
            self._lc.llama_memory_seq_rm(mem, 0, P, -1)  # the prompt stays in stream 0
            for k, j in enumerate(group):
                if k:
                    self._lc.llama_memory_seq_rm(mem, k, -1, -1)
                out[j] = (out[j][0] + totals[j], out[j][1])
        return out

    def _score_unified(self, continuations: Sequence[Sequence[int]], P: int, todo: list[int],
                       out: list[tuple[float, int]]) -> list[tuple[float, int]]:
        """Unified KV cache layout (``exact=False``): continuations in sequences 1..m of one cache."""
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
