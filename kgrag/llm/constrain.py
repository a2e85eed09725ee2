"""Output constraints for constrained decoding: choice lists and the GBNF grammars that express them.

A request (``kgrag.llm.calls.LLMRequest``) may carry ``choices`` (the output is exactly one of them) and / or a
``grammar`` (GBNF, llama.cpp's grammar format, also accepted by vLLM's ``guided_grammar``). Backends turn
them into their engine's mechanism: ``llamacpp`` a ``LlamaGrammar``, ``openai`` the request body fields of
llama-cpp-python's server (``grammar``) and vLLM's server (``guided_choice`` / ``guided_grammar``),
``vllm`` its guided / structured-output sampling params.

Helpers here build the common constraints: option letters (``{A}``, ``{B}``, ...), Yes / No, and entity
names (one name, or a `` | ``-separated list) read from a retrieved context.
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import replace
from typing import Any, Iterable, Sequence

from kgrag.llm.calls import LLMRequest
from kgrag.kg.kgview import KGView

YES_NO = ("Yes", "No")


def gbnf_literal(text: str) -> str:
    """``text`` as a GBNF string literal (quotes, backslashes and control characters escaped)."""
    out = []
    for ch in text:
        if ch == "\\":
            out.append("\\\\")
        elif ch == '"':
            out.append('\\"')
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif ord(ch) < 0x20:
            out.append(f"\\x{ord(ch):02X}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _unique(items: Iterable[str]) -> list[str]:
    seen: set[str] = set()
    out = []
    for x in items:
        if x and x not in seen:
            seen.add(x)
            out.append(x)
    return out


def choice_grammar(choices: Sequence[str]) -> str:
    """GBNF whose language is exactly the given strings (an alternation of literals)."""
    opts = _unique(choices)
    if not opts:
        raise ValueError("choice_grammar: no choices")
    return "root ::= " + " | ".join(gbnf_literal(c) for c in opts) + "\n"


def list_grammar(choices: Sequence[str], separator: str = " | ", max_items: int = 0) -> str:
    """GBNF of one or more of the choices joined by ``separator`` (at most ``max_items`` when > 0)."""
    opts = _unique(choices)
    if not opts:
        raise ValueError("list_grammar: no choices")
    sep = gbnf_literal(separator)
    if max_items == 1:
        rest = ""
    elif max_items > 1:
        rest = f" ({sep} item)" + "{0," + str(max_items - 1) + "}"
    else:
        rest = f" ({sep} item)*"
    return f"root ::= item{rest}\nitem ::= " + " | ".join(gbnf_literal(c) for c in opts) + "\n"


def grammar_of(req: LLMRequest) -> str | None:
    """The GBNF a backend enforces for ``req``: its ``grammar``, else the alternation of its ``choices``,
    else None (unconstrained). A request with both uses its grammar (the more specific one)."""
    if req.grammar is not None:
        return req.grammar
    if req.choices:
        return choice_grammar(req.choices)
    return None


def option_letters(n: int) -> tuple[str, ...]:
    """``{A}``, ``{B}``, ... for ``n`` options (the form ``parsing.parse_choices`` reads)."""
    return tuple("{" + chr(ord("A") + i) + "}" for i in range(min(n, 26)))


def constrain_choices(req: LLMRequest, choices: Sequence[str]) -> LLMRequest:
    """The request with its output constrained to one of ``choices``."""
    return replace(req, choices=tuple(_unique(choices)), grammar=None)


def constrain_letters(req: LLMRequest, n: int) -> LLMRequest:
    """The request constrained to one option letter ``{A}`` ... of ``n`` options."""
    return constrain_choices(req, option_letters(n))


def constrain_yes_no(req: LLMRequest) -> LLMRequest:
    """The request constrained to ``Yes`` or ``No``."""
    return constrain_choices(req, YES_NO)


def constrain_entities(req: LLMRequest, names: Sequence[str], *, multiple: bool = True, separator: str = " | ",
                       max_items: int = 0) -> LLMRequest:
    """The request constrained to entity names: one of them, or (``multiple``) a list joined by
    ``separator``. Without names the request is returned unchanged (nothing to constrain to)."""
    names = _unique(n.strip() for n in names)
    if not names:
        return req
    if not multiple:
        return constrain_choices(req, names)
    return replace(req, choices=(), grammar=list_grammar(names, separator, max_items))


_TRIPLE = re.compile(r"^\s*\((.*)\)\s*$")


def _split_triple(body: str, relations: set[str]) -> tuple[str, str, str] | None:
    parts = body.split(", ")
    if len(parts) < 3:
        return None
    if len(parts) == 3:
        return parts[0], parts[1], parts[2]
    # a name holds ", ": the relation is the inner span that is a known relation name, else the one
    # identifier-like part (KG relation names such as directed_by have no spaces or commas; lower-case first)
    cands = []
    for i in range(1, len(parts) - 1):
        for j in range(i + 1, len(parts)):
            rel = ", ".join(parts[i:j])
            if rel in relations:
                cands.append((i, j))
    for pattern in (r"[a-z][a-z0-9_.:/-]*", r"[\w.:/-]+"):  # snake_case relation names first
        if cands:
            break
        cands = [(i, i + 1) for i in range(1, len(parts) - 1) if re.fullmatch(pattern, parts[i])]
    if len(cands) != 1:
        return None
    i, j = cands[0]
    return ", ".join(parts[:i]), ", ".join(parts[i:j]), ", ".join(parts[j:])


def _context_pairs(text: str, kg: KGView = None) -> list[tuple[str, str]]:
    """(head, tail) names of a ``triples``-form context's ``(head, relation, tail)`` lines, in order (a
    ``grouped``-form line ``(head, relation, tail1 | tail2)`` gives a pair per tail); ``kg`` resolves names that
    contain ", " through its relation names."""
    relations: set[str] = set()
    if kg is not None and getattr(kg, "relation_names", None) is not None:
        relations = {str(r) for r in kg.relation_names if r is not None}
    pairs = []
    for line in text.splitlines():
        m = _TRIPLE.match(line)
        t = _split_triple(m.group(1), relations) if m else None
        if t is not None:
            pairs.extend((t[0].strip(), tail.strip()) for tail in t[2].split(" | "))
    return pairs


def context_distances(context: str, sources: set[str] | frozenset[str], kg: KGView = None) -> dict[str, int]:
    """Hops from the nearest of ``sources`` to each entity of a ``triples``-form context, over the undirected
    graph of its ``(head, relation, tail)`` lines (sources at 0; entities not connected to a source absent).
    ``kg`` resolves names that contain ", " as in :func:`context_entities`."""
    adj: dict[str, list[str]] = {}
    for h, t in _context_pairs(context or "", kg):
        adj.setdefault(h, []).append(t)
        adj.setdefault(t, []).append(h)
    dist = {n: 0 for n in sorted(sources) if n in adj}
    frontier = list(dist)
    while frontier:
        nxt = []
        for u in frontier:
            for v in adj[u]:
                if v not in dist:
                    dist[v] = dist[u] + 1
                    nxt.append(v)
        frontier = nxt
    return dist


def context_entities(context: str, kg: KGView = None) -> list[str]:
    """Entity names of a textualized context, in order of appearance: heads and tails of its
    ``(head, relation, tail)`` lines (``triples`` form) or the ``node_attr`` column (G-Retriever's ``csv``
    form). ``kg`` (a ``KGStore``) resolves lines whose names contain ", " through its relation names."""
    text = context or ""
    if text.startswith("node_id,node_attr"):
        nodes = text.split("\n\n", 1)[0].splitlines()[1:]
        rows = csv.reader(io.StringIO("\n".join(nodes)))
        return _unique(r[1].strip() for r in rows if len(r) >= 2)
    return _unique(n for pair in _context_pairs(text, kg) for n in pair)


def topic_names(question, kg: KGView = None) -> set[str]:
    """A question's topic entity names: its bracketed names and, where ``kg`` resolves them, the names of its
    ``topic_ids``."""
    names = set(re.findall(r"\[([^\]]+)\]", question.text))
    if kg is not None and question.topic_ids and getattr(kg, "names", None) is not None:
        try:
            names |= set(kg.names(list(question.topic_ids)))
        except Exception:  # a store without these ids: the bracketed names stay
            pass
    return names


def answer_candidates(*, question, context: str, proposed: Sequence[str] = (), kg: KGView = None,
                      candidates: str = "ends", distance: int = 0) -> list[str]:
    """The candidate answers of one question, in order: what ``rank`` scores and the no-LLM baselines pick from.

    ``candidates``: ``ends`` = the answer entities the retriever proposed (``proposed``: relpath's sequence ends)
    that the context shows, or, where it proposed none, the context's entities without the topic entities;
    ``context_without_topic`` = those always; ``context`` = every entity of the context. ``distance`` k > 0 then
    keeps the candidates k hops from a topic in the context's graph (all of them where none is). A question
    with ``choices`` (a label task) has its choices.
    """
    if question.choices:
        return list(dict.fromkeys(question.choices))
    names = context_entities(context, kg)
    topic = topic_names(question, kg) if candidates != "context" or distance else set()
    if candidates == "ends" and proposed:
        shown = set(names)
        ends = [n for n in dict.fromkeys(proposed) if n in shown and n not in topic]
        if ends:
            names = ends
            candidates = "context"  # settled
    if candidates in ("ends", "context_without_topic"):
        kept = [n for n in names if n not in topic]
        names = kept or names  # a context of topic entities only: rank them rather than answer nothing
    if distance:
        dist = context_distances(context, topic, kg)
        ring = [n for n in names if dist.get(n) == distance]
        names = ring or names
    return names
