"""Leak guard: training questions (a plan's, a fine-tuning stage's) checked against the evaluated ones by content.

Comparing files by path lets a copy, a hard link or a superset of the evaluated file leak its questions into
training. This module compares the questions themselves: by id, and by *normalized text* (lower case, MetaQA's
brackets and punctuation removed, underscores and runs of white space read as one space), so that
"what films did [Tom Hanks] star in" and "What films did Tom_Hanks star in ?" are the same question.

Rule (:func:`guard`): a training question with the id of an evaluated one, or training questions holding the text
of more than ``max_share`` of the evaluated questions (a copy or superset of the evaluated file: all of them),
stop the stage with a short error naming the counts. Fewer shared texts (a benchmark's own repeats across its
splits: MetaQA's 1-hop dev and test files share 4 texts; WorldCup2014's release repeats questions, so that 43% of
the WC-P2 test part's texts are also in its dev part) are left out of training and counted: a plan never learns an
evaluated question's own wording.
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
          eval_texts: Iterable[str], what: str, max_share: float = 0.8) -> tuple[list[bool], dict]:
    """Which training questions may be used (a mask) and the counts; raises :class:`LeakError` on a leak.

    Parameters
    ----------
    train_ids, train_texts
        The training questions' ids and texts, aligned.
    eval_ids, eval_texts
        The evaluated questions' ids and texts.
    what
        What trains (``relplan.file``, ``finetune``): named in the error.
    max_share
        Share of the evaluated questions whose text may appear among the training questions (those training
        questions are left out); above it the training file is taken for a copy or superset and refused.
    """
    eval_ids = set(map(str, eval_ids))
    eval_norm = [normalize(t) for t in eval_texts]
    same_id = sum(1 for i in train_ids if str(i) in eval_ids)
    train_norm = [normalize(t) for t in train_texts]
    train_set = set(train_norm)
    shared_eval = sum(1 for t in eval_norm if t in train_set)
    eval_set = set(eval_norm)
    same_text = [t in eval_set for t in train_norm]
    if same_id or (eval_norm and shared_eval > max_share * len(eval_norm)):
        raise LeakError(
            f"{what}: {same_id} training question(s) have an evaluated question's id, and the texts of {shared_eval} "
            f"of the {len(eval_norm)} evaluated questions are among the {len(train_texts)} training questions: "
            "the evaluated questions would leak into training. Give a file with no evaluated question (a dev or "
            "training split), or evaluate another split")
    return [not x for x in same_text], {"training_questions": len(train_texts), "left_out_same_text": sum(same_text),
                                        "evaluated_texts_shared": shared_eval}
