"""Triples TSV / CSV: one ``head, relation, tail`` triple per line, columns by position or header name.

Reads ``path`` (gzip when it ends in ``.gz``) and, optionally, a questions JSONL file (``questions``; see
``kgrag.kg.loaders.jsonl``). Fields are split on ``delimiter`` (MetaQA's kb.txt is ``delimiter: "|"``); with
``quotechar`` set, CSV quoting applies (a quoted field may hold the delimiter). Lines with the wrong number
of fields or an empty head / relation / tail are quarantined with file, line and reason, as are lines that
are not UTF-8; a duplicate triple is quarantined as ``"duplicate triple"`` (the first copy kept); a
self-loop is kept and counted (``KGTables.stats["self_loops"]``). An empty file, or one with no valid
triple, is an error naming the file.

An optional label table (``names``: ``entity<TAB>name`` lines, the entity as the triples file writes it,
several lines per entity allowed) names the entities of a KG keyed by ids: the first name of an entity is its
display name, the others are aliases that entity linking matches too (``common.apply_names``; questions still
refer to entities by their key). An optional relation label table (``relation_labels``: ``relation<TAB>name`` lines,
the same format) names relations keyed by ids (Wikidata's ``P26``) for the relation-path planner, the prompts and
the retrievers: ``common.apply_relation_labels``.

Two engines give the same tables and the same quarantine rows (``engine``): ``python`` reads line by line
(the reference), ``vectorized`` (``kgrag.kg.loaders.triples_arrow``) classifies and splits all lines at once
with numpy / pyarrow (about 10x faster, for 10M-triple files) and runs the python rule only on the rare
lines it cannot classify in bulk. ``auto`` (default) takes ``vectorized`` when it applies: no CSV quoting
and a one-byte (ASCII) delimiter other than CR / LF. Both engines take the column layout and the record checks
from ``kgrag.kg.loaders.triples_rules``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from kgrag.config.base import Strict
from kgrag.kg.loaders import triples_arrow
from kgrag.kg.loaders.common import (
    KGBuilder,
    LoaderInputError,
    apply_names,
    apply_relation_labels,
    csv_records,
    read_nonempty,
    tables_with_questions,
)
from kgrag.kg.loaders.triples_rules import column_layout, record_problem
from kgrag.registry import LOADERS
from kgrag.types import KGTables


class TriplesParams(Strict):
    """Params of the ``triples`` loader (``data.triples`` in params.yaml)."""

    path: str = Field(..., description="triples file (.tsv, .csv, .txt; .gz = gzip)")
    questions: str | None = Field(None, description="questions JSONL file (none: no questions)")
    split: str = Field("test", description="split label given to the questions")
    delimiter: str = Field("\t", min_length=1, max_length=1, description="field separator")
    quotechar: str | None = Field(None, min_length=1, max_length=1, description="CSV quote character (none: no quoting)")
    header: bool = Field(False, description="the first non-blank line names the columns")
    head: int | str = Field(0, description="head column: 0-based position, or header name")
    relation: int | str = Field(1, description="relation column: position or header name")
    tail: int | str = Field(2, description="tail column: position or header name")
    columns: int | None = Field(None, ge=1, description="fields per line (default: the header's, else last used column + 1)")
    names: str | None = Field(
        None, description="label table: entity<TAB>name lines, several per entity allowed; the first names the "
        "entity, the others are aliases entity linking matches too (none: entities named by their field text)")
    relation_labels: str | None = Field(
        None, description="relation label table: relation<TAB>name lines (the relation as the triples file writes "
        "it, e.g. P26), several per relation allowed; the first names the relation (what the relation-path planner "
        "reads), the others are its aliases, which the planner reads as it reads the name "
        "(paraphrases: \"wife\", \"married to\" for spouse) (none: relations named by their field text)")
    engine: Literal["auto", "python", "vectorized"] = Field(
        "auto", description="python (line by line), vectorized (numpy/pyarrow, same output), auto (vectorized "
        "when it applies: no quotechar, one-byte ASCII delimiter)")

    @model_validator(mode="after")
    def _columns(self) -> "TriplesParams":
        cols = (self.head, self.relation, self.tail)
        if any(isinstance(c, str) for c in cols) and not self.header:
            raise ValueError("head/relation/tail given by name need header: true")
        if any(isinstance(c, int) and c < 0 for c in cols):
            raise ValueError("head/relation/tail positions are 0-based and must be >= 0")
        if len(set(cols)) != 3:
            raise ValueError("head, relation and tail must be three different columns")
        return self


@LOADERS.register("triples", params=TriplesParams)
def load_triples(
    *, path: str, questions: str | None = None, split: str = "test", delimiter: str = "\t",
    quotechar: str | None = None, header: bool = False, head: int | str = 0, relation: int | str = 1,
    tail: int | str = 2, columns: int | None = None, engine: str = "auto", names: str | None = None,
    relation_labels: str | None = None, sample: int = 0, seed: int = 0,
) -> KGTables:
    """A triples TSV/CSV (columns by position or header name), optional JSONL questions, an optional label
    table (``names``: ``common.apply_names``) and an optional relation label table (``relation_labels``:
    ``common.apply_relation_labels``)."""
    out = _load_triples(path=path, questions=questions, split=split, delimiter=delimiter, quotechar=quotechar,
                        header=header, head=head, relation=relation, tail=tail, columns=columns, engine=engine,
                        sample=sample, seed=seed)
    out = apply_names(out, names) if names else out
    return apply_relation_labels(out, relation_labels) if relation_labels else out


def _load_triples(
    *, path: str, questions: str | None, split: str, delimiter: str, quotechar: str | None, header: bool,
    head: int | str, relation: int | str, tail: int | str, columns: int | None, engine: str, sample: int, seed: int,
) -> KGTables:
    """The triples file and questions, before the label table."""
    why = triples_arrow.unsupported(delimiter=delimiter, quotechar=quotechar)
    if engine == "vectorized" and why:
        raise LoaderInputError(f"{path}: engine 'vectorized' does not apply: {why} (use engine: python or auto)")
    if engine == "vectorized" or (engine == "auto" and why is None):
        return triples_arrow.load_triples_vectorized(
            path=path, questions=questions, split=split, delimiter=delimiter, header=header, head=head,
            relation=relation, tail=tail, columns=columns, sample=sample, seed=seed)
    src = Path(path)
    f = str(src)
    bad: list[tuple[str, int, str, str]] = []
    records = csv_records(read_nonempty(src, bad, "triples file"), delimiter, quotechar)
    first = next(records, None) if header else None
    expected, h, r, t = column_layout(src, first[1] if first else None, header=header, head=head,
                                      relation=relation, tail=tail, columns=columns)
    kg = KGBuilder()
    for no, fields, raw, err in records:
        if fields is None:
            bad.append((f, no, err, raw[:200]))
            continue
        problem = record_problem(fields, expected, (h, r, t), delimiter)
        if problem:
            bad.append((f, no, problem, raw[:200]))
            continue
        kg.add(fields[h], fields[r], fields[t], None, (f, no), bad, raw)
    if not kg.rows:
        raise LoaderInputError(f"{src}: no valid triple (every line quarantined)")
    return tables_with_questions(kg, bad, questions, split=split, sample=sample, seed=seed)
