"""Textualizers: a subgraph → the text put into the prompt (one registered function per form)."""

from __future__ import annotations

from typing import Protocol, Sequence

from kgrag.registry import TEXTUALIZERS


class Textualizer(Protocol):
    """Turns named triples into prompt text."""

    def __call__(self, triples: Sequence[tuple[str, str, str]]) -> str: ...


@TEXTUALIZERS.register("triples")
def triples_text(triples: Sequence[tuple[str, str, str]]) -> str:
    """One ``(head, relation, tail)`` per line, in retrieval order."""
    return "\n".join(f"({h}, {r}, {t})" for h, r, t in triples)


def _csv_field(s: str) -> str:
    return f'"{s}"' if ("," in s or '"' in s) else s


@TEXTUALIZERS.register("csv")
def csv_text(triples: Sequence[tuple[str, str, str]]) -> str:
    """G-Retriever's textualized graph: a ``node_id,node_attr`` table then a ``src,edge_attr,dst`` table.

    References
    ----------
    He et al., G-Retriever (2024), section 3 "Textual Graphs" and Figure 2.
    """
    ids: dict[str, int] = {}
    for h, _, t in triples:
        ids.setdefault(h, len(ids))
        ids.setdefault(t, len(ids))
    nodes = "\n".join(f"{i},{_csv_field(n.replace(chr(34), chr(39)))}" for n, i in ids.items())
    edges = "\n".join(f"{ids[h]},{_csv_field(r)},{ids[t]}" for h, r, t in triples)
    return f"node_id,node_attr\n{nodes}\n\nsrc,edge_attr,dst\n{edges}"


@TEXTUALIZERS.register("grouped")
def grouped_text(triples: Sequence[tuple[str, str, str]]) -> str:
    """The ``triples`` form with the triples of one head and relation on one line: ``(head, relation, tail1 |
    tail2)``, lines in the order of each pair's first triple (retrieval order), tails in retrieval order.

    Tails are joined by `` | ``, the answer separator, which no entity name may hold (answers are split on it);
    ``kgrag.llm.constrain.context_entities`` reads the tails back, so ``rank``'s candidates are the same set.

    The same facts as ``triples`` in fewer prompt tokens (a head's repeated name and relation are written once):
    a hub's neighbourhood, as in multi-hop MetaQA contexts, shrinks most. Prompt evaluation is most of a scoring
    call's time on CPU (reports/bench/score_profile.json), so fewer tokens are a faster call.

    References
    ----------
    Liang et al., FastToG (2024), section "Community-to-Text": Triple-to-Text, a rule-based script from a
    community's triples to text; this is such a rule, written per (head, relation).
    """
    lines: dict[tuple[str, str], list[str]] = {}
    for h, r, t in triples:
        tails = lines.setdefault((h, r), [])
        if t not in tails:
            tails.append(t)
    return "\n".join(f"({h}, {r}, {' | '.join(ts)})" for (h, r), ts in lines.items())


@TEXTUALIZERS.register("none")
def no_text(triples: Sequence[tuple[str, str, str]]) -> str:
    """No graph context (the LLM answers from the question alone)."""
    return ""
