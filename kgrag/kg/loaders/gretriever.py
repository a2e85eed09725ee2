"""G-Retriever's textual graph: a folder with ``nodes.csv`` (``node_id,node_attr``) and ``edges.csv``
(``src,edge_attr,dst``), CSV with ``"`` quoting as pandas writes it, plus a questions JSONL file.

Entities are the nodes (keyed by ``node_id``, named by ``node_attr``; isolated nodes are kept), triples the
edges (``src`` → head, ``edge_attr`` → relation, ``dst`` → tail). Questions name topic entities and
answers by node id or by node text. A node row without id or text, a duplicate ``node_id``, an edge
row with the wrong field count, an empty ``edge_attr`` or an endpoint that is not a ``node_id`` is
quarantined with file, line and reason; a duplicate edge is quarantined as ``"duplicate triple"``; a
self-loop is kept and counted. An empty file, a header without the required columns, or no valid edge
is an error naming the file.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from kgrag.config.base import Strict
from kgrag.kg.loaders.common import (
    KGBuilder,
    LoaderInputError,
    csv_records,
    read_nonempty,
    tables_with_questions,
)
from kgrag.registry import LOADERS
from kgrag.types import KGTables

NODE_COLS = ("node_id", "node_attr")
EDGE_COLS = ("src", "edge_attr", "dst")


class GRetrieverParams(Strict):
    """Params of the ``gretriever`` loader (``data.gretriever`` in params.yaml)."""

    path: str = Field(..., description="folder with nodes.csv and edges.csv")
    questions: str | None = Field(None, description="questions JSONL file (none: no questions)")
    split: str = Field("test", description="split label given to the questions")


def _records(path: Path, cols: tuple[str, ...], bad):
    records = csv_records(read_nonempty(path, bad, "G-Retriever CSV file"), ",", '"')
    first = next(records)
    header = [c.strip() for c in first[1] or []]
    missing = [c for c in cols if c not in header]
    if missing:
        raise LoaderInputError(f"{path}: header {first[2][:200]!r} lacks column(s) {', '.join(missing)}")
    return [header.index(c) for c in cols], len(header), records


@LOADERS.register("gretriever", params=GRetrieverParams)
def load_gretriever(
    *, path: str, questions: str | None = None, split: str = "test", sample: int = 0, seed: int = 0
) -> KGTables:
    """G-Retriever textual graph CSVs (nodes.csv, edges.csv) and optional JSONL questions."""
    root = Path(path)
    nodes_f, edges_f = root / "nodes.csv", root / "edges.csv"
    bad: list[tuple[str, int, str, str]] = []
    kg = KGBuilder()
    (i_id, i_attr), width, records = _records(nodes_f, NODE_COLS, bad)
    f = str(nodes_f)
    for no, fields, raw, err in records:
        if fields is None:
            bad.append((f, no, err, raw[:200]))
        elif len(fields) != width:
            bad.append((f, no, f"expected {width} fields, got {len(fields)}", raw[:200]))
        elif not fields[i_id].strip() or not fields[i_attr].strip():
            bad.append((f, no, "empty node_id or node_attr", raw[:200]))
        elif fields[i_id] in kg.names:
            bad.append((f, no, f"duplicate node_id {fields[i_id]!r}", raw[:200]))
        else:
            kg.entity(fields[i_id], fields[i_attr])
    if not kg.names:
        raise LoaderInputError(f"{nodes_f}: no valid node")
    (i_src, i_rel, i_dst), width, records = _records(edges_f, EDGE_COLS, bad)
    f = str(edges_f)
    for no, fields, raw, err in records:
        if fields is None:
            bad.append((f, no, err, raw[:200]))
            continue
        if len(fields) != width:
            bad.append((f, no, f"expected {width} fields, got {len(fields)}", raw[:200]))
            continue
        src, rel, dst = fields[i_src], fields[i_rel], fields[i_dst]
        if not rel.strip():
            bad.append((f, no, "empty edge_attr", raw[:200]))
            continue
        unknown = [f"{n} {v!r}" for n, v in (("src", src), ("dst", dst)) if v not in kg.names]
        if unknown:
            bad.append((f, no, f"{' and '.join(unknown)} not a node_id of nodes.csv", raw[:200]))
            continue
        kg.add(src, rel, dst, None, (f, no), bad, raw)
    if not kg.rows:
        raise LoaderInputError(f"{edges_f}: no valid edge (every row quarantined)")
    return tables_with_questions(kg, bad, questions, split=split, sample=sample, seed=seed)
