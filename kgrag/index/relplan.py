"""Relation-path plans learnt from a held-out question split: which relation sequence a question asks for.

A k-hop MetaQA question names a chain of relations ("the directors of the films written by the writer of X").
The ``relpath`` retriever grows relation sequences from the topic entities and ranks them; zero-shot it ranks
them by the cosine of the question and the relation names, which picks the right 3-hop sequence first for
about 4 questions in 10 (``bench/retrieval_frontier.py``). This module learns the ranking from questions of a
split the experiment does not evaluate, as Reasoning on Graphs (RoG) trains its planner on the relation paths
that connect a training question's topic entity to its answers:

1. :func:`relation_sequence` derives the weak label of a training question: the sequence of exactly ``hops``
   relation steps (relation name, forward or not) from its topic entities whose end nodes hold the most of its
   answers (then the highest share of answers among the end nodes; ties by walking order);
2. :func:`train_plan` stores every labelled question's text with its topic names masked
   (:func:`mask_topics`, so the model learns the wording, not the entities) and its vector;
3. :meth:`PlanModel.votes` scores a new question's candidate sequences by a k-nearest-neighbour vote: the
   cosine-weighted share of its ``k`` nearest training questions whose label starts with the candidate (beam
   pruning) or equals it (the final choice across lengths). Every labelled question votes, each label with its
   own length; only with ``retrieve.oracle_hops`` do the neighbours come from the question's declared hop
   count. ``relpath`` adds ``plan_weight`` x the share to the zero-shot cosine (params ``plan``, ``plan_k``,
   ``plan_weight``).

The model is a Parquet table (``schema.RELPLAN``), the lexicon and a ``plan.json`` (the encoder, counts) written by the
``relplan`` stage (``dvc.yaml``, before ``retrieve``) to ``data/relplan``. The question vectors are not in it: they
are read by text from the vector cache (:mod:`kgrag.index.entity_vectors`), which the stage fills, because their last
float bits depend on the processor's kernels (AVX2 or AVX-512) and a DVC output must be the same bytes on every
machine. A model given as a local folder (no cache key) keeps them in ``vectors.parquet``.

References
----------
Luo et al., "Reasoning on Graphs: Faithful and Interpretable Large Language Model Reasoning", ICLR 2024,
section 4.2 (planning optimization: relation paths between question and answer entities as weak supervision).
Cao et al., LEGO-GraphRAG (2024), section 4.1 (path filtering by a trained scorer).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np
import pyarrow as pa

from kgrag import arrays
from kgrag import io, ranking, schema as S
from kgrag.index import zeroshot
from kgrag.index.embed import read_vectors, write_vectors
from kgrag.kg.kgview import KGView
from kgrag.types import Question

Step = tuple[str, bool]  # (relation name, walked along the edge's direction)
MODEL_FILE = "plan.parquet"
VECTORS_FILE = "vectors.parquet"
META_FILE = "plan.json"
LEXICON_FILE = "lexicon.parquet"
#: distinct nodes one step may reach and still be walked: relpath's ``max_frontier`` default (its hub guard), so
#: that no label is a sequence the retriever would not walk, and a hub-rich KG labels in minutes
MAX_FRONTIER = 20_000

#: share of a relation's edges that must appear reversed in another relation for it to be that relation's mirror
MIRROR_SHARE = 0.9


def mask_topics(text: str, names: Iterable[str]) -> str:
    """``text`` with every topic name (case-insensitive, longest first) written ``X`` and MetaQA's topic
    brackets removed: "what films did [Tom Hanks] star in" -> "what films did X star in"."""
    for name in sorted({n for n in names if n}, key=len, reverse=True):
        text = re.sub(re.escape(name), "X", text, flags=re.IGNORECASE)
    return text.replace("[", "").replace("]", "")


class Adjacency:
    """A KG's edges as two CSR indexes (by head, by tail) over the non-mirror relations, built once per KG and
    ``skip`` set (:func:`adjacency`): a labelling walk then reads each node's own edges, not every edge of the KG
    (a 10M-triple KG costs a step what its frontier's degree does)."""

    def __init__(self, h: np.ndarray, r: np.ndarray, t: np.ndarray, n: int) -> None:
        self.n = n
        self.out = self._csr(h, t, r, n)
        self.inn = self._csr(t, h, r, n)

    @staticmethod
    def _csr(src: np.ndarray, dst: np.ndarray, rel: np.ndarray, n: int):
        order = np.argsort(src, kind="stable")
        ptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(src, minlength=n), out=ptr[1:])
        return ptr, dst[order], rel[order]

    @staticmethod
    def _gather(csr, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        ptr, dst, rel = csr
        lo, hi = ptr[nodes], ptr[nodes + 1]
        if not len(nodes) or int((hi - lo).sum()) == 0:
            return dst[:0], rel[:0]
        idx = arrays.ranges(lo, hi)
        return dst[idx], rel[idx]

    def expand(self, frontier: np.ndarray) -> dict[tuple[int, bool], np.ndarray]:
        """One step from ``frontier``: (relation id, forward) -> sorted distinct nodes reached."""
        out = {}
        for fwd, csr in ((True, self.out), (False, self.inn)):
            dst, rel = self._gather(csr, frontier)
            if not len(dst):
                continue
            key = arrays.unique(rel.astype(np.int64) * self.n + dst)  # one sort: by relation, then node
            rels, nodes = np.divmod(key, self.n)
            for a, b in arrays.runs(rels):
                out[(int(rels[a]), fwd)] = nodes[a:b]
        return out

    def follow(self, frontier: np.ndarray, rel: int, fwd: bool) -> np.ndarray:
        """Sorted distinct nodes one step of relation ``rel`` (along the edges' direction or not) reaches from
        ``frontier``."""
        dst, r = self._gather(self.out if fwd else self.inn, frontier)
        return arrays.unique(dst[r == rel])

    def within(self, seeds: np.ndarray, hops: int) -> list[np.ndarray]:
        """Masks of the nodes within 0, 1, ..., ``hops`` undirected hops of ``seeds``."""
        cur = np.zeros(self.n, dtype=bool)
        cur[seeds] = True
        out = [cur.copy()]
        frontier = np.asarray(seeds, dtype=np.int64)
        for _ in range(hops):
            nxt = np.concatenate([self._gather(self.out, frontier)[0], self._gather(self.inn, frontier)[0]])
            cur[nxt] = True  # a mask, not a sort: a hub's neighbourhood can be millions of ids
            frontier = np.flatnonzero(cur & ~out[-1])
            out.append(cur.copy())
        return out


_ADJ: dict = {}


def adjacency(kg: KGView, skip: frozenset = frozenset()) -> Adjacency:
    """The :class:`Adjacency` of ``kg`` without the relations in ``skip``, once per process, KG and ``skip``."""
    key = (id(kg), getattr(kg, "path", None), int(kg.num_entities), tuple(sorted(skip)))
    if key not in _ADJ:
        h, r, t = np.asarray(kg.heads, np.int64), np.asarray(kg.relations, np.int64), np.asarray(kg.tails, np.int64)
        if skip:
            keep = ~np.isin(r, np.asarray(sorted(skip), dtype=r.dtype))
            h, r, t = h[keep], r[keep], t[keep]
        _ADJ.clear()
        _ADJ[key] = Adjacency(h, r, t, int(kg.num_entities))
    return _ADJ[key]


def graph_adjacency(kg: KGView, graph_id: str, skip: frozenset = frozenset()) -> Adjacency:
    """The :class:`Adjacency` of one per-question graph's edges (``kg.graph_edges``) without the relations in
    ``skip``; built per call (a graph is small)."""
    e = kg.graph_edges(graph_id)
    h, r, t = (np.asarray(kg.heads, np.int64)[e], np.asarray(kg.relations, np.int64)[e],
               np.asarray(kg.tails, np.int64)[e])
    if skip:
        keep = ~np.isin(r, np.asarray(sorted(skip), dtype=r.dtype))
        h, r, t = h[keep], r[keep], t[keep]
    return Adjacency(h, r, t, int(kg.num_entities))


def is_co_step(seq: Sequence[tuple[int, bool]]) -> bool:
    """Whether the last step of ``seq`` ((relation id, forward) steps) is a co-step: its relation walked back right
    after it was walked ("films that share a director with X")."""
    return len(seq) >= 2 and zeroshot.units(seq)[-1][0] == "co"


def co_step_mask(seq: Sequence[tuple[int, bool]], dst: np.ndarray, left: np.ndarray,
                 back: frozenset = frozenset()) -> np.ndarray | None:
    """The walk rule of a co-step (the last step of ``seq``, :func:`is_co_step`) that reaches ``dst`` from nodes
    that the step before left, ``left``: which of ``dst`` it keeps (a mask), or None when it is no candidate.

    It does not return to the nodes it left ("films that share a director with X" are not X), and where it reaches
    nothing else it is no candidate: such a walk ends where it began, and a longer walk through it repeats a shorter
    one (the rule of :func:`sequence_scores` and ``relpath``). On a relation in ``back`` (one whose mirror the KG
    holds and is skipped, :func:`mirror_pairs`) the return is kept, since walking it back is walking another relation
    ("the parents of X's children" are X and the other parents); it is still no candidate where it reaches nothing
    but the nodes it left (on WorldCup2014, "players of X's club" when X is its only player, then their country, won
    over the club's own country on 79 of 368 dev questions until 2026-12-03)."""
    away = ~np.isin(dst, left)
    if not away.any():
        return None
    return np.ones(len(dst), dtype=bool) if int(seq[-1][0]) in back else away


def relation_sequence(kg: KGView, topics: Sequence[int], answers: Sequence[int], hops: int | None,
                      max_hops: int = 3, skip: frozenset = frozenset(), back: frozenset = frozenset()
                      ) -> tuple[tuple[Step, ...], float, float] | None:
    """The weak label of a training question: (sequence, answer recall, answer precision) or None.

    Every sequence of exactly ``hops`` (relation, direction) steps is walked from the topic entities
    (:func:`sequence_scores`). The label is the sequence whose end nodes hold the largest share of the answers,
    then the largest share of answers among its end nodes (the topics left out, as ``relpath``'s ``ends``), then
    the first walked (at each step forward steps before reversed ones, each by relation id). None when no
    sequence reaches an answer.

    ``hops`` None (a question set that declares no hop count): every length 1..``max_hops`` is walked and the
    best label by the same rule wins, the shorter on a tie (the same rule for any loader's questions).
    """
    scores = sequence_scores(kg, topics, answers, hops, max_hops, skip, back=back)
    best = None
    for seq, sc in scores.items():  # walking order, shorter first: strictly better wins
        if best is None or sc > best[1]:
            best = (seq, sc)
    return None if best is None else (best[0], best[1][0], best[1][1])


def sequence_scores(kg: KGView, topics: Sequence[int], answers: Sequence[int], hops: int | None,
                    max_hops: int = 3, skip: frozenset = frozenset(), max_frontier: int = MAX_FRONTIER,
                    graph_id: str | None = None, back: frozenset = frozenset()
                    ) -> dict[tuple[Step, ...], tuple[float, float]]:
    """Every relation sequence from the topics that reaches an answer: {sequence: (answer recall, answer
    precision)}, in walking order (shorter first; at each step forward steps before reversed ones, each by relation
    id); sequences of exactly ``hops`` steps, or of every length 1..``max_hops`` when ``hops`` is None.

    A walk may revisit any entity, the topics too (PathQuestion's "children, then parents, then children" paths; a
    self-loop is a step), but a co-step (a relation walked back right after it was walked) does not return to the
    nodes it left, and a sequence whose co-step reaches nothing else is none, as in ``relpath``
    (:func:`co_step_mask`), except that on a relation in
    ``back`` (ids of relations whose mirror is in ``skip``: walked back, it is its mirror walked forward, another
    relation, as "children, then parents" back to the topic) it keeps its return when it reaches something else. The search keeps before the last step only nodes
    within the remaining hops of an answer (they alone can lead to one), which bounds it; each sequence it finds is
    then scored on its whole walk, as ``relpath`` walks it (the pruned nodes' ends count against its precision, and
    its steps' sizes against the hub guard). Answers that are topic entities are left out, unless every answer is
    one (a question whose answer is its own topic); precision counts the end nodes without the topics, as
    ``relpath``'s ``ends``. Relation ids in ``skip`` (mirrors, :func:`mirrored_relations`) are not walked, nor a
    step that reaches more than ``max_frontier`` distinct nodes (``relpath``'s hub guard, whose default it shares:
    the retriever would not walk that step either).
    ``graph_id``: the question's own graph (per-question graphs, RoG's format) is walked, not the whole KG.
    """
    if hops is None:
        out: dict = {}
        for k in range(1, max_hops + 1):
            out.update(sequence_scores(kg, topics, answers, k, skip=skip, max_frontier=max_frontier,
                                       graph_id=graph_id, back=back))
        return out
    topics = arrays.unique(np.asarray([x for x in topics if x is not None and 0 <= x < kg.num_entities], np.int64))
    answers = arrays.unique(np.asarray([x for x in answers if x is not None and 0 <= x < kg.num_entities], np.int64))
    other = answers[~np.isin(answers, topics)]
    answers, own = (other, False) if len(other) else (answers, True)
    if not len(topics) or not len(answers) or hops < 1:
        return {}
    adj = adjacency(kg, skip) if graph_id is None else graph_adjacency(kg, graph_id, skip)
    near = adj.within(answers, hops - 1)
    names = kg.relation_names

    def walk(seq: tuple, frontier: np.ndarray, i: int, left: np.ndarray | None) -> None:
        for key, dst in adj.expand(frontier).items():
            if len(dst) > max_frontier:  # relpath's hub guard: a step that reaches more nodes is never walked
                continue
            if left is not None and is_co_step(seq + (key,)):
                keep = co_step_mask(seq + (key,), dst, left, back)  # relpath's rule
                if keep is None:
                    continue
                dst = dst[keep]
            if i < hops - 1:
                dst = dst[near[hops - 1 - i][dst]]
                if len(dst):
                    walk(seq + (key,), dst, i + 1, frontier)
                continue
            if np.isin(dst, answers).any():
                found.append(seq + (key,))

    found: list = []
    walk((), topics, 0, None)
    # the pruned walk finds the sequences that reach an answer; each is scored on its whole walk, as relpath walks
    # it (the pruning drops nodes that lead to no answer: their ends would be missing from the precision, and a
    # step's frontier from the hub guard)
    walked: dict = {(): (topics, topics[:0])}  # prefix -> (its ends, the nodes its last step left), or None

    def whole(seq: tuple) -> tuple | None:
        if seq not in walked:
            got = whole(seq[:-1])
            dst = None if got is None else adj.follow(got[0], *seq[-1])
            if dst is not None and len(dst) > max_frontier:  # relpath would not walk this step
                dst = None
            if dst is not None and is_co_step(seq):
                keep = co_step_mask(seq, dst, got[1], back)
                dst = None if keep is None else dst[keep]
            walked[seq] = None if dst is None else (dst, got[0])
        return walked[seq]

    out = {}
    for seq in found:
        got = whole(seq)
        dst = None if got is None else got[0]
        hit = 0 if dst is None else int(np.isin(dst, answers).sum())
        if hit:
            ends = dst if own else dst[~np.isin(dst, topics)]  # as relpath's ends: topics only when alone
            out[tuple((str(names[rel]), bool(fwd)) for rel, fwd in seq)] = (hit / len(answers), hit / max(len(ends), 1))
    return out


def wording_labels(texts: Sequence[str], candidates: Sequence[dict]) -> tuple[list, int]:
    """Each question's label, chosen per wording: questions with the same masked text ask the same thing, so
    among a wording's questions the sequence that explains the most of them (summed answer recall, then summed
    precision, then the shorter, then the first walked) labels every one it reaches; a question it does not reach,
    and a wording asked once, keep their own best (:func:`relation_sequence`'s rule). A coincidence of one question
    (a player whose national team is his club's country) then no longer teaches the shorter, wrong sequence.
    Returns (labels as (sequence, recall, precision) or None, questions whose label changed)."""
    own = []
    for cand in candidates:
        best = None
        for seq, sc in cand.items():
            if best is None or sc > best[1]:
                best = (seq, sc)
        own.append(None if best is None else (best[0], *best[1]))
    groups: dict[str, list[int]] = {}
    for i, t in enumerate(texts):
        groups.setdefault(t, []).append(i)
    out, changed = list(own), 0
    for members in groups.values():
        if len(members) < 2:
            continue
        total: dict = {}
        order: dict = {}
        for i in members:
            for seq, (rec, prec) in candidates[i].items():
                a, b = total.get(seq, (0.0, 0.0))
                total[seq] = (a + rec, b + prec)
                order.setdefault(seq, (len(seq), len(order)))
        if not total:
            continue
        pick = min(total, key=lambda s: (-round(total[s][0], 6), -round(total[s][1], 6), order[s]))
        for i in members:
            if pick in candidates[i] and (out[i] is None or out[i][0] != pick):
                out[i] = (pick, *candidates[i][pick])
                changed += 1
    return out, changed


def mirrored_relations(kg: KGView) -> list[str]:
    """Names of the relations that mirror another: ``b`` when at least ``MIRROR_SHARE`` of ``b``'s edges and of
    ``a``'s are the same pairs reversed (``plays_in_club_inverse`` of ``plays_in_club``); of each pair the one
    with the longer name (then the larger id) is the mirror. Walking ``b`` forward is walking ``a`` back, so
    ``relpath`` walks ``a`` only: one sequence per path, not two that tie."""
    return sorted(mirror_pairs(kg))


def mirror_pairs(kg: KGView) -> dict[str, str]:
    """{mirror: the relation it mirrors} of :func:`mirrored_relations`, by name. A store that counts by SQL
    (``relation_pair_counts``: the DuckDB store) is not read into memory; the counts are the same."""
    counts = getattr(kg, "relation_pair_counts", None)
    if counts is not None:
        size, distinct, shared = counts()
        common = lambda a, b: shared.get((a, b), 0)  # noqa: E731
    else:
        size, distinct, common = _pair_counts(kg)
    names = kg.relation_names
    out: dict[str, str] = {}
    ids = sorted(distinct)
    for i, a in enumerate(ids):
        for b in ids[i + 1:]:
            lo, hi = sorted((size[a], size[b]))
            if lo < MIRROR_SHARE * hi:
                continue
            if common(a, b) >= MIRROR_SHARE * max(distinct[a], distinct[b]):
                keep, drop = sorted((a, b), key=lambda x: (len(str(names[x])), x))
                if str(names[keep]) not in out:
                    out.setdefault(str(names[drop]), str(names[keep]))
    return out


def mirror_ids(relation_names: Sequence, pairs: dict[str, str]) -> tuple[frozenset, frozenset]:
    """Ids (in ``relation_names``) of the mirrors of ``pairs`` (:func:`mirror_pairs`: never walked, the ``skip``
    of :func:`sequence_scores`) and of the relations they mirror (walked back: ``back`` of :func:`co_step_mask`)."""
    ids = {str(n): i for i, n in enumerate(relation_names)}
    return frozenset(ids[m] for m in pairs if m in ids), frozenset(ids[b] for b in pairs.values() if b in ids)


def _pair_counts(kg: KGView):
    """:func:`mirror_pairs`' counts from the triple arrays: (triples, distinct pairs) per relation, and the
    count of ``a``'s pairs reversed in ``b`` as a function, computed only for the relation pairs of like size."""
    h, r, t = np.asarray(kg.heads, np.int64), np.asarray(kg.relations, np.int64), np.asarray(kg.tails, np.int64)
    if not len(r):
        return {}, {}, lambda a, b: 0
    n = max(int(kg.num_entities), 1)
    fwd_key = h * n + t
    rev_key = t * n + h
    rels = arrays.unique(r)
    size = {int(x): int(c) for x, c in zip(*np.unique(r, return_counts=True))}
    pairs = {int(x): arrays.unique(fwd_key[r == x]) for x in rels.tolist()}
    revs = {int(x): arrays.unique(rev_key[r == x]) for x in rels.tolist()}

    def common(a: int, b: int) -> int:
        return len(np.intersect1d(pairs[a], revs[b], assume_unique=True))
    return size, {k: len(v) for k, v in pairs.items()}, common


@dataclass(frozen=True)
class PlanModel:
    """Labelled training questions (masked texts, hop counts, relation sequences, unit vectors), the KG's mirrored
    relations (:func:`mirrored_relations`) and the lexicon of the labelled questions' wording
    (:class:`kgrag.index.zeroshot.Lexicon`; None without labelled questions)."""

    model: str
    texts: list[str]
    hops: np.ndarray
    labels: list[tuple[Step, ...]]
    vectors: np.ndarray
    mirrors: tuple[str, ...] = ()
    lexicon: zeroshot.Lexicon | None = None
    #: (mirror, the relation it mirrors) pairs (:func:`mirror_pairs`): the relations walked back by a mirror of their
    #: own, whose return the co-step rule keeps (:func:`co_step_mask`)
    mirror_of: tuple[tuple[str, str], ...] = ()
    #: the zero-shot planner's weights fitted on this KG's pseudo-questions (``relplan.pseudo``,
    #: :mod:`kgrag.index.pseudo`); None: the shipped :class:`~kgrag.index.zeroshot.Weights`
    weights: zeroshot.Weights | None = None
    #: WordNet's links count as word matches in the zero-shot planner (``relplan.wordnet``): the weights were fitted
    #: with them, and relpath ranks with them wherever this plan is used
    wordnet: bool = False

    def walked_back(self, relation_names: Sequence) -> frozenset:
        """Ids (in ``relation_names``) of the relations a mirror of :attr:`mirror_of` mirrors: ``back`` of
        :func:`co_step_mask`."""
        return mirror_ids(relation_names, dict(self.mirror_of))[1]

    def save(self, folder: str | Path, extra: dict | None = None) -> None:
        """Write ``plan.parquet`` (``schema.RELPLAN``), ``lexicon.parquet`` and ``plan.json`` into ``folder``, and
        ``vectors.parquet`` (row i = training question i) only for a model the vector cache cannot key (a local
        folder): a packaged model's question vectors are read back from the vector cache by text
        (:func:`question_vectors`), so that the stage's output holds no float bits of the machine's kernels."""
        folder = Path(folder)
        table = pa.table({
            S.TEXT: self.texts, S.HOPS: self.hops.astype(np.int64),
            S.PLAN_RELATIONS: [[s[0] for s in lab] for lab in self.labels],
            S.PLAN_FORWARD: [[s[1] for s in lab] for lab in self.labels],
        }, schema=S.RELPLAN)
        io.write_parquet(folder / MODEL_FILE, table)
        (folder / VECTORS_FILE).unlink(missing_ok=True)
        if self.texts and not cached_vectors(self.model):
            write_vectors(folder / VECTORS_FILE, np.arange(len(self.texts)), self.vectors.astype(np.float32))
        rows = self.lexicon.to_rows() if self.lexicon is not None else []
        io.write_parquet(folder / LEXICON_FILE, pa.Table.from_pylist(rows, schema=S.LEXICON))
        pairs = {"mirror_of": dict(self.mirror_of)} if self.mirror_of else {}  # a KG without mirrors: as before
        fitted = {"weights": dict(zip(zeroshot.FEATURES, self.weights.vector().tolist()))} if self.weights else {}
        links = {"wordnet": True} if self.wordnet else {}  # off: plan.json as before
        io.write_json(folder / META_FILE, {"model": self.model, "questions": len(self.texts),
                                           "mirrors": list(self.mirrors), **pairs, **fitted, **links,
                                           **(extra or {})})

    @staticmethod
    def load(folder: str | Path) -> "PlanModel":
        """Read a model written by :meth:`save`; a missing folder is an error naming the stage that writes it."""
        folder = Path(folder)
        if not (folder / MODEL_FILE).exists():
            raise FileNotFoundError(
                f"{folder / MODEL_FILE}: no relation-path plan; it is written by `dvc repro relplan` "
                "(stage relplan), or set retrieve.relpath.plan: null for the zero-shot ranking")
        t = io.read_parquet(folder / MODEL_FILE)
        meta = json.loads((folder / META_FILE).read_text())
        rels, fwd = t[S.PLAN_RELATIONS].to_pylist(), t[S.PLAN_FORWARD].to_pylist()
        texts = t[S.TEXT].to_pylist()
        if not texts:
            vecs = np.zeros((0, 1), dtype=np.float32)
        elif (folder / VECTORS_FILE).exists():  # a local model folder's plan (or one written before 2026-12-04)
            vecs = read_vectors(folder / VECTORS_FILE)
        else:
            vecs = question_vectors(meta["model"], texts)
        lex = None
        if (folder / LEXICON_FILE).exists():
            rows = io.read_parquet(folder / LEXICON_FILE).to_pylist()
            lex = zeroshot.Lexicon.from_rows(rows) if rows else None
        return PlanModel(model=meta["model"], texts=texts, hops=np.asarray(t[S.HOPS].to_pylist()),
                         labels=[tuple(zip(a, b)) for a, b in zip(rels, fwd)], vectors=vecs,
                         mirrors=tuple(meta.get("mirrors", ())), lexicon=lex,
                         mirror_of=tuple(sorted(meta.get("mirror_of", {}).items())),
                         weights=zeroshot.Weights(**meta["weights"]) if meta.get("weights") else None,
                         wordnet=bool(meta.get("wordnet", False)))

    def nearest(self, query_vec: np.ndarray, k: int, hops: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` nearest training questions to ``query_vec``: (their rows, nearest first; their cosines
        rounded to ``ranking.COSINE_DECIMALS``). Ranked by the rounded cosine, ties by row; ``hops`` k: among the
        k-hop training questions only."""
        rows = np.arange(len(self.labels)) if hops is None else np.nonzero(self.hops == hops)[0]
        if not len(rows) or k < 1:
            return rows[:0], np.zeros(0)
        sims = self.vectors[rows].astype(np.float64) @ np.asarray(query_vec, dtype=np.float64)
        top = ranking.top_k(sims, k, ids=rows, decimals=ranking.COSINE_DECIMALS)
        return rows[top], ranking.rounded(sims[top], ranking.COSINE_DECIMALS)

    def votes(self, query_vec: np.ndarray, k: int, hops: int | None = None
              ) -> tuple[dict[tuple[Step, ...], float], dict[tuple[Step, ...], float]]:
        """Vote shares of the ``k`` nearest training questions: (share of every label prefix, share of every
        whole label).

        Neighbours are ranked by cosine rounded to ``ranking.COSINE_DECIMALS``, ties by row; each votes its
        (non-negative) cosine for its label (and, in the first dict, every prefix of it); shares are divided by
        the total vote and rounded. ``hops`` None: every training question votes, each label with its own
        length, so whole-label shares compare sequences of different lengths; ``hops`` k: only training
        questions of k hops vote (the declared-hop oracle, ``retrieve.oracle_hops``). Empty when none votes.
        """
        return self.shares(*self.nearest(query_vec, k, hops))

    def shares(self, near: np.ndarray, sims: np.ndarray
               ) -> tuple[dict[tuple[Step, ...], float], dict[tuple[Step, ...], float]]:
        """:meth:`votes` of given neighbours: ``near`` rows with their rounded cosines ``sims`` (as
        :meth:`nearest` returns them), for a caller that also needs the rows."""
        w = np.clip(sims, 0.0, None)
        total = float(w.sum())
        if total <= 0:
            return {}, {}
        prefix: dict[tuple[Step, ...], float] = {}
        whole: dict[tuple[Step, ...], float] = {}
        for i, wi in zip(near.tolist(), w.tolist()):
            lab = self.labels[i]
            whole[lab] = whole.get(lab, 0.0) + wi
            for j in range(1, len(lab) + 1):
                prefix[lab[:j]] = prefix.get(lab[:j], 0.0) + wi

        def share(d: dict) -> dict:
            return {s: float(ranking.rounded([v / total])[0]) for s, v in d.items()}

        return share(prefix), share(whole)

    def prior(self, query_vec: np.ndarray, hops: int | None, k: int) -> dict[tuple[Step, ...], float]:
        """Vote share of every label prefix among the ``k`` nearest training questions (:meth:`votes`)."""
        return self.votes(query_vec, k, hops)[0]


def train_plan(*, kg: KGView, questions: Sequence[Question], encode: Callable[[list[str]], np.ndarray],
               model: str, log: Callable[[str], None] = lambda s: None, max_hops: int = 3,
               label: Callable[[Question], tuple[Step, ...] | None] | None = None,
               mirror_of: dict[str, str] | None = None) -> tuple[PlanModel, dict]:
    """Label ``questions``, embed their masked texts and count their wording per unit (the lexicon).
    ``mirror_of``: ``kg``'s :func:`mirror_pairs` where the caller has them (a pass over every triple), else
    computed here.

    Each question is labelled by the relation sequence to its answers (with its declared hop count where its file
    gives one, else of any length 1..``max_hops``), chosen per wording (:func:`wording_labels`), or, given ``label`` (a plan written without labelled
    questions: ``relplan.source: kg``), by ``label(question)``, e.g. the zero-shot ``relpath`` retriever's choice;
    such labels train the vote but no lexicon (they would only repeat the zero-shot score). Mirrored relations
    (:func:`mirrored_relations`) are found first and never walked; the relations they mirror are walked back to
    the nodes they left (:func:`co_step_mask`).

    Returns the model and counts: questions, labelled, mean label recall / precision (how well the labels
    explain the gold answers; None for ``label``), distinct labels per hop count, mirrored relations.
    """
    pairs = mirror_pairs(kg) if mirror_of is None else mirror_of
    mirrors = sorted(pairs)
    skip, back = mirror_ids(kg.relation_names, pairs)
    by_name = {str(n): i for i, n in enumerate(kg.relation_names)}
    lexicon = zeroshot.Lexicon() if label is None else None
    texts, hops, labels, rec, prec, skipped = [], [], [], [], [], 0
    relabelled = 0
    if label is None:  # labels from the answers, chosen per wording (wording_labels)
        cands = []
        for i, q in enumerate(questions):
            # a question that brings its own graph (RoG's format) is labelled in that graph: its relation names
            # are the benchmark's, shared by every graph, so the sequence is learnt as any other
            cands.append(sequence_scores(kg, q.topic_ids, q.answer_ids, int(q.hops) if q.hops else None, max_hops,
                                         skip=skip, graph_id=q.graph_id, back=back))
            if (i + 1) % 500 == 0:
                log(f"{i + 1} of {len(questions)} questions walked")
        masked = [mask_topics(q.text, kg.names(np.asarray([x for x in q.topic_ids if x is not None], dtype=np.int64)))
                  for q in questions]
        labels_by_wording, relabelled = wording_labels(masked, cands)
    for i, q in enumerate(questions):
        if label is not None:
            got = label(q)
            lab = (got, None, None) if got else None
        else:
            lab = labels_by_wording[i]
        if lab is None:
            skipped += 1
            continue
        names = kg.names(np.asarray([x for x in q.topic_ids if x is not None], dtype=np.int64))
        texts.append(mask_topics(q.text, names))
        hops.append(len(lab[0]))
        labels.append(lab[0])
        if lab[1] is not None:
            rec.append(lab[1])
            prec.append(lab[2])
        if lexicon is not None:
            words, _ = zeroshot.content_words(zeroshot.mask(q.text, names))
            lexicon.add(words, [(k, str(kg.relation_names[r]), f) for k, r, f in
                                zeroshot.units([(by_name[n], fw) for n, fw in lab[0]])])
        if (i + 1) % 1000 == 0:
            log(f"{i + 1} of {len(questions)} questions labelled")
    vecs = encode(texts) if texts else np.zeros((0, 1), dtype=np.float32)
    hop_arr = np.asarray(hops, dtype=np.int64)
    stats = {
        "questions": len(questions), "labelled": len(texts), "unlabelled": skipped,
        "label_answer_recall": round(float(np.mean(rec)), 4) if rec else None,
        "label_answer_precision": round(float(np.mean(prec)), 4) if prec else None,
        "distinct_labels": {str(k): len({lab for lab, hk in zip(labels, hops) if hk == k})
                            for k in sorted(set(hops))},
        "mirrored_relations": mirrors, "relabelled_by_wording": relabelled,
    }
    return PlanModel(model=model, texts=texts, hops=hop_arr, labels=labels,
                     vectors=np.asarray(vecs, dtype=np.float32), mirrors=tuple(mirrors),
                     lexicon=lexicon if lexicon is not None and lexicon.counts else None,
                     mirror_of=tuple(sorted(pairs.items()))), stats


def cached_vectors(model: str) -> bool:
    """Whether ``model``'s question vectors live in the vector cache (a packaged model), not in the plan folder."""
    from kgrag.index.entity_vectors import model_key

    return model_key(model) is not None


def question_vectors(model: str, texts: list[str]) -> np.ndarray:
    """The plan's question vectors by text, from the process's vector cache of ``model``
    (:func:`kgrag.index.entity_vectors.shared_cache`: the stage that wrote the plan put them there; texts not
    found are encoded, e.g. on another machine). The encoder for :func:`train_plan` that fills the cache."""
    from kgrag.index.entity_vectors import shared_cache

    return shared_cache(model).get(list(texts))


_LOADED: dict[str, PlanModel] = {}


def load_cached(folder: str | Path) -> PlanModel:
    """:meth:`PlanModel.load`, once per process and file version (path, size and modification time)."""
    p = Path(folder) / MODEL_FILE
    key = f"{p.resolve()}@{p.stat().st_mtime_ns}@{p.stat().st_size}" if p.exists() else str(p)
    if key not in _LOADED:
        _LOADED.clear()
        _LOADED[key] = PlanModel.load(folder)
    return _LOADED[key]
