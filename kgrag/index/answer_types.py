"""The zero-shot planner's answer type read from each relation's *range sample* (``relpath.answer_type``).

The planner's ``type`` feature (:mod:`kgrag.index.zeroshot`) compares the question's answer phrase with the mean
name vector of the entities a candidate sequence reaches. Read off each candidate's own ends, a new KG's first run
encodes thousands of names a question (90% of a cold question's time at 1M triples). Read off the sequence's last
relation instead, through a sample of 32 entities that relation reaches anywhere in the KG (the same entities on
both stores: :func:`kgrag.kg.kgview.range_sample_arrays`), the names are encoded once per KG. On dev it costs about
2 points of first-end Hit@1 on PathQuestion-Large (docs/scale.md), so ``auto`` reads ranges only on a KG of
:data:`AUTO_RELATION_TRIPLES` triples or more.
"""

from __future__ import annotations

import weakref
from typing import Callable, Sequence

import numpy as np

#: answer_type auto reads relations' range samples from this many triples on; RANGE_K entities per sample, seed 0
AUTO_RELATION_TRIPLES = 5_000_000
RANGE_K = 32
RANGE_SEED = 0
_RANGES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # store -> {(relation, forward): mean vector}


def range_types(kg, entity_vectors, mode: str) -> Callable[[Sequence], np.ndarray | None] | None:
    """``sequence -> answer-type vector`` (the mean name vector of its last step's range sample; None for a
    sequence with no step) where ``mode`` is ``relation``, or ``auto`` on a KG of :data:`AUTO_RELATION_TRIPLES` or
    more; read once per store and process. None where the ends' names are read instead: ``ends``, a smaller KG
    under ``auto``, a store with no range sample, questions with their own graphs, or no entity vectors."""
    if not hasattr(kg, "range_sample") or getattr(kg, "has_graphs", False):
        return None
    if entity_vectors is None or not len(entity_vectors):
        return None
    if mode == "auto":
        mode = "relation" if kg.num_triples >= AUTO_RELATION_TRIPLES else "ends"
    if mode != "relation":
        return None
    means = range_means(kg, entity_vectors)

    def of(seq) -> np.ndarray | None:
        steps = [x for x in seq if x[0] >= 0]
        return means.get((int(steps[-1][0]), bool(steps[-1][1]))) if steps else None
    return of


def range_means(kg, entity_vectors) -> dict[tuple[int, bool], np.ndarray]:
    """``(relation, forward) -> the mean name vector of its range sample`` (:data:`RANGE_K` entities, seed
    :data:`RANGE_SEED`; ``kg.range_sample``), read once per store and process; a relation's range in one direction
    is its answer type (``relpath.answer_type: relation``) and what names it (:func:`kgrag.index.pseudo.type_nouns`)."""
    if kg not in _RANGES:
        _RANGES[kg] = means_of(kg.range_sample(RANGE_K, RANGE_SEED), entity_vectors)
    return _RANGES[kg]


def means_of(sample: dict[tuple[int, bool], np.ndarray], entity_vectors) -> dict[tuple[int, bool], np.ndarray]:
    """The mean vector of each range sample's entities (rows of ``entity_vectors``), read in one pass."""
    keys = sorted(sample)
    ids = np.concatenate([sample[k] for k in keys]) if keys else np.zeros(0, np.int64)
    vecs = np.asarray(entity_vectors[ids], dtype=np.float64) if len(ids) else np.zeros((0, 1))
    at = np.cumsum([0] + [len(sample[k]) for k in keys])
    return {k: vecs[a:b].mean(0) for k, a, b in zip(keys, at[:-1], at[1:]) if b > a}
