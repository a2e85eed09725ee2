"""Leak guard: training questions (a plan's, a fine-tuning stage's) checked against the evaluated ones by content.

Comparing files by path lets a copy, a hard link or a superset of the evaluated file leak its questions into
training. This module compares the questions themselves: by id, and by *normalized text* (lower case, MetaQA's
brackets and punctuation removed, underscores and runs of white space read as one space), so that
"what films did [Tom Hanks] star in" and "What films did Tom_Hanks star in ?" are the same question.

Rule (:func:`guard`): a training question with the id of an evaluated one, or more than ``tolerance`` training
questions whose text is an evaluated question's, stop the stage with a short error naming the counts (a copy or
superset of the evaluated file); up to ``tolerance`` such questions (a benchmark's own repeats across its splits:
MetaQA's 1-hop dev and test files share 4 texts) are left out of training and counted.
"""

from __future__ import annotations

import re
from typing import Iterable, Sequence

_PUNCT = re.compile(r"[^\w\s]|_", re.UNICODE)
_SPACE = re.compile(r"\s+")


class LeakError(ValueError):
    """Training questions that are evaluated questions; the message names the counts and the fix."""


def normalize(text: str) -> str:
    """A question's text for comparison: lower case, brackets and punctuation dropped, underscores and white
    space runs read as one space."""
    return _SPACE.sub(" ", _PUNCT.sub(" ", str(text).lower())).strip()


def guard(*, train_ids: Sequence[str], train_texts: Sequence[str], eval_ids: Iterable[str],
          eval_texts: Iterable[str], what: str, tolerance: int = 5) -> tuple[list[bool], dict]:
    """Which training questions may be used (a mask) and the counts; raises :class:`LeakError` on a leak.

    Parameters
    ----------
    train_ids, train_texts
        The training questions' ids and texts, aligned.
    eval_ids, eval_texts
        The evaluated questions' ids and texts.
    what
        What trains (``relplan.file``, ``finetune``): named in the error.
    tolerance
        Text repeats allowed (and left out of training): a benchmark's own repeats across splits.
    """
    eval_ids, eval_norm = set(map(str, eval_ids)), {normalize(t) for t in eval_texts}
    same_id = sum(1 for i in train_ids if str(i) in eval_ids)
    same_text = [normalize(t) in eval_norm for t in train_texts]
    n_text = sum(same_text)
    if same_id or n_text > tolerance:
        raise LeakError(
            f"{what}: {same_id} training question(s) have an evaluated question's id and {n_text} its text "
            f"(of {len(train_texts)} training questions): the evaluated questions would leak into training. Give a "
            "file with no evaluated question (a dev or training split), or evaluate another split")
    return [not x for x in same_text], {"training_questions": len(train_texts), "left_out_same_text": n_text}
