"""Robust parsers of LLM outputs. Each returns None when nothing usable is found; callers count that as
an unparseable output and apply their documented fallback, so a reply never crashes a run."""

from __future__ import annotations

import re
from collections import Counter

_LETTER = re.compile(r"\{\s*([A-Z])\s*\}")
_BARE = re.compile(r"(?:^|[\s(\[:])([A-Z])(?=$|[\s).,\]:])")
# "I" and "A" before a lower-case word are the pronoun and the article ("I think B", "A good pick is C"), not
# options; before and / or / a verb a letter names an option ("A and C", "A is best", "I seems right")
_WORD_LETTER = re.compile(r"[IA]\s+(?!(?:and|or|is|are|was|seems|looks|fits|leads|has|contains|would|should|could"
                          r"|because|since|then|first|best)\b)[a-z]")
_NUM = re.compile(r"[-+]?\d*\.?\d+")
_YES = re.compile(r"\b(yes|no)\b", re.IGNORECASE)
_ANSWER = re.compile(r"(?:final answer|answer)\s*(?:is)?\s*[:：]\s*(.+)", re.IGNORECASE)


def letters(n: int) -> list[str]:
    """Option letters A, B, ... for ``n`` options (at most 26)."""
    return [chr(ord("A") + i) for i in range(min(n, 26))]


def parse_choices(text: str, n: int, k: int = 1) -> list[int] | None:
    """Up to ``k`` distinct option indices from ``{A}``-style letters (bare letters as a second chance), in
    reply order; None when no valid letter is found.

    A bare ``I`` or ``A`` followed by a lower-case word is English (``I think B`` is [B], not [I, B];
    ``A good pick is C`` is [C]), not an option letter — unless that word is and / or or a verb such as is /
    seems / looks (``A and C``, ``A is best``).
    """
    valid = set(letters(n))
    found: list[int] = []
    for pattern in (_LETTER, _BARE):
        for m in pattern.finditer(text or ""):
            c = m.group(1)
            if pattern is _BARE and _WORD_LETTER.match(text, m.start(1)):
                continue
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


_SCALE = re.compile(r"(?:\bon\s+)?(?:\ba\s+)?\bscale\s+(?:of|from)\s+([-+]?\d*\.?\d+)\s*(?:to|-|–)\s*(\d*\.?\d+)",
                    re.IGNORECASE)
_FRACTION = re.compile(r"([-+]?\d*\.?\d+)\s*(?:/|\bout\s+of\b)\s*(\d*\.?\d+)", re.IGNORECASE)
_PERCENT = re.compile(r"([-+]?\d*\.?\d+)\s*%")


def parse_rating(text: str, lo: float = 0.0, hi: float = 10.0) -> float | None:
    """A rating reply read on the prompt's ``lo``-``hi`` scale, as a 0-1 score (clipped); None without a number.

    Scale-aware, in this order: a scale the reply states (``on a scale of 0 to 10: 8``) replaces the prompt's
    and is not itself the rating; a fraction (``8/10``, ``1/10``, ``7 out of 10``) is numerator / denominator;
    a percentage (``80%``) is / 100; a decimal number in [0, 1] with a point (``0.8``) is already a
    probability; any other number (``8``, ``1``, ``10``, ``7.5``) is on the scale: (x - lo) / (hi - lo).
    So ``1`` reads 0.1 and ``10`` reads 1.0 on the default 0-10 scale.
    """
    t = text or ""
    sm = _SCALE.search(t)
    if sm is not None:
        lo, hi = float(sm.group(1)), float(sm.group(2))
        t = t[: sm.start()] + " " + t[sm.end():]
    cands = [(m.start(), "fraction", m) for m in [_FRACTION.search(t)] if m is not None]
    cands += [(m.start(), "percent", m) for m in [_PERCENT.search(t)] if m is not None]
    cands += [(m.start(), "number", m) for m in [_NUM.search(t)] if m is not None]
    if not cands:
        return None
    rank = {"fraction": 0, "percent": 1, "number": 2}
    _, kind, m = min(cands, key=lambda c: (c[0], rank[c[1]]))
    try:
        if kind == "fraction":
            den = float(m.group(2))
            if den <= 0:
                return None
            v = float(m.group(1)) / den
        elif kind == "percent":
            v = float(m.group(1)) / 100.0
        else:
            raw = m.group(0)
            x = float(raw)
            v = x if ("." in raw and 0.0 <= x <= 1.0 and hi > 1.0) else (x - lo) / (hi - lo) if hi > lo else x
    except ValueError:
        return None
    return float(min(1.0, max(0.0, v)))


# ``name | name`` with any separator (``evaluate.answer_separator``: the prompts ask for ``name ; name`` with ";")
_PLACEHOLDER = re.compile(r"^\W*(?:name(?:\s*[^\w\s]+\s*name)*|<[^>]*>|\.\.\.|…)\W*(?:instead\b.*|or\b.*)?$", re.IGNORECASE)


_CLOSE = {"'": "'", '"': '"', "‘": "’", "“": "”", "`": "`"}


def _echoed(text: str, start: int) -> bool:
    """Whether the ``Answer:`` marker at ``start`` is quoted inside a longer sentence (an echoed instruction)."""
    q = text[start - 1] if start > 0 else ""
    if q not in _CLOSE:
        return False
    line = text[start:].split("\n", 1)[0]
    end = line.find(_CLOSE[q])
    return end >= 0 and re.search(r"\w", line[end + 1:]) is not None


def final_answer(text: str) -> str | None:
    """The text after the last ``Answer:`` marker (chain-of-thought replies); None when there is none.

    Echoed instructions are not answers: a quoted marker followed by more words after its closing quote
    (``Reply 'Answer: name | name', or 'Answer: Unknown' if not.``, ``... write 'Answer: name | name'
    instead.``) and a placeholder answer (``name | name``, ``<answer>``, ``...``) are skipped. A quoted answer
    ends at its closing quote (``"Answer: Michael Mann".`` is ``Michael Mann``).
    """
    for m in reversed(list(_ANSWER.finditer(text or ""))):
        if _echoed(text, m.start()):
            continue
        body = m.group(1).strip()
        ans = body.splitlines()[0].strip() if body else ""
        close = _CLOSE.get(text[m.start() - 1]) if m.start() > 0 else None
        if close and close in ans and not re.search(r"\w", ans[ans.rfind(close) + 1:]):
            ans = ans[: ans.rfind(close)].strip()
        if not ans or _PLACEHOLDER.match(ans):
            continue
        return ans
    return None


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
