"""MetaQA: ``kb.txt`` (``subject|relation|object``) and ``qa_{k}hop_{split}.txt`` question files."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pyarrow as pa

from kgrag import schema as S
from kgrag.registry import LOADERS
from kgrag.types import KGTables

TOPIC = re.compile(r"\[([^\]]+)\]")


def quarantine_table(rows: list[tuple[str, int, str, str]]) -> pa.Table:
    """Quarantine rows (table or file, line/row, reason, raw record) as a table."""
    cols = list(zip(*rows)) if rows else [[], [], [], []]
    return pa.Table.from_arrays([pa.array(c, t.type) for c, t in zip(cols, S.QUARANTINE)], schema=S.QUARANTINE)


def _read_lines(path: Path, bad: list[tuple[str, int, str, str]]) -> list[tuple[int, str]]:
    out = []
    with open(path, "rb") as f:
        for no, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError as e:
                bad.append((str(path), no, f"not UTF-8: {e.reason} at byte {e.start}", raw[:200].decode("utf-8", "replace")))
                continue
            if no == 1:
                line = line.lstrip("\ufeff")
            if line.strip():
                out.append((no, line))
    return out


@LOADERS.register("metaqa")
def load_metaqa(*, path: str, hops: int, split: str, sample: int, seed: int) -> KGTables:
    """Load MetaQA's KB and the sampled ``hops``-hop ``split`` questions; unparseable lines go to quarantine."""
    root = Path(path)
    kb = root / "kb.txt"
    qa = root / f"qa_{hops}hop_{split}.txt"
    qtype_file = root / f"qa_{hops}hop_{split}_qtype.txt"
    for p in (kb, qa):
        if not p.exists():
            raise FileNotFoundError(f"{p}: MetaQA file missing (data.path={path!r})")
    bad: list[tuple[str, int, str, str]] = []

    heads, rels, tails = [], [], []
    for no, line in _read_lines(kb, bad):
        parts = line.split("|")
        if len(parts) != 3 or not all(p.strip() for p in parts):
            bad.append((str(kb), no, f"expected 3 non-empty '|'-separated fields, got {len(parts)}", line[:200]))
            continue
        heads.append(parts[0])
        rels.append(parts[1])
        tails.append(parts[2])

    names = sorted(set(heads) | set(tails))
    ent_id = {n: i for i, n in enumerate(names)}
    rel_names = sorted(set(rels))
    rel_id = {n: i for i, n in enumerate(rel_names)}
    entities = pa.table({S.ENTITY_ID: pa.array(range(len(names)), pa.int64()), S.NAME: names}, schema=S.ENTITIES)
    relations = pa.table(
        {S.RELATION_ID: pa.array(range(len(rel_names)), pa.int64()), S.NAME: rel_names}, schema=S.RELATIONS
    )
    triples = pa.table(
        {
            S.HEAD: pa.array([ent_id[h] for h in heads], pa.int64()),
            S.RELATION: pa.array([rel_id[r] for r in rels], pa.int64()),
            S.TAIL: pa.array([ent_id[t] for t in tails], pa.int64()),
        },
        schema=S.TRIPLES,
    )

    qlines = _read_lines(qa, bad)
    qtypes: dict[int, str] = {}
    if qtype_file.exists():
        qtypes = {no: line.strip() for no, line in _read_lines(qtype_file, [])}
    if sample and sample < len(qlines):
        pick = np.sort(np.random.default_rng(seed).choice(len(qlines), size=sample, replace=False))
        qlines = [qlines[i] for i in pick]
    rows: dict[str, list] = {f.name: [] for f in S.QUESTIONS}
    for no, line in qlines:
        if "\t" not in line:
            bad.append((str(qa), no, "expected 'question<TAB>answers'", line[:200]))
            continue
        text, ans = line.split("\t", 1)
        topics = TOPIC.findall(text)
        if not topics:
            bad.append((str(qa), no, "no [topic entity] in question", line[:200]))
            continue
        answers = [a for a in ans.split("|") if a]
        rows[S.QUESTION_ID].append(f"{hops}hop-{split}-{no}")
        rows[S.SPLIT].append(split)
        rows[S.HOPS].append(hops)
        rows[S.TEXT].append(text)
        rows[S.QTYPE].append(qtypes.get(no, ""))
        # Unknown names keep a null id so that validation can quarantine them with a reason.
        rows[S.TOPIC_IDS].append([ent_id.get(t) for t in topics])
        rows[S.ANSWER_IDS].append([ent_id.get(a) for a in answers])
        rows[S.ANSWERS].append(answers)
    questions = pa.table(rows, schema=S.QUESTIONS)
    return KGTables(entities, relations, triples, questions, quarantine_table(bad))
