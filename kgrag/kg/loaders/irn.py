"""IRN path questions: PathQuestion and WorldCup2014 (Zhou et al., COLING 2018) as released.

A KB file of ``head<TAB>relation<TAB>tail`` lines and a question file in one of the release's three layouts,
told apart by the number of tab-separated fields of each line:

- 3 fields (PathQuestion ``PQ-2H`` / ``PQL-3H``): question, ``answer(a1/a2/.../)``, gold path
  ``subject#r1#e1#r2#...#answer``;
- 5 fields (WorldCup ``WC-P1`` / ``WC-P2``): question, one answer, gold path, the answer set ``a1/a2/.../``, the
  topic's neighbourhood facts (not read);
- 6 fields (WorldCup conjunctive ``WC-C``): question, one answer, two gold paths joined by ``*`` (each ending
  ``#<end>#answer``), the answer set, facts (not read), the topic entities ``e1/e2``.

The topic entities are the path's subject (``WC-C``: the sixth field); the hop count is the number of relations
of the (first) gold path, kept as the file's declared count (no module reads it unless ``retrieve.oracle_hops``).
The release has no train / dev / test split: ``split`` picks a seeded part of the questions (``test_share`` of
them for ``test``, the rest for ``dev``, drawn with ``split_seed``; ``all`` = every question), so that a plan
learns on ``dev`` (``relplan.split``) and a run reports on ``test``. A line with another number of fields, an
answer field it cannot read or no answer is quarantined with file, line and reason. A topic entity missing from
the KB keeps the question with no topic id (scored as a miss, like a question that links to nothing) and is
recorded in the quarantine with its reason (``kgrag.kg.loaders.common.unknown_topic``); an answer missing from
the KB keeps the question too (a null answer id: it is scored as a miss).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import ClassVar, Literal

import numpy as np
import pyarrow as pa
from pydantic import Field

from kgrag import schema as S
from kgrag.config.base import Strict
from kgrag.kg.loaders.common import (
    KGBuilder,
    LoaderInputError,
    empty_questions,
    read_nonempty,
    read_separated_triples,
    sample_rows,
    unknown_topic,
)
from kgrag.registry import LOADERS
from kgrag.types import KGTables

ANSWER = re.compile(r"^(.*?)\((.*)\)\s*$")


class IrnParams(Strict):
    """Params of the ``irn`` loader (``data.irn`` in params.yaml)."""

    # ``split`` picks a disjoint part of the same question file: the relplan stage learns on the other
    SPLITS_ARE_DISJOINT: ClassVar[bool] = True
    kb: str = Field(..., description="KB file: head<TAB>relation<TAB>tail per line (e.g. WC2014.txt, PQL3-KB.txt)")
    questions: str = Field(..., description="question file as released (PQL-3H.txt, WC-P2.txt, WC-C.txt)")
    split: Literal["dev", "test", "all"] = Field("test", description="seeded part of the questions: test = "
                                                 "test_share of them, dev = the rest, all = every one")
    test_share: float = Field(0.5, gt=0.0, lt=1.0, description="share of the questions in the test part")
    split_seed: int = Field(7, description="seed of the dev / test partition")


def part_of(n: int, *, split: str, test_share: float, split_seed: int) -> np.ndarray:
    """Line indices (0-based, ascending) of the ``split`` part of ``n`` questions: a seeded permutation's first
    ``round(test_share * n)`` are ``test``, the others ``dev``."""
    if split == "all":
        return np.arange(n)
    perm = np.random.default_rng(split_seed).permutation(n)
    k = int(round(test_share * n))
    return np.sort(perm[:k] if split == "test" else perm[k:])


def _answers(fields: list[str]) -> tuple[list[str], str] | tuple[None, str]:
    """The answer set of a line and its path field, or (None, why)."""
    if len(fields) == 3:
        m = ANSWER.match(fields[1].strip())
        if not m:
            return None, "answer field is not 'answer(a1/a2/...)'"
        return [a for a in m.group(2).split("/") if a], fields[2]
    if len(fields) in (5, 6):
        return [a for a in fields[3].split("/") if a], fields[2]
    return None, f"expected 3, 5 or 6 tab-separated fields, got {len(fields)}"


@LOADERS.register("irn", params=IrnParams)
def load_irn(*, kb: str, questions: str, split: str = "test", test_share: float = 0.5, split_seed: int = 7,
             sample: int = 0, seed: int = 0) -> KGTables:
    """An IRN KB and question file (PathQuestion, WorldCup2014); ``split`` is a seeded part of the questions."""
    kb_path, q_path = Path(kb), Path(questions)
    bad: list[tuple[str, int, str, str]] = []
    kg = KGBuilder()
    read_separated_triples(kb_path, "\t", "IRN KB file", kg, bad, label="tab", strip=True)
    if not kg.rows:
        raise LoaderInputError(f"{kb_path}: no valid triple (every line quarantined)")
    ent_id = kg.entity_ids()
    lines = read_nonempty(q_path, bad, "IRN question file")
    lines = [lines[i] for i in part_of(len(lines), split=split, test_share=test_share, split_seed=split_seed)]
    rows = empty_questions()
    stem = q_path.stem
    for no, line in sample_rows(lines, sample, seed):
        fields = line.split("\t")
        answers, path = _answers(fields)
        if answers is None:
            bad.append((str(q_path), no, path, line[:200]))
            continue
        if not answers:
            bad.append((str(q_path), no, "no answers", line[:200]))
            continue
        first = path.split("*")[0].split("#")
        topics = [t for t in fields[5].split("/") if t] if len(fields) == 6 else [first[0]]
        missing = [t for t in topics if t not in ent_id]
        if missing:  # kept, unlinked (a miss), and recorded: not dropped from the denominator
            bad.append((str(q_path), no, unknown_topic(missing[0], "the KB"), line[:200]))
        rels = [x for x in first[1::2] if x != "<end>"]
        rows[S.QUESTION_ID].append(f"{stem}-{no}")
        rows[S.SPLIT].append(split)
        rows[S.HOPS].append(len(rels) or None)
        rows[S.TEXT].append(fields[0].strip())
        rows[S.QTYPE].append("")
        rows[S.TOPIC_IDS].append([] if missing else [ent_id[t] for t in topics])
        rows[S.ANSWER_IDS].append([ent_id.get(a) for a in answers])
        rows[S.ANSWERS].append(answers)
        rows[S.GRAPH_ID].append(None)
        rows[S.CHOICES].append(None)
    return kg.tables(pa.table(rows, schema=S.QUESTIONS), bad)
