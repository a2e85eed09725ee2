"""Pseudo-questions from a KG's own relation paths, and the zero-shot planner's weights fitted on them.

A KG with no labelled question still has its relation names and its walks. From each of a set of topic entities
(the held-out questions' linked topics, or a seeded sample of the KG's entities) one walk of 1-3 steps is drawn
and worded from the relation names ("what is the nationality of the one whose spouse is X?", :func:`verbalise`);
the entities it reaches are its answers. People name what they ask for more often than they say the last relation
("which professional football team do players from Italy play for?"), so a share of the walks (``relplan.
pseudo_types``) is worded by its answer type instead (:func:`typed`: "which stadium has the one whose plays for
country is Italy?"), the type's name the WordNet class noun nearest the relation's range sample that does not echo
its name (:func:`type_nouns`). The eight weights of :class:`kgrag.index.zeroshot.Weights` are then fitted on those
pseudo-questions (:func:`fit_smooth`: the expected share of answers at the end of the chosen sequence, under a
softmax of the linear score, L-BFGS), from and towards the shipped weights (``relplan.pseudo_prior``), so the
planner's balance of its features is learnt for the user's KG instead of taken from the four dev KGs it was chosen
on. Nothing here reads an answer or a labelled question (issue 54's per-KG self-supervision).

Measured on dev (``python -m bench.planner_dev --zero-shot-only --pseudo 300 --pseudo-types 0.5
--pseudo-prior-lams 0.01 0.1``, seeds 0-2, docs/retrieval.md), the prior being the other dev KGs' fit (what the
shipped weights are to a new KG), expected Hit@1 of the first end, no LLM: MetaQA / WorldCup2014 / PathQuestion-Large
2H / 3H about 0.85 / 0.81 / 0.94 / 0.93 with the defaults, against 0.83 / 0.68 / 0.94 / 0.91 with name-only wording
and lam 0.1 (the defaults until 2026-12-05) and 0.81 / 0.64 / 0.94 / 0.91 for the other KGs' fit alone.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Sequence

import numpy as np

from kgrag.index import answer_types, zeroshot
from kgrag.index import wordnet as wn
from kgrag.index.params import RelPlanParams
from kgrag.index.relplan import MAX_FRONTIER, Adjacency, adjacency, co_step_mask, is_co_step, mirror_ids
from kgrag.kg.kgview import KGView

Step = tuple[int, bool]
_DEFAULTS = RelPlanParams()  # relplan's defaults: the library's, written once

#: a walk is drawn only where it reaches 1..MAX_ENDS entities besides its topics (a question has a few answers)
MAX_ENDS = 50
#: a sequence whose ends are more than this many nodes is not walked further (the candidates' enumeration stays
#: bounded on hubs; relpath's beam walks such sequences, but a pseudo-question needs no more of them)
MAX_EXPAND = 2000
#: L2 penalty of the fit, on the weights scaled by each feature's spread over the candidates
LAMBDA = 1e-4
#: decimals the fitted weights are rounded to (a fit on another CPU moves no score's ranking)
DECIMALS = 4
#: features whose shipped weight the fit keeps (none). Tried: ``("length",)``, since a pseudo-question's length is
#: drawn (a third of each), not asked, so pseudo-questions cannot teach how long a KG's questions are: on dev it
#: moved WorldCup2014's 2-hop set 0.451 -> 0.669 and its two-topic set 0.888 -> 0.618 (the kept weight does not
#: scale with the fitted ones); docs/retrieval.md
KEEP: tuple[str, ...] = ()
#: the fit starts from the shipped weights and is penalised towards them with ``relplan.pseudo_prior``'s lam (on the
#: spread-scaled difference), so the pseudo-questions move what they can teach; 0 fits from zero on them alone.
#: Chosen on dev (bench/planner_dev.py --pseudo 300 --pseudo-types 0.5 --pseudo-prior-lams 0.01 0.1, seeds 0-2, the
#: prior the other KGs' fit as the shipped weights are to a new KG; docs/retrieval.md): 0.01 is the one at >= 0.80 on
#: every dev KG on average; 0.1 (the default until 2026-12-05, with name-only wording) held WorldCup2014 at 0.68-0.74,
#: and no prior lost PathQuestion-Large 2H in the pipeline (0.73: its self-trained vote spreads a one-step choice)
PRIOR_LAM = _DEFAULTS.pseudo_prior
#: share of the pseudo-questions worded by their answer type (:func:`typed`; relplan.pseudo_types) and the offset
#: of that draw's seed from the walks' seed
TYPE_SHARE = _DEFAULTS.pseudo_types
TYPE_SEED = 100
#: features whose fitted weight stays >= 0 (:func:`fit_smooth`); length and ends may take either sign
NONNEGATIVE: frozenset[str] = frozenset({"ll", "support", "count", "cue", "type", "order"})


@dataclass(frozen=True)
class Pseudo:
    """One pseudo-question: its text, its topics' names, every candidate sequence from its topics (walking order)
    with the entity ids it reaches, and each candidate's share of the walk's answers among its ends (``p``)."""

    text: str
    topic_names: tuple[str, ...]
    walk: tuple[Step, ...]
    seqs: tuple[tuple[Step, ...], ...]
    ends: tuple[np.ndarray, ...]
    p: np.ndarray


def walks(adj: Adjacency, topics: np.ndarray, max_hops: int = 3, back: frozenset = frozenset(),
          max_frontier: int = MAX_FRONTIER, max_expand: int = MAX_EXPAND) -> dict[tuple[Step, ...], np.ndarray]:
    """Every relation sequence of 1..``max_hops`` steps from ``topics`` over ``adj`` (mirrors left out when it was
    built), with the sorted entity ids it reaches, in walking order (shorter first; at each step forward steps
    before reversed ones, each by relation id). ``relpath``'s walk rules: a step that reaches more than
    ``max_frontier`` nodes is not walked, a co-step does not return to the nodes it left (except on a relation in
    ``back``) and is no candidate where it reaches nothing else (:func:`~kgrag.index.relplan.co_step_mask`); a
    sequence that reaches more than ``max_expand`` nodes is not extended."""
    out: dict = {}
    layer = {(): (np.unique(np.asarray(topics, np.int64)), None)}
    for _ in range(max_hops):
        nxt: dict = {}
        for seq, (frontier, left) in layer.items():
            if len(frontier) > max_expand:
                continue
            for key, dst in sorted(adj.expand(frontier).items(), key=lambda kv: (not kv[0][1], kv[0][0])):
                if len(dst) > max_frontier:
                    continue
                s = seq + (key,)
                if left is not None and is_co_step(s):
                    keep = co_step_mask(s, dst, left, back)
                    if keep is None:
                        continue
                    dst = dst[keep]
                nxt[s] = (dst, frontier)
        out.update({s: v[0] for s, v in nxt.items()})
        layer = nxt
    return out


def verbalise(seq: Sequence[Step], topic: str, relation_names: Sequence[str],
              phrase: Callable[[str], str] = zeroshot.relation_phrase) -> str:
    """A pseudo-question for the walk ``seq`` from ``topic``, worded from the relation names alone: each forward
    step "the <relation> of <it>", each backward step "the one whose <relation> is <it>", a relation walked there
    and back (a co-step) "the others with the same <relation> as <it>", read from the topic outwards ("what is the
    nationality of the spouse of X?")."""
    return f"what is {_said(zeroshot.units(seq), topic, relation_names, phrase)}?"


def _said(units: Sequence[tuple[str, int, bool]], topic: str, relation_names: Sequence[str],
          phrase: Callable[[str], str] = zeroshot.relation_phrase) -> str:
    """The noun phrase of :func:`verbalise` for ``units`` walked from ``topic`` (the topic itself for none)."""
    it = topic
    for kind, r, fwd in units:
        ph = phrase(str(relation_names[r]))
        if kind == "co":
            it = f"the others with the same {ph} as {it}"
        else:
            it = f"the {ph} of {it}" if fwd else f"the one whose {ph} is {it}"
    return it


def typed(seq: Sequence[Step], topic: str, relation_names: Sequence[str], noun: str) -> str:
    """A pseudo-question whose last unit is said by its answer type alone ("which club has the one whose plays
    for country is X?"): people name what they ask for ("which team", "what films") more often than the last
    relation's words."""
    return f"which {noun} has {_said(zeroshot.units(seq)[:-1], topic, relation_names)}?"


def type_nouns(means: dict[Step, np.ndarray], relation_names: Sequence[str], vocabulary: Sequence[str],
               vectors: np.ndarray) -> dict[Step, str]:
    """A name for the answer type of each (relation, direction) with a range sample: the ``vocabulary`` word whose
    (unit) vector is nearest the mean name vector of the range (``means``: :func:`kgrag.index.answer_types.
    range_means`) among those sharing no 4-letter stem with the relation's name, so that the typed wording does not
    echo it (MiniLM on WorldCup2014: "stadium" for ``plays_in_club``'s clubs, "defender" for positions, "movie" for
    MetaQA's films; :func:`kgrag.index.answer_types.range_nouns`). Ties go to the earlier word; relations whose
    every near word echoes the name get none."""
    vocab = list(vocabulary)
    return {k: vocab[i] for k, i in answer_types.range_nouns(means, relation_names, vocab, vectors, echo=False).items()}


def type_wording(items: Sequence[tuple[Sequence[Step], str, str]], relation_names: Sequence[str],
                 nouns: dict[Step, str] | None, share: float, seed: int = 0) -> list[str]:
    """The texts of ``items`` (walk, topic name, text) with a seeded ``share`` of them worded by :func:`typed` (one
    draw each, in order, from ``seed + TYPE_SEED``; a walk whose range has no noun keeps its text). ``nouns`` None
    or ``share`` 0: the texts as they are. The relplan stage and ``bench/planner_dev.py`` word alike through it."""
    if not nouns or share <= 0:
        return [t for _, _, t in items]
    rng = np.random.default_rng(seed + TYPE_SEED)
    out = []
    for walk, topic, text in items:
        take = rng.random() < share
        noun = nouns.get(answer_types.end_key(walk)) if take else None
        out.append(typed(walk, topic, relation_names, noun) if noun else text)
    return out


def draw(adj: Adjacency, topic_sets: Sequence[Sequence[int]], names: Callable[[np.ndarray], Sequence[str]],
         relation_names: Sequence[str], n: int, seed: int = 0, back: frozenset = frozenset(),
         max_ends: int = MAX_ENDS) -> list[Pseudo]:
    """Up to ``n`` pseudo-questions: the topic sets are taken in a seeded order; from each, a length is drawn
    uniformly among those with a sequence that reaches 1..``max_ends`` entities besides the topics, then one such
    sequence uniformly (in sorted order); its text is :func:`verbalise`'s from the first topic's name, its answers the entities it
    reaches. A topic set with no such sequence is passed over. ``names(ids)``: entity names by id."""
    rng = np.random.default_rng(seed)
    out: list[Pseudo] = []
    for i in rng.permutation(len(topic_sets)).tolist():
        if len(out) >= n:
            break
        topics = np.unique(np.asarray([x for x in topic_sets[i] if x is not None and 0 <= x < adj.n], np.int64))
        if not len(topics):
            continue
        cands = walks(adj, topics, back=back)
        by_len: dict[int, list] = {}
        for s, e in sorted(cands.items()):  # by sequence (relation id, then direction): the draw's order
            k = int((~np.isin(e, topics)).sum())
            if 0 < k <= max_ends:
                by_len.setdefault(len(s), []).append(s)
        if not by_len:
            continue
        k = sorted(by_len)[int(rng.integers(len(by_len)))]
        walk = by_len[k][int(rng.integers(len(by_len[k])))]
        gold = cands[walk][~np.isin(cands[walk], topics)]
        seqs = tuple(cands)

        def share(e: np.ndarray) -> float:
            ends = e[~np.isin(e, topics)]
            ends = ends if len(ends) else e
            return float(np.isin(ends, gold).sum()) / max(len(ends), 1)

        topic_names = tuple(str(x) for x in names(topics))
        out.append(Pseudo(text=verbalise(walk, topic_names[0], relation_names), topic_names=topic_names, walk=walk,
                          seqs=seqs, ends=tuple(cands[s] for s in seqs),
                          p=np.asarray([share(cands[s]) for s in seqs], dtype=np.float64)))
    return out


def fit_smooth(groups: Sequence[tuple[float, Sequence[tuple[np.ndarray, np.ndarray]]]],
               lam: float = LAMBDA, fixed: dict[int, float] | None = None,
               prior: np.ndarray | None = None) -> np.ndarray:
    """Weights of :data:`~kgrag.index.zeroshot.FEATURES` maximizing each question's expected score under a
    softmax over its candidates (``softmax(f @ w) @ p``, the smooth form of "the share of answers at the end of the
    chosen sequence"), with an L2 penalty ``lam`` on the weights scaled by each feature's standard deviation over
    the candidates, by L-BFGS from zero: deterministic, no seed, no start that a KG chose.

    ``groups``: (its share of the objective, its questions as (features: candidates x features, p: each
    candidate's score)) pairs; a question with one candidate teaches nothing and is left out. ``fixed``: feature
    index -> a weight kept as given (its column a constant offset of each score, not fitted). ``prior``: weights the
    fit starts from and is penalised towards (``lam`` on the spread-scaled difference) instead of zero."""
    from scipy.optimize import minimize
    from scipy.special import logsumexp

    data = [(share, [(np.asarray(f, np.float64), np.asarray(p, np.float64)) for f, p in qs if len(p) > 1])
            for share, qs in groups]
    rows = [f for _, qs in data for f, _ in qs]
    if not rows:
        raise ValueError("fit_smooth: no question with two candidates or more")
    std = np.vstack(rows).std(axis=0)
    std[std == 0] = 1.0

    fixed = dict(fixed or {})
    free = np.asarray([j not in fixed for j in range(len(zeroshot.FEATURES))])
    base = np.zeros(len(zeroshot.FEATURES)) if prior is None else np.asarray(prior, np.float64).copy()
    for j, v in fixed.items():
        base[j] = v

    def loss(u):
        u = np.where(free, u, 0.0)
        w = u / std + base
        total, grad = 0.0, np.zeros_like(u)
        for k, qs in data:
            for f, p in qs:
                z = f @ w
                pr = np.exp(z - logsumexp(z))
                e = float(pr @ p)
                total -= k * e / len(qs)
                grad -= k * (f.T @ (pr * (p - e))) / len(qs)
        return total + lam * float(u @ u), np.where(free, grad / std + 2 * lam * u, 0.0)

    # features that only say "more is better" (ll, support, count, cue, type, order) keep a weight >= 0: a fit
    # that rewards an unsaid step or a wrong answer type has learnt the pseudo-questions' wording, not a reading
    lo = [(-base[j] * std[j] if (free[j] and zeroshot.FEATURES[j] in NONNEGATIVE) else None)
          for j in range(len(zeroshot.FEATURES))]
    u = minimize(loss, np.zeros(len(zeroshot.FEATURES)), jac=True, method="L-BFGS-B",
                 bounds=[(a, None) for a in lo]).x
    return np.where(free, u / std, 0.0) + base


def fit_weights(pseudos: Sequence[Pseudo], *, relation_names: Sequence[str], vecs: zeroshot.PhraseVectors,
                entity_vectors: Callable[[np.ndarray], np.ndarray] | None, keep: Sequence[str] = KEEP,
                prior: float = PRIOR_LAM, relation_aliases: Sequence | None = None,
                end_types: Callable | None = None, wordnet: "wn.Matcher | None" = None,
                base: zeroshot.Weights | None = None, type_nouns: Callable | None = None
                ) -> tuple[zeroshot.Weights, dict]:
    """The planner's weights fitted on ``pseudos`` (:func:`fit_smooth`, rounded to :data:`DECIMALS`; the features
    in ``keep`` at their shipped weights; ``prior`` > 0: from and towards the shipped weights with that lam, 0: from
    zero with :data:`LAMBDA`, the KG's pseudo-questions alone), and what the fit saw: pseudo-questions, their
    lengths, and the expected score of the first choice on them under the shipped weights and under the fitted ones
    (in-sample: how far the fit moved, not a held-out figure). ``relation_aliases``: the relations' other names, read
    as :func:`kgrag.index.zeroshot.features` reads them in relpath; ``end_types``: the answer type from relations'
    range samples, as relpath's default reads it on a large KG (:func:`kgrag.index.answer_types.range_types`);
    ``wordnet``: WordNet's links as word matches (``relplan.wordnet``), as relpath reads them with the plan, and
    ``type_nouns`` the answer-type nouns that come with them (:func:`kgrag.index.answer_types.wordnet_noun_types`);
    ``base``: the weights in place of the shipped ones (``relplan.base_weights``)."""
    rows = []
    for q in pseudos:
        f = zeroshot.features(question=q.text, topic_names=q.topic_names, seqs=q.seqs, ends=q.ends,
                              relation_names=relation_names, vecs=vecs, entity_vectors=entity_vectors,
                              relation_aliases=relation_aliases, end_types=end_types, wordnet=wordnet,
                              type_nouns=type_nouns)
        rows.append((f, q.p))
    shipped = base or zeroshot.Weights()
    w = np.round(fit_smooth([(1.0, rows)], lam=prior if prior > 0 else LAMBDA,
                            fixed={zeroshot.FEATURES.index(k): getattr(shipped, k) for k in keep},
                            prior=shipped.vector() if prior > 0 else None), DECIMALS)
    weights = zeroshot.Weights(**{k: float(v) for k, v in zip(zeroshot.FEATURES, w)})

    def first(wv: np.ndarray) -> float:
        return round(float(np.mean([p[int(np.argmax(f @ wv))] for f, p in rows])), 4)

    stats = {"pseudo_questions": len(pseudos),
             "pseudo_by_hops": {str(k): sum(len(q.walk) == k for q in pseudos)
                                for k in sorted({len(q.walk) for q in pseudos})},
             "pseudo_score_shipped": first(shipped.vector()), "pseudo_score_fitted": first(w),
             "weights": dict(zip(zeroshot.FEATURES, w.tolist()))}
    return weights, stats


def vocabulary_nouns(kg: KGView, vecs: zeroshot.PhraseVectors, entity_vectors: np.ndarray | None
                     ) -> tuple[dict[Step, str] | None, str]:
    """:func:`type_nouns` of ``kg``'s relations, from WordNet's class nouns (:func:`kgrag.index.wordnet.
    class_nouns`, encoded by ``vecs``) and the relations' range samples (``entity_vectors``: the index's), with a
    note on what was read; None (and why) where WordNet's files, the entity vectors or range samples are missing."""
    if entity_vectors is None or not len(entity_vectors) or not hasattr(kg, "range_sample"):
        return None, "typed wording: off (no entity vectors or range samples)"
    try:
        nouns = wordnet_type_nouns(answer_types.range_means(kg, entity_vectors), kg.relation_names, vecs)
    except FileNotFoundError:
        return None, "typed wording: off (WordNet's files not found; make install provides them)"
    return nouns, f"typed wording: {len(nouns)} ranges named from {len(wn.class_nouns())} WordNet class nouns"


def wordnet_type_nouns(means: dict[Step, np.ndarray], relation_names: Sequence[str],
                       vecs: Callable[[list[str]], np.ndarray]) -> dict[Step, str]:
    """:func:`type_nouns` over WordNet's class nouns (:func:`kgrag.index.wordnet.class_nouns`, encoded by
    ``vecs``), for range ``means`` from a store (:func:`kgrag.index.answer_types.range_means`) or from arrays (the
    dev harness); FileNotFoundError without WordNet's files."""
    vocab = wn.class_nouns()
    return type_nouns(means, relation_names, vocab, vecs(list(vocab)))


def fit_for_kg(kg: KGView, encode: Callable[[list[str]], np.ndarray] | None, pairs: dict[str, str],
               topic_sets: Sequence[Sequence[int]], n: int, seed: int = 0, *, entity_vectors: np.ndarray | None = None,
               over_budget: bool = False, own_graphs: bool = False, types: float = TYPE_SHARE,
               prior: float = PRIOR_LAM, wordnet: "wn.Matcher | None" = None, base: zeroshot.Weights | None = None
               ) -> tuple[zeroshot.Weights | None, dict]:
    """The zero-shot planner's weights fitted on ``n`` pseudo-questions of ``kg`` (the relplan stage's ``source:
    kg``), and what the fit saw (:func:`fit_weights`). ``encode`` embeds relation phrases and question texts (the
    index's model); ``entity_vectors`` (row = entity id), where there are any, give the planner its entity
    feature, as the index's do in relpath (from relations' range samples on a KG where relpath's default reads them
    so: :func:`kgrag.index.answer_types.range_types`, auto). The walks skip the mirrors of ``pairs``
    (:func:`~kgrag.index.relplan.mirror_pairs`) and walk their relations back; they start from ``topic_sets``
    (the held-out questions' linked topics; where none links, a seeded sample of the KG's entities, ten for each
    pseudo-question). A ``types`` share of them is worded by its answer type (:func:`type_wording`, where the
    entity vectors and WordNet's nouns are there); ``prior``, ``wordnet``, ``base``: :func:`fit_weights`'. No answer
    is read.

    None are drawn (the shipped weights, and a note that says why) for a KG ``over_budget`` (the walks read the
    whole adjacency in memory) or for questions that bring their ``own_graphs`` (the walks would cross the
    evaluated KG, not the graphs they are asked on)."""
    if over_budget or own_graphs:
        why = "the KG is over the memory budget" if over_budget else "the questions bring their own graphs"
        return None, {"pseudo_questions": 0, "pseudo_note": f"not drawn: {why}; the base weights"}
    skip, back = mirror_ids(kg.relation_names, pairs)
    adj = adjacency(kg, skip)
    sets = [t for t in topic_sets if any(x is not None for x in t)]
    if not sets:
        rng = np.random.default_rng(seed)
        sets = [[int(x)] for x in rng.choice(kg.num_entities, size=min(10 * n, kg.num_entities), replace=False)]
    drawn = draw(adj, sets, kg.names, kg.relation_names, n, seed=seed, back=back)
    if not drawn:
        return None, {"pseudo_questions": 0, "pseudo_note": "no walk of 1-3 steps found; the base weights"}
    ent = entity_vectors
    vecs = zeroshot.PhraseVectors(encode)
    nouns, note = vocabulary_nouns(kg, vecs, ent) if types > 0 else (None, "typed wording: off (pseudo_types 0)")
    texts = type_wording([(q.walk, q.topic_names[0], q.text) for q in drawn], kg.relation_names, nouns, types, seed)
    typed_n = sum(t != q.text for t, q in zip(texts, drawn))
    drawn = [replace(q, text=t) for q, t in zip(drawn, texts)]
    weights, stats = fit_weights(drawn, relation_names=kg.relation_names, vecs=vecs,
                                 entity_vectors=(lambda ids: ent[ids]) if ent is not None and len(ent) else None,
                                 relation_aliases=getattr(kg, "relation_aliases", None),
                                 end_types=answer_types.range_types(kg, ent, "auto"), prior=prior, wordnet=wordnet,
                                 base=base, type_nouns=answer_types.wordnet_noun_types(kg, ent, vecs)
                                 if wordnet is not None else None)
    return weights, {**stats, "pseudo_typed": typed_n, "pseudo_types_note": note}
