"""A tiny, fully known "language model" for the vLLM protocol tests: a next-token distribution that depends on
the previous token and the position, so a score read one position off, or over the prompt's tokens, differs.

``logprob(prefix, tok)`` is log p(tok | prefix) under a softmax over ``VOCAB`` token ids of the logits
``((c + 13 j) mod 29) / 3`` with ``c = (31 prefix[-1] + 7 len(prefix)) mod 29``.

``encode_text`` / ``encode_chat`` are a character-level tokenizer (token id = code point, ASCII only) with a
chat template: ``BOS, then per message ROLE[role] content END, then ROLE["assistant"]`` when a generation
prompt is asked for.
"""

from __future__ import annotations

import math
from functools import lru_cache

VOCAB = 128
BOS, END = 1, 5
ROLE = {"system": 2, "user": 3, "assistant": 4}
NAMES = {BOS: "<s>", END: "<|end|>", **{v: f"<|{k}|>" for k, v in ROLE.items()}}


@lru_cache(maxsize=None)
def _table(c: int) -> tuple[float, ...]:
    z = [((c + 13 * j) % 29) / 3.0 for j in range(VOCAB)]
    lse = math.log(sum(math.exp(x) for x in z))
    return tuple(x - lse for x in z)


def _dist(prefix) -> tuple[float, ...]:
    return _table((31 * prefix[-1] + 7 * len(prefix)) % 29)


def logprob(prefix, tok: int) -> float:
    """log p(tok | prefix); ``prefix`` is non-empty."""
    return _dist(prefix)[tok]


def rank(prefix, tok: int) -> int:
    """1 + the number of tokens more likely than ``tok`` after ``prefix`` (vLLM's ``Logprob.rank``)."""
    d = _dist(prefix)
    return 1 + sum(1 for x in d if x > d[tok])


def argmax(prefix) -> int:
    d = _dist(prefix)
    return max(range(VOCAB), key=lambda j: (d[j], -j))


def decode(tok: int) -> str:
    return NAMES.get(tok, chr(tok))


def encode_text(text: str, add_special_tokens: bool) -> list[int]:
    ids = [ord(ch) for ch in text]
    if any(not 32 <= i < VOCAB and i != 10 for i in ids):
        raise ValueError(f"toy tokenizer: ASCII text only: {text!r}")
    return ([BOS] if add_special_tokens else []) + ids


def encode_chat(messages: list[dict], add_generation_prompt: bool) -> list[int]:
    ids = [BOS]
    for m in messages:
        ids += [ROLE[m["role"]], *encode_text(m["content"], False), END]
    return ids + ([ROLE["assistant"]] if add_generation_prompt else [])


def continuation_logprob(prompt: list[int], cont: list[int]) -> float:
    """Sum of log p(cont[t] | prompt + cont[:t]) over the continuation's tokens, in order."""
    full = prompt + cont
    total = 0.0
    for i in range(len(prompt), len(full)):
        total += logprob(full[:i], full[i])
    return total
