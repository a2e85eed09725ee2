"""JSONL questions, the RoG / WebQSP style: one question per line, optionally with its own graph.

Each line is an object ``{"id", "question", "topic_entities", "answers", "graph"?, "hops"?, "qtype"?,
"choices"?}``: ``topic_entities`` and ``answers`` are lists (or one value) of entity ids or names, ``graph`` a
list of ``[head, relation, tail]``; ``choices`` makes the question a label task (answers are among its labels,
scored by accuracy). The ``triples``, ``ntriples`` and ``gretriever`` loaders read such a file as
their ``questions``; this ``jsonl`` loader reads it alone: the KG is then the union of the per-question
graphs, each triple tagged with its question's ``graph_id`` (= the question id).

A line that is not such an object, a question with no answers (field missing or empty) and a duplicate
question id are quarantined with file, line and reason; a question whose topic entity is neither in the KG nor
in its graph is kept with no topic id (scored as a miss, like one that links to nothing) and recorded in the
quarantine with its reason; a triple repeated within one graph is quarantined as ``"duplicate triple"`` (the
same triple in two graphs is two rows, one per graph); self-loops are kept and counted. An empty file is an
error.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from pydantic import Field

from kgrag.config.base import Strict
from kgrag.kg.loaders.common import KGBuilder, questions_table, read_questions_jsonl
from kgrag.registry import LOADERS
from kgrag.types import KGTables


class JsonlParams(Strict):
    """Params of the ``jsonl`` loader (``data.jsonl`` in params.yaml)."""

    #: the field naming the file of questions, each with its graph: a held-out file of the same format (relplan.file)
    #: is read through it (kgrag.kg.heldout)
    QUESTIONS_FILE: ClassVar[str] = "path"
    path: str = Field(..., description="questions JSONL file (.gz = gzip), each with its graph")
    split: str = Field("test", description="split label given to the questions")


@LOADERS.register("jsonl", params=JsonlParams)
def load_jsonl(*, path: str, split: str = "test", sample: int = 0, seed: int = 0) -> KGTables:
    """Questions JSONL with per-question graphs (RoG / WebQSP style); the KG is their union."""
    bad: list[tuple[str, int, str, str]] = []
    kg = KGBuilder()
    parsed = read_questions_jsonl(Path(path), kg, bad, split=split, sample=sample, seed=seed)
    return kg.tables(questions_table(parsed, kg), bad)
