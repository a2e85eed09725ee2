"""Robust parsers of LLM outputs. Each returns None when nothing usable is found; callers count that as
an unparseable output and apply their documented fallback, so a reply never crashes a run."""

from __future__ import annotations

import re
from collections import Counter

_LETTER = re.compile(r"\{\s*([A-Z])\s*\}")
_BARE = re.compile(r"(?:^|[\s(\[:])([A-Z])(?=$|[\s).,\]:])")
_NUM = re.compile(r"[-+]?\d*\.?\d+")
_YES = re.compile(r"\b(yes|no)\b", re.IGNORECASE)
_ANSWER = re.compile(r"(?:final answer|answer)\s*(?:is)?\s*[:：]\s*(.+)", re.IGNORECASE)


def letters(n: int) -> list[str]:
    """Option letters A, B, ... for ``n`` options (at most 26)."""
    return [chr(ord("A") + i) for i in range(min(n, 26))]


def parse_choices(text: str, n: int, k: int = 1) -> list[int] | None:
    """Up to ``k`` distinct option indices from ``{A}``-style letters (bare letters as a second chance), in
    reply order; None when no valid letter is found."""
    valid = set(letters(n))
    found: list[int] = []
    for pattern in (_LETTER, _BARE):
        for m in pattern.finditer(text or ""):
            c = m.group(1)
            if c in valid and (ord(c) - ord("A")) not in found:
                found.append(ord(c) - ord("A"))
        if found:
            break
    return found[:k] or None


def parse_yes_no(text: str) -> bool | None:
    """The first yes / no in the reply; None when neither appears."""
    m = _YES.search(text or "")
    return None if m is None else m.group(1).lower() == "yes"


def parse_score(text: str, lo: float = 0.0, hi: float = 1.0) -> float | None:
    """The first number in the reply, clipped to [lo, hi]; None when there is none."""
    m = _NUM.search(text or "")
    if m is None:
        return None
    try:
        return float(min(hi, max(lo, float(m.group(0)))))
    except ValueError:
        return None


def final_answer(text: str) -> str | None:
    """The text after the last ``Answer:`` marker (chain-of-thought replies); None when there is none."""
    ms = list(_ANSWER.finditer(text or ""))
    if not ms:
        return None
    ans = ms[-1].group(1).strip().splitlines()[0].strip() if ms[-1].group(1).strip() else ""
    return ans or None


def is_unknown(text: str) -> bool:
    """Whether a reply declines to answer (``Unknown``, ``I don't know``, empty)."""
    t = (text or "").strip().lower()
    return not t or t.startswith("unknown") or "i don't know" in t or "i do not know" in t or t in {"none", "n/a"}


def majority(answers: list[str]) -> str:
    """The most frequent non-empty answer (normalized), ties to the earliest; "" when all are empty."""
    norm = [a.strip() for a in answers if a and a.strip()]
    if not norm:
        return ""
    counts = Counter(a.lower() for a in norm)
    best = max(counts.values())
    return next(a for a in norm if counts[a.lower()] == best)
