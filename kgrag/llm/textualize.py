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


@TEXTUALIZERS.register("none")
def no_text(triples: Sequence[tuple[str, str, str]]) -> str:
    """No graph context (the LLM answers from the question alone)."""
    return ""
