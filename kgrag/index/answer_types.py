"""The zero-shot planner's answer type read from each relation's *range sample* (``relpath.answer_type``).

The planner's ``type`` feature (:mod:`kgrag.index.zeroshot`) compares the question's answer phrase with the mean
name vector of the entities a candidate sequence reaches. Read off each candidate's own ends, a new KG's first run
encodes thousands of names a question (90% of a cold question's time at 1M triples). Read off the sequence's last
relation instead, through a sample of 32 entities that relation reaches anywhere in the KG (the same entities on
both stores: :func:`kgrag.kg.kgview.range_sample_arrays`), the names are encoded once per KG. On dev it costs about
2 points of first-end Hit@1 on PathQuestion-Large (docs/scale.md), so ``auto`` reads ranges only on a KG of
:data:`AUTO_RELATION_TRIPLES` triples or more.

A range sample also has a *name*: the WordNet class noun nearest its mean name vector (:func:`range_nouns`: "movie"
for MetaQA's films, "actor" for its writers, "language" for its languages). A mean of 32 names is a blurred type (a
film title and a person's name are closer under MiniLM than "films" and "actor" are); with WordNet on
(``relplan.wordnet``), the ``type`` feature reads the noun of the sequence's last step beside the names
(:func:`noun_types`; ``zeroshot.TYPE_NOUN``).
"""

from __future__ import annotations

import weakref
from typing import Callable, Sequence

import numpy as np

#: answer_type auto reads relations' range samples from this many triples on; RANGE_K entities per sample, seed 0
AUTO_RELATION_TRIPLES = 5_000_000
RANGE_K = 32
RANGE_SEED = 0
#: nearest vocabulary words looked at for a range's name where the ones echoing the relation's name are passed over
NOUN_CANDIDATES = 50
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
    return lambda seq: means.get(end_key(seq))


def end_key(seq: Sequence) -> tuple[int, bool] | None:
    """The (relation, direction) whose range a sequence ends in: its last step's (a co-step, walked there and back,
    ends in the range of the relation walked back); a separator step (negative relation) is no step; None without
    a step."""
    steps = [x for x in seq if x[0] >= 0]
    return (int(steps[-1][0]), bool(steps[-1][1])) if steps else None


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


def range_nouns(means: dict[tuple[int, bool], np.ndarray], relation_names: Sequence[str], vocabulary: Sequence[str],
                vectors: np.ndarray, echo: bool = True) -> dict[tuple[int, bool], int]:
    """``(relation, forward) ->`` the index of the ``vocabulary`` word (unit ``vectors``, one row each) nearest its
    range's mean (``means``: :func:`range_means`), ties to the earlier word. ``echo`` False: the nearest among the
    :data:`NOUN_CANDIDATES` nearest that shares no 4-letter stem with the relation's name, none where all do (a
    pseudo-question worded by its type does not repeat the name: :func:`kgrag.index.pseudo.type_nouns`)."""
    from kgrag.index import zeroshot

    V = np.asarray(vectors, dtype=np.float64)
    out: dict[tuple[int, bool], int] = {}
    for (r, fwd), c in sorted(means.items()):
        near = np.argsort(-(V @ np.asarray(c, np.float64)), kind="stable")[:1 if echo else NOUN_CANDIDATES]
        said = set() if echo else zeroshot.name_stems(str(relation_names[r]))
        for i in near.tolist():
            if zeroshot._stem(vocabulary[i]) not in said:
                out[(int(r), bool(fwd))] = int(i)
                break
    return out


def noun_types(means: dict[tuple[int, bool], np.ndarray], relation_names: Sequence[str], vocabulary: Sequence[str],
               vectors: np.ndarray) -> Callable[[Sequence], np.ndarray | None]:
    """``sequence -> the unit vector of its answer type's noun``: the :func:`range_nouns` word (echoes allowed) of
    its last step's range, None for a sequence with no step or a range with no sample (``zeroshot.features``'
    ``type_nouns``)."""
    V = np.asarray(vectors, dtype=np.float64)
    picks = {k: V[i] for k, i in range_nouns(means, relation_names, vocabulary, V).items()}
    return lambda seq: picks.get(end_key(seq))


def wordnet_noun_types(kg, entity_vectors, vectors_of: Callable[[list[str]], np.ndarray]
                       ) -> Callable[[Sequence], np.ndarray | None] | None:
    """:func:`noun_types` of ``kg``'s ranges over WordNet's class nouns (:func:`kgrag.index.wordnet.class_nouns`,
    embedded by ``vectors_of``, the index's model), for the planner with WordNet on; None where the store has no
    range sample, the questions bring their own graphs, there are no entity vectors, or WordNet's files are
    missing (the ``type`` feature then reads the names alone)."""
    if not hasattr(kg, "range_sample") or getattr(kg, "has_graphs", False):
        return None
    if entity_vectors is None or not len(entity_vectors):
        return None
    from kgrag.index import wordnet

    try:
        vocab = list(wordnet.class_nouns())
    except FileNotFoundError:
        return None
    return noun_types(range_means(kg, entity_vectors), kg.relation_names, vocab, vectors_of(vocab))
