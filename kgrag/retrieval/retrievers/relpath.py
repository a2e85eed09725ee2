"""``relpath``: relation-path retrieval, a beam over relation sequences scored against the question.

MetaQA-style k-hop questions name a chain of relations ("the directors of the films written by the writer
of [X]"). Instead of cutting the k-hop neighbourhood (whose last hop, the one holding the answers, is the
one a size cap cuts), this retriever grows relation sequences from the topic entities one hop at a time,
scores each sequence's text (its relation names, in order) against the question with the ``st`` scorer,
keeps the ``beam`` best, and returns the triples of the best sequence(s) of any length 1..``max_hops``,
walked back from their end nodes so that no dead-end branch is kept. The question's hop count is not read:
only with ``retrieve.oracle_hops`` (the question file's declared count handed to the retriever) are the
sequences exactly that long.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field, replace
from functools import partial
from itertools import chain, zip_longest

import numpy as np
from typing import Literal

from pydantic import Field, field_validator, model_validator

from kgrag import arrays
from kgrag import ranking

from kgrag.config.base import Strict
from kgrag.index import answer_types, relplan, zeroshot
from kgrag.kg.groups import EdgeGroups, group_keys, split_keys
from kgrag.retrieval.lego.registries import SCORERS
from kgrag.retrieval.lego.types import Context
from kgrag.registry import RETRIEVERS
from kgrag.types import Subgraph


class RelPathParams(Strict):
    """Params of the ``relpath`` retriever."""

    beam: int = Field(8, ge=1, description="relation sequences kept after each hop")
    paths: int = Field(5, ge=1, description="best full-length sequences whose triples are returned, best first, "
                       "until max_triples (module default 5, for the zero-shot ranking; 1 with the plan: "
                       "docs/retrieval.md)")
    max_triples: int = Field(100, ge=1, description="triples returned at most (the last hop's first)")
    max_frontier: int = Field(20_000, ge=1, description="nodes a sequence may reach per hop (hub guard)")
    hub_edges: int | None = Field(
        100, ge=1, description="hub sampling (ToG's entity sampling): a node with more than hub_edges edges of one "
        "relation in one direction gives a step a seeded sample of hub_edges of them, found from per-(node, relation, "
        "direction) counts without reading the rest; null = every edge (off). 100 since 2026-12-03: 12.6x faster at "
        "10M triples with no answer lost, MetaQA's retrieved triples unchanged (docs/scale.md, \"relpath at hubs\")")
    hub_budget: int = Field(
        10_000, ge=0, description="hub sampling applies to a step whose frontier's groups hold more than hub_budget "
        "edges in all; a step under it reads every edge: its work is small, and a sample there only drops answers "
        "(WorldCup2014's positions, 161-249 players each: two-topic Hit@1 0.89 with 0, 0.99 with 10000 on dev; "
        "docs/scale.md). 0 = every group over hub_edges is sampled (before 2026-12-04)")
    hub_seed: int = Field(0, ge=0, description="seed of the hub_edges sample: the same node, relation and direction "
                          "give the same sample in every step, sequence and question")
    answer_type: Literal["auto", "ends", "relation"] = Field(
        "auto", description="what the zero-shot planner's answer-type feature reads: ends = the names of up to 32 "
        "entities each candidate sequence reaches (a new KG's first run encodes them as they are met: most of a "
        "cold question's time at 1M triples); relation = the names of its last relation's range sample (32 entities "
        "that relation reaches anywhere in the KG, seeded, encoded once per KG: on dev, PathQuestion-Large's first-end "
        "Hit@1 0.93 -> 0.91, WorldCup2014's the same); auto = relation on a KG of 5M triples or more "
        "(kgrag.index.answer_types), else ends; questions with their own graphs read ends (docs/scale.md)")
    inverse: Literal["plain", "of", "shares"] = Field(
        "plain", description="how a step against an edge's direction is written in the scored text: plain = "
        "the relation alone, of = 'r of', shares = 'shares r with'")
    plan: str | None = Field(
        None, description="folder of a relation-path plan learnt from a held-out split (kgrag.index.relplan), e.g. "
        "data/relplan written by `dvc repro relplan`; None = zero-shot (cosine of question and relation names alone; "
        "the module default)")
    max_hops: int = Field(3, ge=1, le=4, description="longest relation sequence walked; the best sequence of any "
                          "length 1..max_hops is returned (a question's declared hop count is used instead only "
                          "with retrieve.oracle_hops)")
    plan_k: int = Field(16, ge=1, description="nearest training questions that vote for a sequence")
    plan_weight: float = Field(30.0, ge=0.0, description="weight of the plan's vote share (0..1) added to the "
                               "base score (lexical: log-likelihood units, 30 chosen on dev; base scorer: a cosine, "
                               "where 1.0 was used)")
    base: Literal["lexical", "scorer"] = Field(
        "lexical", description="the score a sequence gets before the plan's vote: lexical = the zero-shot planner of "
        "kgrag.index.zeroshot (word-to-relation alignment, mention counts, sharing words, the answer type of the "
        "ends; plus the plan's lexicon when labelled questions trained it); scorer = the cosine (or other `scorer`) "
        "of the question and the sequence's relation names")
    lexicon_weight: float = Field(1.0, ge=0.0, description="base lexical: weight of the plan's lexicon (what "
                                  "labelled questions say about each relation's wording) in the word likelihood")
    rescore: bool = Field(True, description="base lexical: the final choice across lengths re-scores every kept "
                          "sequence in one call (as bench/planner_dev.py scores a question's sequences together), "
                          "instead of reading each one's score from its own hop, where the planner's mention count and "
                          "order were read beside that hop's candidates alone; false = the rule before 2026-12-05 "
                          "(on dev: leave-one-KG-out PQL 2H 0.739 -> 0.810, no dev figure lower; docs/retrieval.md)")
    fill_graph: bool = Field(True, description="a question with its own graph (RoG-style per-question graphs): "
                             "after the chosen sequences' triples, the rest of the graph in graph_order (then the triples the "
                             "topics do not reach) up to graph_max_triples, so that answers the plan misses stay in the "
                             "context; the chosen sequences' ends stay the answer candidates")
    graph_order: Literal["sequences", "interleave", "distance"] = Field(
        "distance", description="fill_graph: the order of the rest of the graph: sequences = the other kept "
        "sequences' triples first, best sequence first, then the rest closest first; interleave = the same "
        "triples, one of each sequence in turn (each sequence's last hop first); distance = closest to the "
        "topics first (chosen on dev: docs/benchmarks.md)")
    graph_max_triples: int = Field(1000, ge=1, description="fill_graph: triples a question's own graph keeps at "
                                   "most (the chosen sequences' first; the prompt still shows "
                                   "generate.max_context_triples of them)")
    intersect: bool = Field(True, description="a question with two or more topic entities: walk from each of the "
                            "first two alone and answer at the intersection of the best pair of walks whose ends meet "
                            "('which player in X is from Y'); when no pair meets, the walk from all topics together")
    scorer: str = Field(
        "st", description="with base: scorer, what scores a sequence's text against the question (a registered LEGO scorer): st = "
        "the index's sentence transformer (cosine); loglik = the LLM's log-likelihood of the sequence as the "
        "reply to the question (a zero-shot LLM planner, RoG / GCR style; `llm` below); the plan's votes are "
        "added to either")
    scorer_params: dict = Field(
        default_factory=dict, description="base scorer: the scorer's params (e.g. loglik: {normalize: mean}); {} = its "
        "defaults")
    llm: dict = Field(
        default_factory=dict, description="base scorer: the LLM of scorer loglik: retrieve.lego.llm's keys (backend, "
        "backend_params, cache, ...); {} = the embedded llamacpp model")
    fallback: str | None = Field(
        "khop", description="retriever (its default params) for a question with no relation sequence to walk: no "
        "topic entity in the KG, or no edge from the topics to another node (e.g. ExplaGraphs, whose topics are "
        "every node of the question's graph: khop gives the graph whole); None = an empty subgraph")


    @field_validator("scorer")
    @classmethod
    def _known_scorer(cls, v: str) -> str:
        from kgrag.registry import UnknownModuleError

        try:
            SCORERS.get(v)
        except UnknownModuleError as e:  # a ValueError for pydantic: the params error names file, line, key
            raise ValueError(str(e)) from None  # the message lists the registered scorers
        return v

    @model_validator(mode="after")
    def _scorer_params(self) -> "RelPathParams":
        from pydantic import ValidationError

        if self.base == "lexical" and (self.scorer != "st" or self.scorer_params or self.llm):
            set_ = ", ".join(k for k, v in (("scorer", self.scorer != "st"), ("scorer_params", self.scorer_params),
                                            ("llm", self.llm)) if v)
            raise ValueError(f"{set_} set, but base is lexical (the zero-shot planner), which reads no scorer: set "
                             "base: scorer to score the sequences with it, or leave them out")
        try:
            SCORERS.get(self.scorer).params.model_validate(self.scorer_params)  # extra="forbid": typos named
        except ValidationError as e:
            err = e.errors()[0]
            raise ValueError(f"scorer_params.{'.'.join(map(str, err['loc']))}: {err['msg']} (scorer "
                             f"{self.scorer}: {', '.join(SCORERS.get(self.scorer).params.model_fields)})") from None
        return self

    @field_validator("llm")
    @classmethod
    def _llm_settings(cls, v: dict) -> dict:
        from kgrag.llm.clients import LLMSettings

        LLMSettings(**v)  # the same keys and checks as retrieve.lego.llm
        return v


INVERSE = {"plain": "{}", "of": "{} of", "shares": "shares {} with"}


def _seq_text(kg, seq: tuple[tuple[int, bool], ...], inverse: str = "plain") -> str:
    """A sequence's text: its relation names as words, in walking order; a step walked against the edge's
    direction is written with the ``inverse`` template."""
    words = [str(kg.relation_names[r]).replace("_", " ").replace(".", " ") for r, _ in seq]
    return ", ".join(w if fwd else INVERSE[inverse].format(w) for w, (_, fwd) in zip(words, seq))


def _step(kg, frontier: np.ndarray, graph_id, skip: frozenset, max_frontier: int, hub_edges: int | None = None,
          hub_seed: int = 0, stats: dict | None = None, hub_budget: int = 0):
    """One hop from ``frontier``: {(relation, forward): (edges, from-nodes, to-nodes)}. Every node may be reached
    again, the topics too (a path may revisit an entity: children, then parents, then children); relations in
    ``skip`` (mirrors of another relation, :func:`kgrag.index.relplan.mirrored_relations`) are not walked. With
    ``hub_edges``, a node's edges of one relation and direction beyond ``hub_edges`` are sampled when the step's
    groups hold more than ``hub_budget`` edges in all (:func:`_step_sampled`; ``stats`` counts the edges read and
    the groups sampled)."""
    if hub_edges is not None:
        return _step_sampled(kg, frontier, graph_id, skip, max_frontier, hub_edges, hub_seed, stats, hub_budget)
    nb = kg.question_neighbourhood(frontier, 1, 10**9, graph_id=graph_id)
    e = np.asarray(nb.edges, dtype=np.int64)
    h, r, t = kg.heads[e], kg.relations[e], kg.tails[e]
    out = {}
    for fwd, mask in ((True, np.isin(h, frontier)), (False, np.isin(t, frontier))):
        src, dst = (h, t) if fwd else (t, h)
        idx = np.flatnonzero(mask)
        idx = idx[np.argsort(r[idx], kind="stable")]  # by relation, edge order kept within one
        rs = r[idx]
        for a, b in arrays.runs(rs):
            if int(rs[a]) in skip:
                continue
            sel = idx[a:b]
            if len(arrays.unique(dst[sel])) <= max_frontier:
                out[(int(rs[a]), fwd)] = (e[sel], src[sel], dst[sel])
    return out


def _hub_sample(n: int, k: int, seed: int, node: int, relation: int, fwd: bool) -> np.ndarray:
    """The positions (sorted) of the ``k`` of a hub's ``n`` edges of one relation and direction (by edge id) that a
    step keeps: a draw seeded by (seed, node, relation, direction) alone, so the same in every step and question."""
    return np.sort(np.random.default_rng([seed, node, relation, int(fwd)]).choice(n, k, replace=False))


_GROUPS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # store -> its EdgeGroups


def _groups_of(kg, graph_id) -> EdgeGroups | None:
    """The KG's :class:`~kgrag.kg.groups.EdgeGroups` for a global-KG question on a KG without per-question graphs: the
    DuckDB store's, memory-mapped from disk (``edge_groups``); on a KG held as arrays, built on first use and kept
    while the store lives (a sort of 2 x triples keys; 8-12 bytes per edge end held); None elsewhere (the step then
    groups the edges it fetched)."""
    if graph_id is not None or kg.has_graphs:
        return None
    if hasattr(kg, "edge_groups"):
        return kg.edge_groups()
    if not isinstance(getattr(kg, "heads", None), np.ndarray):
        return None
    if kg not in _GROUPS:
        _GROUPS[kg] = EdgeGroups.from_arrays(kg.heads, kg.relations, kg.tails, len(kg.relation_names))
    return _GROUPS[kg]


def _step_sampled(kg, frontier: np.ndarray, graph_id, skip: frozenset, max_frontier: int, hub_edges: int,
                  hub_seed: int, stats: dict | None, hub_budget: int = 0) -> dict:
    """``_step`` with hub sampling: where the frontier's groups hold more than ``hub_budget`` edges in all, each
    (node, relation, direction) group of the frontier's edges with more than ``hub_edges`` edges keeps the
    :func:`_hub_sample` of them (under the budget every edge is kept: the step is cheap either way). The group sizes come first and only the kept edges
    are read, from the KG's :class:`~kgrag.kg.groups.EdgeGroups` (in memory for a KG held as arrays, memory-mapped
    files for the DuckDB store, whose rows also hold the node each edge reaches); on per-question graphs the
    frontier's edges are fetched and grouped the same way. Same groups, same sample, same edges on every path."""
    frontier = arrays.unique(np.asarray(frontier, dtype=np.int64))
    n_rel = len(kg.relation_names)
    groups = _groups_of(kg, graph_id)
    other = None
    if groups is not None:
        at = groups.at(frontier)
        key, lo = np.asarray(groups.keys[at], dtype=np.int64), np.asarray(groups.starts[at], dtype=np.int64)
        hi = np.asarray(groups.starts[at + 1], dtype=np.int64)
        fetch = lambda gi, off: np.asarray(groups.edge[lo[gi] + off], dtype=np.int64)  # noqa: E731
        if groups.other is not None:
            other = lambda gi, off: np.asarray(groups.other[lo[gi] + off], dtype=np.int64)  # noqa: E731
    else:
        nb = kg.question_neighbourhood(frontier, 1, 10**9, graph_id=graph_id)
        e = np.asarray(nb.edges, dtype=np.int64)
        h, r, t = kg.heads[e], kg.relations[e], kg.tails[e]
        fw, bw = np.isin(h, frontier), np.isin(t, frontier)
        ek = group_keys(np.concatenate([h[fw], t[bw]]), np.repeat([0, 1], [int(fw.sum()), int(bw.sum())]),
                        np.concatenate([r[fw], r[bw]]), n_rel)
        ee = np.concatenate([e[fw], e[bw]])
        order = np.lexsort((ee, ek))
        ek, ee = ek[order], ee[order]
        first = np.flatnonzero(np.concatenate([[True], ek[1:] != ek[:-1]])) if len(ek) else np.zeros(0, np.int64)
        key, lo, hi = ek[first], first, np.append(first[1:], len(ek)).astype(np.int64)
        fetch = lambda gi, off: ee[lo[gi] + off]  # noqa: E731
    (node, fwd, rel), n = split_keys(key, n_rel), hi - lo
    sel = np.flatnonzero(~np.isin(rel, np.fromiter(skip, dtype=np.int64, count=len(skip))))
    # which edges each kept group gives: all of a group of at most hub_edges, the hub sample of a larger one, as
    # (group, position in the group's edge-id order)
    small = (n[sel] <= hub_edges) | (int(n[sel].sum()) <= hub_budget)
    off = [arrays.ranges(np.zeros(int(small.sum()), dtype=np.int64), n[sel][small])]
    gi = [np.repeat(sel[small], n[sel][small])]
    big = sel[~small]
    for i in big.tolist():
        off.append(np.asarray(_hub_sample(int(n[i]), hub_edges, hub_seed, int(node[i]), int(rel[i]), bool(fwd[i])),
                              dtype=np.int64))
        gi.append(np.full(hub_edges, i, dtype=np.int64))
    gi, off = np.concatenate(gi), np.concatenate(off)
    e = fetch(gi, off)
    dst = other(gi, off) if other is not None else np.where(fwd[gi], kg.tails[e], kg.heads[e])
    if stats is not None:
        stats["edges"] = stats.get("edges", 0) + len(e)
        stats["sampled"] = stats.get("sampled", 0) + len(big)
    out = {}
    sk = rel[gi] * 2 + (~fwd[gi])  # by (relation, direction), then node, then edge id
    src = node[gi]
    order = np.lexsort((e, src, sk))
    sk, e, src, dst = sk[order], e[order], src[order], dst[order]
    for a, b in arrays.runs(sk):
        if len(arrays.unique(dst[a:b])) <= max_frontier:
            out[(int(sk[a] // 2), bool(sk[a] % 2 == 0))] = (e[a:b], src[a:b], dst[a:b])
    return out


def _walk_back(steps: list, ends: np.ndarray) -> list[int]:
    """The edges of a walk's ``steps`` ((edges, from-nodes, to-nodes) per hop) that lead to ``ends``, walked back
    from them so that no dead-end branch is kept: the last hop's edges first, each hop's by edge id."""
    out, keep = [], ends
    for e, src, dst in reversed(steps):
        sel = np.isin(dst, keep)
        out += np.sort(e[sel]).tolist()
        keep = arrays.unique(src[sel])
    return out


def _co_step(seq: tuple, step: tuple, left: np.ndarray, back: frozenset) -> tuple | None:
    """A relation walked back right after it was walked (a co-step: "films that share a director with X") under
    :func:`kgrag.index.relplan.co_step_mask`: it does not return to the nodes it left, ``left`` (unless its relation
    is walked back by a skipped mirror, ``back``), and where it reaches nothing else it is None, no candidate: such a
    walk ends where it began (the topic again, "players from Spain" back to Spain), and a longer walk through it
    repeats a shorter one (on dev it won 53 of 300 WorldCup2014 questions, none rightly: docs/retrieval.md)."""
    e, src, dst = step
    keep = relplan.co_step_mask(seq, dst, left, back)
    return None if keep is None else (e[keep], src[keep], dst[keep])


def _shared_answer(question, topics: np.ndarray, search, base_scores, params) -> tuple | None:
    """The best pair of sequences, one from each of the question's first two topics, whose ends meet: (score,
    (sequence a, its steps), (sequence b, its steps), the shared ends); None when no pair meets. A question that
    names two entities and asks what they share ("which player in Tigres_UANL is from Mexico") is answered at
    the intersection of a walk from each. Pairs are scored as one sequence (both walks' steps, a separator
    between them, the shared ends as its ends); a pair that meets is preferred to a walk from both topics together
    (which answers with everything either topic reaches), since each topic anchors its own walk."""
    # plain walks only: a co-step ("players who share a country with the forwards") reaches nearly every entity of
    # its kind, so two such walks meet almost everywhere
    (ka, _, _), (kb, _, _) = search(topics[:1]), search(topics[1:2])
    ka = {x: v for x, v in ka.items() if not any(u[0] == "co" for u in zeroshot.units(x))}
    kb = {x: v for x, v in kb.items() if not any(u[0] == "co" for u in zeroshot.units(x))}
    if not ka or not kb:
        return None
    ends_a = {x: arrays.unique(st[-1][2]) for x, st in ka.items()}
    ends_b = {x: arrays.unique(st[-1][2]) for x, st in kb.items()}
    pairs, shared = [], []
    for a in sorted(ka):
        for b in sorted(kb):
            both = np.intersect1d(ends_a[a], ends_b[b], assume_unique=True)
            both = both[~np.isin(both, topics)]
            if len(both):
                pairs.append((a, b))
                shared.append(both)
    if not pairs:
        return None
    scores = base_scores([a + (SEPARATOR,) + b for a, b in pairs], shared)
    i = int(ranking.top_k(scores, 1, decimals=ranking.COSINE_DECIMALS)[0])
    a, b = pairs[i]
    return float(scores[i]), (a, ka[a]), (b, kb[b]), shared[i]


#: the step between a pair's two walks when they are scored as one sequence (no relation)
SEPARATOR = (-1, True)

_VECS: dict[str, zeroshot.PhraseVectors] = {}
_NOUNS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # store -> {index model: its answer-type nouns}


def _phrase_vectors(index) -> zeroshot.PhraseVectors:
    """The index model's phrase encoder, one per process and model (words and relation phrases repeat)."""
    key = getattr(index, "model", "")
    if key not in _VECS:
        _VECS[key] = zeroshot.PhraseVectors(index.encode)
    return _VECS[key]


def _type_nouns(kg, index, ent):
    """The answer-type nouns of ``kg``'s ranges for the planner with WordNet on
    (:func:`kgrag.index.answer_types.wordnet_noun_types`), once per store and index model in a process; WordNet's
    class nouns through the vector cache where the model has one (a packaged model), else the phrase encoder."""
    per = _NOUNS.setdefault(kg, {})
    key = getattr(index, "model", "")
    if key not in per:
        from kgrag.index.entity_vectors import model_key, shared_cache

        of = shared_cache(key).get if key and model_key(key) else _phrase_vectors(index)
        per[key] = answer_types.wordnet_noun_types(kg, ent, of)
    return per[key]


@RETRIEVERS.register("relpath", params=RelPathParams, version="16")
def retrieve_relpath(*, question, query_vec, kg, index, params: RelPathParams, hops, max_edges) -> Subgraph:
    """Beam search over relation sequences from the topics; the triples of the best one(s), of any length.

    Sequences grow one hop at a time up to ``max_hops``; after each hop the ``beam`` best are kept. A sequence's
    base score is, with ``base: lexical`` (default), the zero-shot planner of :mod:`kgrag.index.zeroshot`
    (how well the question's words align with the sequence's relations, one mention per step, sharing words for a
    relation walked there and back, the answer type of the entities it reaches; with a learnt plan, also its
    lexicon of what labelled questions say about each relation), or with ``base: scorer`` the cosine of the
    question and the sequence's relation names (the ``st`` scorer with the index's model). With a learnt plan
    (``params.plan``, :mod:`kgrag.index.relplan`), ``plan_weight`` x the share of the ``plan_k`` nearest training
    questions (topic names masked) whose label starts with the sequence is added while growing, and the share
    whose label *is* the sequence at the final choice across lengths (comparable across lengths: every training
    question votes with its own label's length); rounded and tie-broken by sequence (``kgrag.ranking``). Nodes
    may be revisited, the topics too, except that a co-step (a relation walked back right after it was walked:
    "films that share a director with X") does not return to the nodes it left, and is no candidate where it
    reaches nothing else (:func:`_co_step`);
    relations the plan found to mirror another (``r_inverse``) are not walked. With ``hub_edges`` (ToG's entity
    sampling), a node's edges of one relation and direction beyond ``hub_edges`` are a seeded sample in every step
    that would read more than ``hub_budget`` edges (:func:`_step_sampled`), which bounds what a hub costs a step;
    the trace then counts them.
    A question with a declared hop count (``question.hops``: set only with ``retrieve.oracle_hops``) gets
    sequences of exactly that length and votes of that hop count's training questions alone. ``hops`` and
    ``max_edges`` bound nothing here (the beam bounds the work): they are passed on to the ``fallback``
    retriever, called with its default params when there is no sequence to walk, and leave the cache key when
    it does not read them (``fallback: null``, :func:`_reads_neighbourhood`).

    The trace names the chosen sequences and lists ``ends``: the entity ids the best sequences end at (best
    sequence first, each sequence's by id, a topic entity after the others and only when a sequence ends at
    nothing else; those of the returned triples only), the answer candidates of the ``rank`` reasoner's
    ``candidates: ends``.

    References
    ----------
    Cao et al., LEGO-GraphRAG (2024), section 4.1 "Iterative Path-Filtering" (beam search with a semantic
    scorer), here over relation sequences as in Luo et al., Reasoning on Graphs (RoG, ICLR 2024) relation
    paths; the learnt plan is RoG's planning step (section 4.2) as a nearest-neighbour vote over weakly labelled
    training questions; the zero-shot base score is IBM model 1 alignment (Brown et al. 1993) with answer-type
    and mention-count constraints (:mod:`kgrag.index.zeroshot`).
    """
    topics = arrays.unique(np.asarray([t for t in question.topic_ids if 0 <= t < kg.num_entities], dtype=np.int64))
    fallback = partial(_fallback, question=question, query_vec=query_vec, kg=kg, index=index, params=params,
                       hops=hops, max_edges=max_edges)
    if not len(topics):
        return fallback("no topic entity in the KG")
    declared = int(question.hops) if question.hops else None  # only with retrieve.oracle_hops
    topic_names = kg.names(topics)
    plan = _plan_for(question, kg, index, params, declared, topic_names)
    base_scores = _base_scorer(question, query_vec, kg, index, params, plan, topic_names)
    hubs: dict = {}  # hub_edges: edges the steps read, groups sampled

    def search(start: np.ndarray) -> tuple[dict, dict, dict]:
        return _beam(start, kg, question, params, plan, base_scores, declared, hubs)

    kept, base, beam = search(topics)
    if not kept:
        if declared is not None and beam and beam != {(): []}:  # shorter than declared: the longest reached
            kept = beam
    if not kept or (len(topics) > 1 and all(np.isin(st[-1][2], topics).all() for st in kept.values())):
        # not one step from the topics to another node (ExplaGraphs: every node of the graph is a topic); one
        # topic that only reaches itself (a self-loop: a recording of a recording of X) is answered by itself
        return fallback("no relation sequence from the topic entities to another node")
    order = sorted(kept)
    final = _final_scores(order, kept, base, base_scores, params, plan, kg)
    chosen = [order[i] for i in ranking.top_k(ranking.rounded(final), params.paths, decimals=ranking.COSINE_DECIMALS)]
    picked = [(kept[x], None) for x in chosen]  # (steps, ends override)
    seqs = [(x,) for x in chosen]  # each picked walk's sequences: one, or a pair that meets
    shared = None
    if params.intersect and len(topics) >= 2 and declared is None:
        shared = _shared_answer(question, topics, search, base_scores, params)
        if shared is not None:
            (a, steps_a), (b, steps_b), ends_ab = shared[1], shared[2], shared[3]
            picked = [(steps_a, ends_ab), (steps_b, ends_ab)]
            seqs = [(a, b)]
    edges, ends = _walked(picked, topics)
    cap = params.max_triples
    edge_list = list(edges)
    if question.graph_id is not None and params.fill_graph:
        cap = max(cap, params.graph_max_triples)
        edge_list = _fill_own_graph(kg, question, params, topics, edges, kept, order, final, chosen, cap)
    eidx = np.asarray(edge_list[:cap], dtype=np.int64)
    h, r, t = kg.heads[eidx], kg.relations[eidx], kg.tails[eidx]
    nodes = arrays.unique(np.concatenate([topics, h, t]))
    returned = set(h.tolist()) | set(t.tolist())
    return Subgraph(
        heads=h, relations=r, tails=t, node_ids=nodes, neighbourhood_nodes=len(nodes),
        neighbourhood_edges=len(edge_list),
        trace={"method": "relpath", "sequences": [" & ".join(_seq_text(kg, x) for x in pair) for pair in seqs],
               "relations": [[str(kg.relation_names[r]) for r, _ in x] for pair in seqs for x in pair],
               "directions": [[int(f) for _, f in x] for pair in seqs for x in pair],
               "intersect": shared is not None and len(picked) == 2 and picked[0][1] is not None,
               "truncated": len(edge_list) > cap,
               "ends": [x for x in ends if x in returned],
               **({"hub_edges_read": hubs.get("edges", 0), "hub_groups_sampled": hubs.get("sampled", 0)}
                  if params.hub_edges is not None else {})},
    )


def _fallback(reason: str, *, question, query_vec, kg, index, params: RelPathParams, hops, max_edges) -> Subgraph:
    """No sequence to walk: ``params.fallback``'s subgraph (with its default params), or an empty one."""
    if params.fallback is None:
        return Subgraph.empty(method="relpath", reason=reason)
    other = RETRIEVERS.get(params.fallback)
    sub = other.impl(question=question, query_vec=query_vec, kg=kg, index=index, params=other.params(),
                     hops=hops, max_edges=max_edges)
    return replace(sub, trace={**sub.trace, "relpath_fallback": params.fallback, "reason": reason})


def _walked(picked: list, topics: np.ndarray) -> tuple[dict[int, None], dict[int, None]]:
    """The picked walks' edges (walked back from their ends) and ends (the topics only where a walk ends at
    nothing else), in order: best sequence first; within one, the last hop (the answers) first."""
    edges: dict[int, None] = {}
    ends: dict[int, None] = {}
    for steps, override in picked:
        keep_nodes = arrays.unique(steps[-1][2]) if override is None else override
        others = keep_nodes[~np.isin(keep_nodes, topics)]
        ends.update(dict.fromkeys((others if len(others) else keep_nodes).tolist()))
        edges.update(dict.fromkeys(_walk_back(steps, keep_nodes)))
    return edges, ends


@dataclass(frozen=True)
class _QuestionPlan:
    """What the learnt plan (``params.plan``) gives one question: the votes of its nearest training questions for
    a sequence's prefix (while growing) and for the whole sequence (the final choice), the mirrored relations not
    walked and those walked back by their mirror, the plan's lexicon and its fitted weights; empty without a plan."""

    prefix: dict = field(default_factory=dict)
    whole: dict = field(default_factory=dict)
    skip: frozenset = frozenset()
    back: frozenset = frozenset()  # relations walked back by their (skipped) mirror: a co-step keeps its return
    lexicon: object = None
    weights: zeroshot.Weights | None = None
    wordnet: bool = False  # the plan's relplan.wordnet: WordNet's links count as word matches


def _plan_for(question, kg, index, params: RelPathParams, declared: int | None, topic_names) -> _QuestionPlan:
    if params.plan is None:
        return _QuestionPlan()
    plan = relplan.load_cached(params.plan)
    if plan.model != index.model:
        raise ValueError(f"retrieve.relpath.plan: {params.plan} was trained with the encoder {plan.model!r}, "
                         f"the index uses {index.model!r}; re-run the relplan stage (`dvc repro relplan`)")
    prefix: dict = {}
    whole: dict = {}
    if len(plan.labels):
        masked = relplan.mask_topics(question.text, topic_names)
        prefix, whole = plan.votes(index.encode([masked])[0], params.plan_k, declared)
    names = {str(n): i for i, n in enumerate(kg.relation_names)}
    return _QuestionPlan(prefix=prefix, whole=whole, skip=frozenset(names[n] for n in plan.mirrors if n in names),
                         back=plan.walked_back(kg.relation_names), lexicon=plan.lexicon, weights=plan.weights,
                         wordnet=plan.wordnet)


def _final_scores(order: list, kept: dict, base: dict, base_scores, params: RelPathParams, plan: _QuestionPlan,
                  kg) -> np.ndarray:
    """The final choice's score of each kept sequence (``order``): its base score, read at its own hop or, with
    ``rescore``, again beside every kept sequence in one call (the planner's mention count and order feature depend
    on the candidates beside it), plus ``plan_weight`` x the plan's vote for the whole sequence."""
    if params.rescore and params.base == "lexical" and len(order) > 1:
        final = np.asarray(base_scores(order, [arrays.unique(kept[x][-1][2]) for x in order]), dtype=np.float64)
    else:
        final = np.asarray([base[x] for x in order], dtype=np.float64)
    if plan.whole:
        final = final + params.plan_weight * np.asarray([plan.whole.get(_named(kg, x), 0.0) for x in order])
    return final


def _named(kg, s: tuple) -> tuple:
    """A sequence as the plan's votes name it: ``((relation name, forward), ...)``."""
    return tuple((str(kg.relation_names[r]), bool(f)) for r, f in s)


def _base_scorer(question, query_vec, kg, index, params: RelPathParams, plan: _QuestionPlan, topic_names):
    """``(sequences, their ends) -> base scores``: the zero-shot planner's (``base: lexical``, with the plan's
    weights where relplan fitted them on the KG's pseudo-questions, else the shipped ones) or the ``scorer``'s
    of the sequences' texts (``base: scorer``)."""
    if params.base == "lexical":
        vecs = _phrase_vectors(index)
        weights = plan.weights or zeroshot.Weights()
        ent = getattr(index, "entity_vectors", None)
        types = answer_types.range_types(kg, ent, params.answer_type)
        links = zeroshot.default_wordnet_matcher() if plan.wordnet else None
        nouns = _type_nouns(kg, index, ent) if plan.wordnet else None

        def lexical(seqs: list, ends: list) -> np.ndarray:
            feats = zeroshot.features(
                question=question.text, topic_names=topic_names, seqs=seqs,
                ends=ends, relation_names=kg.relation_names, vecs=vecs,
                entity_vectors=(lambda ids: ent[ids]) if ent is not None and len(ent) else None,
                lexicon=plan.lexicon, lexicon_weight=params.lexicon_weight,
                relation_aliases=getattr(kg, "relation_aliases", None), end_types=types, wordnet=links,
                type_nouns=nouns)
            return ranking.rounded(zeroshot.scores(feats, weights), ranking.SCORE_DECIMALS)
        return lexical
    entry = SCORERS.get(params.scorer)
    scorer_params = entry.params(**params.scorer_params)

    def client():
        from kgrag.llm.clients import LLMSettings, llm_client

        return llm_client(LLMSettings(**params.llm))

    ctx = Context(question=question.text, query_vec=query_vec, kg=kg, index=index,
                  topic_names=tuple(topic_names), llm=client)

    def scored(seqs: list, ends: list) -> np.ndarray:
        seqs = [tuple(x for x in q if x[0] >= 0) for q in seqs]  # a pair's separator step has no text
        return np.asarray(entry.impl(query=question.text, docs=[_seq_text(kg, s, params.inverse) for s in seqs],
                                     params=scorer_params, ctx=ctx), dtype=np.float64)
    return scored


def _beam(start: np.ndarray, kg, question, params: RelPathParams, plan: _QuestionPlan, base_scores,
          declared: int | None, hubs: dict) -> tuple[dict, dict, dict]:
    """The beam from ``start``: kept sequences (every length's) -> per-hop (edges, from, to), their base
    scores, and the last beam (for a declared hop count longer than any walk)."""
    # a beam state: sequence -> list of per-hop (edges, from, to); every length's kept states stay candidates
    beam: dict[tuple, list] = {(): []}
    frontiers: dict[tuple, np.ndarray] = {(): start}
    kept: dict[tuple, list] = {}
    base: dict[tuple, float] = {}
    for _ in range(declared or params.max_hops):
        cands: dict[tuple, list] = {}
        for seq, steps in beam.items():
            for key, step in _step(kg, frontiers[seq], question.graph_id, plan.skip, params.max_frontier,
                                   params.hub_edges, params.hub_seed, hubs, params.hub_budget).items():
                if relplan.is_co_step(seq + (key,)):
                    step = _co_step(seq + (key,), step, arrays.unique(steps[-1][1]), plan.back)
                    if step is None:
                        continue
                cands[seq + (key,)] = steps + [step]
        if not cands:
            break  # sequences end here: the best shorter ones are returned
        seqs = sorted(cands)
        cos = base_scores(seqs, [arrays.unique(cands[x][-1][2]) for x in seqs])
        scores = cos
        if plan.prefix:
            scores = ranking.rounded(cos + params.plan_weight * np.asarray([plan.prefix.get(_named(kg, x), 0.0)
                                                                            for x in seqs]))
        best = ranking.top_k(scores, params.beam, decimals=ranking.COSINE_DECIMALS)
        beam = {seqs[i]: cands[seqs[i]] for i in best}
        frontiers = {x: arrays.unique(st[-1][2]) for x, st in beam.items()}
        base.update({seqs[i]: float(cos[i]) for i in best})
        if declared is None or len(seqs[0]) == declared:
            kept.update(beam)
    return kept, base, beam


def _fill_own_graph(kg, question, params: RelPathParams, topics: np.ndarray, edges: dict, kept: dict, order: list,
                    final: np.ndarray, chosen: list, cap: int) -> list[int]:
    """A question with its own graph (a retriever's output, RoG style): the chosen sequences' ``edges``, then the
    rest of the graph, in graph_order (by default closest to the topics first), then what the topics do not
    reach, so that an answer the plan misses is still retrieved."""
    edges = dict(edges)
    lists = []
    for i in ranking.top_k(ranking.rounded(final), len(order), decimals=ranking.COSINE_DECIMALS):
        if params.graph_order == "distance" or order[i] in chosen:
            continue
        lists.append(_walk_back(kept[order[i]], arrays.unique(kept[order[i]][-1][2])))
    if params.graph_order == "interleave":  # one triple of each sequence in turn, best sequence first
        lists = [[x for x in chain(*zip_longest(*lists)) if x is not None]] if lists else []
    for got in lists:
        edges.update(dict.fromkeys(got))
    out = list(edges)
    nb = kg.question_neighbourhood(topics, params.max_hops + 1, cap, graph_id=question.graph_id)
    have = set(out)
    out += [int(e) for e in np.asarray(nb.edges, dtype=np.int64).tolist() if int(e) not in have]
    adj = kg.question_adjacency(graph_id=question.graph_id)  # then the graph's triples the topics do not reach
    if adj is not None and len(out) < cap:
        have = set(out)
        out += [e for e in arrays.unique(adj[2]).tolist() if e not in have]
    return out


def _reads_neighbourhood(params: RelPathParams) -> bool:
    """relpath reads ``hops`` / ``max_edges`` only through its fallback retriever (with that one's defaults)."""
    from kgrag.retrieval.retrievers import reads_neighbourhood

    if params.fallback is None:
        return False
    other = RETRIEVERS.get(params.fallback)
    return reads_neighbourhood(other.impl, other.params())


retrieve_relpath.reads_neighbourhood = _reads_neighbourhood
