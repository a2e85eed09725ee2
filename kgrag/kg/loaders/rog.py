"""RoG-style question tables (WebQSP, CWQ): one row per question, each with its own Freebase subgraph.

The layout of the ``rmanluo/RoG-webqsp`` and ``rmanluo/RoG-cwq`` Hugging Face datasets (Parquet shards
``data/{train,validation,test}-*.parquet``), which GNN-RAG, GCR and SubgraphRAG also read: per row ``id``
(string), ``question`` (string), ``answer`` (answer names), ``q_entity`` (topic entity names), ``a_entity``
(answer entity names) and ``graph`` (``[head, relation, tail]`` name triples); other columns (``choices``,
always empty there) are not read. The same rows as JSON objects, one per line, are read from ``.jsonl`` /
``.jsonl.gz``.

Each row becomes one question over its own graph: ``question_id`` = ``graph_id`` = ``id`` (as the ``jsonl``
loader), ``question`` → ``text``, ``q_entity`` → ``topic_ids``, ``a_entity`` → ``answers`` / ``answer_ids``
(``answer`` when ``a_entity`` is missing or empty); its triples carry that ``graph_id``. Entities are keyed and
shared across graphs by name. A topic or answer entity that is not in the row's graph keeps the question (RoG's
protocol scores every question): the topic is still an entity (with no edge the question sees), an answer not
in any graph keeps its name with a null id, and validate flags a question none of whose answers is in its graph
``answerable = false`` (scored as a miss). The ingest run record counts them (``topics_not_in_graph``,
``answers_not_in_graph``; ``answers_from_answer_field``: rows whose ``a_entity`` was empty).

A row that is not such a record (a field missing or null, a field of the wrong type, an empty topic or answer
list, a graph item that is not three non-empty strings) or that repeats an accepted id is quarantined with file,
row and reason: the row is the 0-based row index in a Parquet file (across its row groups), the 1-based line
number in a JSONL file. Valid rows go on; a triple repeated within one graph is quarantined as ``"duplicate
triple"`` and self-loops are kept and counted (``kgrag.kg.loaders.common``). A Parquet file lacking a required
column, a missing, empty or unreadable file, and a table with no valid row are errors naming the file.

Parquet is read one row group at a time in batches of ``BATCH_ROWS`` rows (only the columns above), so a
large file is never held whole as Arrow and as Python objects at once; JSONL is read line by line. With
``data.sample``, ``sample`` rows (lines) are drawn with ``seed`` over all files first, and only they are read.

References
----------
Luo et al., "Reasoning on Graphs: Faithful and Interpretable Large Language Model Reasoning", ICLR 2024
(experiments on WebQSP and CWQ over Freebase; code and data: github.com/RManLuo/reasoning-on-graphs); the dataset
cards of ``rmanluo/RoG-webqsp`` and ``rmanluo/RoG-cwq`` on the Hugging Face Hub (features and split files).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar, Iterator

import numpy as np
import pyarrow as pa
from pydantic import Field

from kgrag import schema as S
from kgrag.config.base import Strict
from kgrag.kg.loaders.common import (
    MAX_JSONL_LINE_BYTES, RECORD_CHARS, Bad, KGBuilder, LoaderInputError, decode_line, empty_questions, open_binary,
    require_file,
)
from kgrag.registry import LOADERS
from kgrag.types import KGTables

#: the RoG columns read; ``a_entity`` and ``answer``: at least one of them
COLUMNS = ("id", "question", "answer", "q_entity", "a_entity", "graph")
REQUIRED = ("id", "question", "q_entity", "graph")
#: Parquet rows decoded to Python objects at a time (a CWQ row's graph holds thousands of triples)
BATCH_ROWS = 64


class RogParams(Strict):
    """Params of the ``rog`` loader (``data.rog`` in params.yaml)."""

    #: the field naming the file of questions, each with its graph: a held-out file of the same format (relplan.file)
    #: is read through it (kgrag.kg.heldout)
    QUESTIONS_FILE: ClassVar[str] = "path"
    path: str = Field(..., description="a .parquet, .jsonl or .jsonl.gz file, or a folder of .parquet shards "
                      "(e.g. a RoG-webqsp download's data/)")
    split: str = Field("test", description="split label given to the questions")
    shards: str = Field("*.parquet", description="glob of the shards read when path is a folder, in name order "
                        "(the Hugging Face layout's test split: test-*.parquet)")


def _files(path: Path, shards: str) -> list[Path]:
    """The files to read: ``path`` itself, or its shards matching ``shards`` (sorted); errors name the path."""
    if path.is_dir():
        files = sorted(p for p in path.glob(shards) if p.is_file())
        if not files:
            raise LoaderInputError(f"{path}: no file matches shards={shards!r} in this folder")
        bad = [p for p in files if p.suffix != ".parquet"]
        if bad:
            raise LoaderInputError(f"{bad[0]}: a folder's shards must be .parquet files")
        return files
    require_file(path, "RoG question table")
    if path.suffix == ".parquet" or path.name.endswith((".jsonl", ".jsonl.gz")):
        return [path]
    raise LoaderInputError(f"{path}: expected a .parquet, .jsonl or .jsonl.gz file, or a folder of .parquet shards")


def _parquet(path: Path):
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
    except Exception as e:  # not Parquet, truncated: pyarrow's ArrowInvalid / OSError
        raise LoaderInputError(f"{path}: not a readable Parquet file ({e})") from None
    names = set(pf.schema_arrow.names)
    missing = [c for c in REQUIRED if c not in names] + ([] if names & {"a_entity", "answer"} else ["a_entity/answer"])
    if missing:
        raise LoaderInputError(f"{path}: no column {', '.join(missing)} (a RoG table has {', '.join(COLUMNS)}; "
                               f"this one has {', '.join(pf.schema_arrow.names)})")
    return pf


def _row_counts(files: list[Path]) -> list[int]:
    """Rows of each file: Parquet metadata, JSONL physical lines."""
    out = []
    for f in files:
        if f.suffix == ".parquet":
            out.append(_parquet(f).metadata.num_rows)
        else:
            with open_binary(f) as fh:
                out.append(sum(1 for _ in fh))
    return out


def _parquet_rows(path: Path, picked: set[int] | None, offset: int) -> Iterator[tuple[int, Any, str | None]]:
    """``(row, record, None)`` of each (picked) row, one row group and ``BATCH_ROWS`` rows at a time; ``offset``
    = the rows of the files before this one (``picked`` holds indices over all files)."""
    pf = _parquet(path)
    cols = [c for c in COLUMNS if c in pf.schema_arrow.names]
    start = 0  # the row group's first row in the file
    for g in range(pf.num_row_groups):
        n = pf.metadata.row_group(g).num_rows
        if picked is not None and not any(offset + i in picked for i in range(start, start + n)):
            start += n
            continue
        at = start  # the batch's first row in the file
        for batch in pf.iter_batches(batch_size=BATCH_ROWS, row_groups=[g], columns=cols, use_threads=False):
            idx = list(range(batch.num_rows)) if picked is None else [
                j for j in range(batch.num_rows) if offset + at + j in picked]
            if idx:
                for j, rec in zip(idx, (batch if picked is None else batch.take(idx)).to_pylist()):
                    yield at + j, rec, None
            at += batch.num_rows
        start += n


def _jsonl_rows(path: Path, picked: set[int] | None, offset: int, bad: Bad) -> Iterator[tuple[int, Any, str | None]]:
    """``(line, object, raw line)`` of each (picked) line; lines that are not JSON go to ``bad``."""
    f = str(path)
    with open_binary(path) as fh:
        for no, raw in enumerate(fh, 1):
            if picked is not None and offset + no - 1 not in picked:
                continue
            line = decode_line(raw, no, path, bad, max_bytes=MAX_JSONL_LINE_BYTES)
            if line is None:
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                bad.append((f, no, f"not JSON: {e.msg} at column {e.colno}", line[:RECORD_CHARS]))
                continue
            yield no, obj, line


def _record(obj: Any, raw: str | None) -> str:
    """The quarantine record: the raw line, or the row as JSON with its graph cut to three triples."""
    if raw is not None:
        return raw[:RECORD_CHARS]
    if isinstance(obj, dict) and isinstance(obj.get("graph"), list):
        obj = {**obj, "graph": obj["graph"][:3]}
    return json.dumps(obj, default=str)[:RECORD_CHARS]


def _names(value: Any, field: str) -> tuple[list[str] | None, str]:
    """``value`` as a list of non-empty names, or (None, why)."""
    if not isinstance(value, (list, tuple)):
        return None, f"{field} must be a list of strings, got {type(value).__name__}"
    for i, v in enumerate(value):
        if not isinstance(v, str) or not v.strip():
            return None, f"{field}[{i}] must be a non-empty string, got {v!r:.80}"
    return list(value), ""


def _parse(obj: Any, seen: set[str]) -> tuple[dict | None, str]:
    """The question of one row (id, text, topics, answers, whether ``answer`` stood in, triples), or (None, why)."""
    if not isinstance(obj, dict):
        return None, f"expected a JSON object, got {type(obj).__name__}"
    missing = [k for k in REQUIRED if obj.get(k) is None]
    if obj.get("a_entity") is None and obj.get("answer") is None:
        missing.append("a_entity/answer")
    if missing:
        return None, f"missing field(s): {', '.join(missing)}"
    qid, text = obj["id"], obj["question"]
    if not isinstance(qid, (str, int)) or isinstance(qid, bool) or not str(qid).strip():
        return None, "id must be a non-empty string or integer"
    qid = str(qid)
    if not isinstance(text, str) or not text.strip():
        return None, "question must be a non-empty string"
    if qid in seen:
        return None, f"duplicate question id {qid!r}"
    topics, why = _names(obj["q_entity"], "q_entity")
    if topics is None:
        return None, why
    if not topics:
        return None, "no topic entity (q_entity is empty)"
    answers, from_answer = None, False
    if obj.get("a_entity") is not None:
        answers, why = _names(obj["a_entity"], "a_entity")
        if answers is None:
            return None, why
    if not answers:  # a_entity missing or empty: the answer names
        if obj.get("answer") is None:
            return None, "no answers (a_entity is empty and answer missing)"
        answers, why = _names(obj["answer"], "answer")
        if answers is None:
            return None, why
        from_answer = True
    if not answers:
        return None, "no answers (a_entity and answer are empty)"
    graph = obj["graph"]
    if not isinstance(graph, (list, tuple)):
        return None, f"graph must be a list of [head, relation, tail], got {type(graph).__name__}"
    for i, t in enumerate(graph):
        if not (isinstance(t, (list, tuple)) and len(t) == 3 and all(isinstance(x, str) and x.strip() for x in t)):
            return None, f"graph[{i}]: expected [head, relation, tail] of 3 non-empty strings, got {t!r:.80}"
    return {"id": qid, "text": text, "topics": topics, "answers": answers, "from_answer": from_answer,
            "graph": graph}, ""


def _picked(total: int, sample: int, seed: int) -> set[int] | None:
    """Global row indices drawn as ``common.sample_rows`` draws them; None = every row."""
    if sample and sample < total:
        return set(np.random.default_rng(seed).choice(total, size=sample, replace=False).tolist())
    return None


@LOADERS.register("rog", params=RogParams)
def load_rog(*, path: str, split: str = "test", shards: str = "*.parquet", sample: int = 0,
             seed: int = 0) -> KGTables:
    """RoG-style question table (WebQSP, CWQ as RoG releases them): one question per row over its own graph.

    Parameters
    ----------
    path : str
        A ``.parquet``, ``.jsonl`` or ``.jsonl.gz`` file, or a folder of ``.parquet`` shards.
    split : str
        Split label given to the questions.
    shards : str
        Glob of the shards read when ``path`` is a folder (in name order), e.g. ``test-*.parquet``.
    sample : int
        Rows drawn with ``seed`` over all files (0 = every row).
    seed : int
        Seed of the row sample.

    Returns
    -------
    KGTables
        The union of the rows' graphs (triples tagged with their question's ``graph_id``), one question per
        valid row, and the quarantined rows (file, row or line, reason, record).

    Raises
    ------
    LoaderInputError
        A missing, empty or unreadable file, a Parquet file without a required column, no file matching
        ``shards``, or no valid row.

    References
    ----------
    Luo et al., Reasoning on Graphs (RoG, ICLR 2024); the ``rmanluo/RoG-webqsp`` dataset card.
    """
    files = _files(Path(path), shards)
    counts = _row_counts(files) if sample else [0] * len(files)  # row offsets: needed by the sample alone
    picked = _picked(sum(counts), sample, seed)
    bad: Bad = []
    kg = KGBuilder()
    canon: dict[str, str] = {}  # one str object per name: the builder keeps millions of triples of few names
    name = lambda s: canon.setdefault(s, s)  # noqa: E731
    parsed: list[dict] = []
    seen: set[str] = set()
    read = 0
    stats = {"topics_not_in_graph": 0, "answers_not_in_graph": 0, "answers_from_answer_field": 0}
    offset = 0
    for file, n in zip(files, counts):
        f = str(file)
        rows = (_parquet_rows(file, picked, offset) if file.suffix == ".parquet"
                else _jsonl_rows(file, picked, offset, bad))
        for no, obj, raw in rows:
            read += 1
            q, why = _parse(obj, seen)
            if q is None:
                bad.append((f, no, why, _record(obj, raw)))
                continue
            qid = q["id"]
            seen.add(qid)
            nodes: set[str] = set()
            for h, r, t in q["graph"]:
                h, r, t = name(h), name(r), name(t)
                kg.add(kg.entity(h), r, kg.entity(t), qid, (f, no), bad, json.dumps([h, r, t]))
                nodes.update((h, t))
            stats["topics_not_in_graph"] += any(t not in nodes for t in q["topics"])
            stats["answers_not_in_graph"] += not any(a in nodes for a in q["answers"])
            stats["answers_from_answer_field"] += q["from_answer"]
            parsed.append({S.QUESTION_ID: qid, S.TEXT: q["text"], "topics": [kg.entity(name(t)) for t in q["topics"]],
                           "answers": q["answers"]})
        offset += n
    if not parsed:
        what = "has no valid row (every row quarantined)" if read or bad else "is empty (no row)"
        raise LoaderInputError(f"{path}: the RoG question table {what}")
    ids = kg.entity_ids()
    rows = empty_questions()
    for q in parsed:  # answer ids resolved once every graph is read: the same whatever the row order
        rows[S.QUESTION_ID].append(q[S.QUESTION_ID])
        rows[S.SPLIT].append(split)
        rows[S.HOPS].append(None)
        rows[S.TEXT].append(q[S.TEXT])
        rows[S.QTYPE].append("")
        rows[S.TOPIC_IDS].append([ids[t] for t in q["topics"]])
        rows[S.ANSWER_IDS].append([ids.get(a) for a in q["answers"]])
        rows[S.ANSWERS].append(q["answers"])
        rows[S.GRAPH_ID].append(q[S.QUESTION_ID])
        rows[S.CHOICES].append(None)
    tables = kg.tables(pa.table(rows, schema=S.QUESTIONS), bad)
    tables.stats.update(stats, files=len(files))
    return tables
