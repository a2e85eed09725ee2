"""ExplaGraphs (Saha et al., 2021): ``belief<TAB>argument<TAB>stance<TAB>graph`` rows, each with its own graph.

``graph`` is ``(head; relation; tail)`` triples written back to back. Every row becomes one question over
its own graph: ``graph_id`` = ``question_id`` = ``explagraphs-{split}-{line}``; its triples carry that
``graph_id`` (the same triple in two rows' graphs is two rows of ``triples``). The question text is built
from belief and argument as G-Retriever asks it; the answer is the stance, ``support`` or ``counter``
(not an entity: ``answer_ids`` is ``[null]``), one of ``choices`` = ``["support", "counter"]``: a label
task, scored by accuracy (``kgrag.evaluation.evaluate``). The topic entities are the nodes of the row's graph
(G-Retriever gives the model the whole graph). Entities are shared across graphs by name.

A row with the wrong field count, an unknown stance, or a graph that does not parse as back-to-back
``(h; r; t)`` triples is quarantined with file, line and reason; a triple repeated within one graph is
quarantined as ``"duplicate triple"``; a self-loop is kept and counted. An empty file is an error.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

import pyarrow as pa
from pydantic import Field

from kgrag import schema as S
from kgrag.config.base import Strict
from kgrag.kg.loaders.common import KGBuilder, LoaderInputError, empty_questions, read_nonempty, sample_rows
from kgrag.registry import LOADERS
from kgrag.types import KGTables

STANCES = ("support", "counter")
_TRIPLE = re.compile(r"\(([^;()]+);([^;()]+);([^;()]+)\)")
QUESTION = (
    "Argument 1: {belief}\nArgument 2: {argument}\n"
    "Question: Do argument 1 and argument 2 support or counter each other? "
    "Answer in one word in the form of 'support' or 'counter'."
)


class ExplaGraphsParams(Strict):
    """Params of the ``explagraphs`` loader (``data.explagraphs`` in params.yaml)."""

    path: str = Field("../shared/data/explagraphs", description="folder with {split}.tsv")
    split: Literal["train", "dev"] = Field("dev", description="file read: train.tsv or dev.tsv")


def parse_graph(text: str) -> list[tuple[str, str, str]] | None:
    """The ``(h; r; t)`` triples written back to back in ``text``; None if it is not such a list."""
    out, i, text = [], 0, text.strip()
    while i < len(text):
        m = _TRIPLE.match(text, i)
        if not m or not all(x.strip() for x in m.groups()):
            return None
        out.append(tuple(x.strip() for x in m.groups()))
        i = m.end()
        while i < len(text) and text[i] == " ":
            i += 1
    return out or None


@LOADERS.register("explagraphs", params=ExplaGraphsParams)
def load_explagraphs(*, path: str = "../shared/data/explagraphs", split: str = "dev", sample: int = 0,
                     seed: int = 0) -> KGTables:
    """ExplaGraphs stance rows, one question per row over its own small graph."""
    src = Path(path) / f"{split}.tsv"
    f = str(src)
    bad: list[tuple[str, int, str, str]] = []
    kg = KGBuilder()
    rows = empty_questions()
    for no, line in sample_rows(read_nonempty(src, bad, "ExplaGraphs TSV file"), sample, seed):
        parts = line.split("\t")
        if len(parts) != 4:
            bad.append((f, no, f"expected 4 tab-separated fields (belief, argument, stance, graph), got {len(parts)}",
                        line[:200]))
            continue
        belief, argument, stance, graph = (p.strip() for p in parts)
        if not belief or not argument:
            bad.append((f, no, "empty belief or argument", line[:200]))
            continue
        if stance not in STANCES:
            bad.append((f, no, f"stance {stance!r} is not support or counter", line[:200]))
            continue
        triples = parse_graph(graph)
        if triples is None:
            bad.append((f, no, "graph is not back-to-back '(head; relation; tail)' triples", line[:200]))
            continue
        qid = f"explagraphs-{split}-{no}"
        nodes: list[str] = []
        for h, r, t in triples:
            kg.add(kg.entity(h), r, kg.entity(t), qid, (f, no), bad, f"({h}; {r}; {t})")
            nodes += [x for x in (h, t) if x not in nodes]
        rows[S.QUESTION_ID].append(qid)
        rows[S.SPLIT].append(split)
        rows[S.HOPS].append(None)
        rows[S.TEXT].append(QUESTION.format(belief=belief, argument=argument))
        rows[S.QTYPE].append("stance")
        rows[S.TOPIC_IDS].append(nodes)
        rows[S.ANSWER_IDS].append([None])
        rows[S.ANSWERS].append([stance])
        rows[S.GRAPH_ID].append(qid)
        rows[S.CHOICES].append(list(STANCES))
    if not kg.rows:
        raise LoaderInputError(f"{src}: no valid row (every line quarantined)")
    ids = kg.entity_ids()
    rows[S.TOPIC_IDS] = [[ids[n] for n in nodes] for nodes in rows[S.TOPIC_IDS]]
    return kg.tables(pa.table(rows, schema=S.QUESTIONS), bad)
