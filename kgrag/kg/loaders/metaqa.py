"""MetaQA: ``kb.txt`` (``subject|relation|object``) and ``qa_{k}hop_{split}.txt`` question files.

Unparseable lines go to quarantine with file, line and reason; a duplicate triple is quarantined as
``"duplicate triple"`` (the first copy kept) and a self-loop is kept and counted (``kgrag.kg.loaders.common``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import ClassVar, Literal

import pyarrow as pa
from pydantic import Field, field_validator

from kgrag import schema as S
from kgrag.config.base import Strict
from kgrag.kg.loaders.common import (  # noqa: F401 (quarantine_table re-exported)
    KGBuilder,
    LoaderInputError,
    empty_questions,
    quarantine_table,
    read_lines,
    read_separated_triples,
    sample_rows,
)
from kgrag.registry import LOADERS
from kgrag.types import KGTables

TOPIC = re.compile(r"\[([^\]]+)\]")


class MetaQAParams(Strict):
    """MetaQA loader params: written as ``data.path``, ``data.hops``, ``data.split`` in params.yaml."""

    # the default loader's keys sit at the top of ``data`` (kgrag.kg.params.DataParams), not in ``data.metaqa``
    DATA_KEYS: ClassVar[tuple[str, ...]] = ("path", "hops", "split")
    # ``split`` selects a different question file over the same KG: the finetune_path_scorer stage may train on one
    SPLITS_ARE_DISJOINT: ClassVar[bool] = True
    path: str = Field("../shared/data/metaqa", description="folder with kb.txt and qa_{hops}hop_{split}.txt")
    hops: int | list[int] = Field(2, description="MetaQA question hop count (1, 2 or 3), or a list of them: the "
                                  "questions of every listed file (a mixed-hop set, `sample` drawn from each); the "
                                  "modules never see it unless retrieve.oracle_hops")
    split: Literal["dev", "test"] = Field("test", description="question split: dev | test")

    @field_validator("hops")
    @classmethod
    def _hop_counts(cls, v):
        counts = [v] if isinstance(v, int) else list(v)
        if not counts or any(isinstance(k, bool) or k not in (1, 2, 3) for k in counts) or len(set(counts)) != len(counts):
            raise ValueError(f"hops must be 1, 2 or 3, or a list of distinct ones (got {v!r})")
        return v


@LOADERS.register("metaqa", params=MetaQAParams)
def load_metaqa(*, path: str, hops: int | list[int], split: str, sample: int, seed: int) -> KGTables:
    """Load MetaQA's KB and the sampled ``hops``-hop ``split`` questions; unparseable lines go to quarantine.

    A list of hop counts reads each one's file, ``sample`` questions drawn from each with the same ``seed``,
    in the listed order (ids ``{k}hop-{split}-{line}``, ``hops`` the file's count: a mixed-hop set whose
    per-hop scores the reports can break down; the modules see no hop count unless ``retrieve.oracle_hops``).
    """
    root = Path(path)
    kb = root / "kb.txt"
    counts = [hops] if isinstance(hops, int) else list(hops)
    for p in (kb, *(root / f"qa_{k}hop_{split}.txt" for k in counts)):
        if not p.exists():
            raise FileNotFoundError(f"{p}: MetaQA file missing (data.path={path!r})")
    bad: list[tuple[str, int, str, str]] = []

    kg = KGBuilder()
    read_separated_triples(kb, "|", "MetaQA KB file", kg, bad, label="'|'")
    if not kg.rows:
        raise LoaderInputError(f"{kb}: no valid triple (every line quarantined)")
    ent_id = kg.entity_ids()

    rows = empty_questions()
    for k in counts:
        qa = root / f"qa_{k}hop_{split}.txt"
        qtype_file = root / f"qa_{k}hop_{split}_qtype.txt"
        qlines = read_lines(qa, bad)
        qtypes: dict[int, str] = {}
        if qtype_file.exists():
            qtypes = {no: line.strip() for no, line in read_lines(qtype_file, [])}
        for no, line in sample_rows(qlines, sample, seed):
            if "\t" not in line:
                bad.append((str(qa), no, "expected 'question<TAB>answers'", line[:200]))
                continue
            text, ans = line.split("\t", 1)
            topics = TOPIC.findall(text)
            if not topics:
                bad.append((str(qa), no, "no [topic entity] in question", line[:200]))
                continue
            answers = [a for a in ans.split("|") if a]
            rows[S.QUESTION_ID].append(f"{k}hop-{split}-{no}")
            rows[S.SPLIT].append(split)
            rows[S.HOPS].append(k)
            rows[S.TEXT].append(text)
            rows[S.QTYPE].append(qtypes.get(no, ""))
            # Unknown names keep a null id so that validation can quarantine them with a reason.
            rows[S.TOPIC_IDS].append([ent_id.get(t) for t in topics])
            rows[S.ANSWER_IDS].append([ent_id.get(a) for a in answers])
            rows[S.ANSWERS].append(answers)
            rows[S.GRAPH_ID].append(None)
            rows[S.CHOICES].append(None)
    questions = pa.table(rows, schema=S.QUESTIONS)
    return kg.tables(questions, bad)
