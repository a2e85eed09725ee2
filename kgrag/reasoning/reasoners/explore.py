"""``explore``: automatic graph exploration (Algorithm 1) under the CoT / ToT / GoT strategy.

Each step (paper: "Grounding LLM Reasoning with Knowledge Graphs", section 4.2.2, Figure 10, Algorithm 1):

1. *Thought*: the LLM writes the next thought from the question, the triples found so far and its earlier
   thoughts — or ``Answer: ...`` when the facts suffice, which ends the chain.
2. *Entity extraction*: an LLM prompt lists the entities the thought names (``name | name``); each is matched
   to a KG entity by name (exact, ignoring case, ``KGStore.find_entities``), else by embedding (nearest name
   with cosine ≥ ``entity_min_score``). The question's own entities (``[bracketed]`` / longest KG name) are
   the first seen entities.
3. *GraphExplore* for ``depth`` levels (BFS): every unvisited seen entity (at most ``max_entities`` per
   level) is visited: its relations are pruned to ``max_relations`` (``prune: llm`` — the LLM picks letters
   in braces, one call per entity, skipped when there are no more than ``max_relations``; ``prune:
   embedding`` — cosine of the relation name to question + thought), then the neighbours over the kept
   relations are pruned to ``max_neighbours`` the same way (LLM letters over the candidate triples, or cosine
   of the neighbour's name); the kept triples join the context and their new ends become seen entities.
   Every prompt of a sub-step — all branches, all entities — goes out in one yield (one batch).

A question with its own graph (``Question.graph_id``) explores that graph only: entities resolve to its nodes and
edges are its edges (``KGStore.question_neighbourhood``).

After ``max_steps`` without an ``Answer:`` thought, one chain-of-thought call answers from the triples found.

Defaults that differ from the paper: ``max_steps`` 3 (the paper's Table 1 uses n = 10 steps for every method; its
Figure 4 shows exploration needs few steps), ToT / GoT ``branching`` 2 and ``breadth`` 1 (paper k = t = 3, see
``strategies``). Settings the paper does not give, as params with these defaults: extraction and pruning calls
greedy (``extract_temperature``, ``prune_temperature``: 0), at most ``names_per_thought`` (8) extracted names
matched per thought, the last ``render_facts`` (15) facts of a state shown to the evaluator.
Documented fallbacks (each counted in ``Reasoning.unparseable``): a pruning reply without a valid letter keeps
the embedding ranking's best (the listed order without an index); an extraction reply with no matched entity
adds none. Algorithm 1's ``End?`` check is the thought's ``Answer:`` line (no separate call).

``decide: score`` (``kgrag.reasoning.reasoners.decide``; kgrag's adaptation for small models, not the paper's setting): with
``prune: llm`` each relation and neighbour pruning call becomes one scoring call: every option (the relation's
name; the candidate triple) is scored as the reply to "which relation / fact of the entity is most useful"
(``RELATION_SCORE``, ``FACT_SCORE``; the thought in the prompt) and the ``max_relations`` / ``max_neighbours``
best are kept (ties: the embedding pre-rank's order). A failed scoring call keeps the pre-rank's first ones and
is not counted unparseable; the scores are in the trace (``relation_scores``, ``triple_scores`` of each
explored entity). The entity extraction is not an LLM call then: GraphExplore goes on from the state's own
entities (the question's, then the ends of the triples kept, unvisited ones first in the order seen), so a
step is a generated thought plus scored pruning. The thought stays generated; with ``answer: generate`` so does
its ``Answer:`` line (the ``End?`` check, which gives the answer). With ``answer: rank`` as well, the ``End?``
check is scored, as ToG's sufficiency check: the thought prompt asks for the next thought only (an ``Answer:``
line in it is not read), and after the step's exploration each open state with facts gets one scoring call,
"Yes" against "No" (``decide.enough_request`` over its triples; ``enough`` in the step's trace): Yes ends the
chain, a failed call says No. ToT / GoT evaluators: see ``strategies``.

``demos: k`` (with ``decide: score``, ``prune: llm``; ``decide.PathBook``; kgrag's adaptation): the relation
pruning is shown the relation paths of the ``k`` labelled questions nearest to the question (the relplan stage's
plan, ``plan``) and scores each step out of a visited entity (relation and direction) as the next step of the
path that entity was reached by: the path plus the step ending ('.') and going on (' ->'), their log-sum. One
call for every distinct path a round extends; the ``max_relations`` best within ``path_margin`` of the entity's best
are walked. The entities at the end of the likeliest paths are visited first. With ``answer: rank`` the ``End?``
check is the path's: a chain ends when its most likely whole path (log P(path '.')) scores at least every path
still open (log P(path ' ->') of the paths its unvisited entities were reached by, where no entity with that
path was visited: a continuation only lowers the probability), and rank answers over the ends of that path only.
Neighbour pruning stays ``FACT_SCORE``'s; the thought stays generated.

``answer: rank``: the final answer (after the ``End?`` check or ``max_steps``) is ``rank``'s selection over the
entities the chain reached (the ends of its triples and the entities matched, the question's own entities left
out), with its triples as the facts (one scoring call; ``margin`` as rank's). With none reached, the thought's
answer, else the chain-of-thought call answers.

LLM calls with ``decide: score``, ``cot``: at most ``max_steps`` · (2 + 2 · ``depth`` · ``max_entities``) + 1
(one thought, at most two pruning calls per visited entity, the check with ``answer: rank``; the final answer).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from pydantic import Field

from kgrag.llm.prompts import clean_question, parse_answers, separated
from kgrag.llm.calls import LLMRequest
from kgrag.reasoning.reasoners import decide as dc
from kgrag.reasoning.reasoners.core import REASONERS, ReasonGen, ReasonInput, Reasoning, text_of
from kgrag.reasoning.reasoners.kgtools import edges_of, other_end, rel_name, relations_of, resolve_entity, triple_text
from kgrag.reasoning.reasoners.parsing import final_answer, letters
from kgrag.reasoning.reasoners.policies import Policies, policies_of
from kgrag.reasoning.reasoners.strategies import Gen, StrategyParams, gather, search
from kgrag.reasoning.traces import ExploreStep, Explored, ExploreTrace


class ExploreParams(StrategyParams, dc.DemoFields):
    """Params of ``explore`` (the strategy fields are shared with ``agent``, the ``demos`` fields with ``tog``)."""

    max_steps: int = Field(3, ge=1, le=20, description="thought + exploration steps before the final answer call (the "
                                                       "paper: n = 10)")
    depth: int = Field(2, ge=1, le=5, description="BFS levels of GraphExplore per step (search_depth)")
    max_relations: int = Field(3, ge=1, le=26, description="relations kept per visited entity")
    max_neighbours: int = Field(5, ge=1, le=26, description="neighbour triples kept per visited entity")
    max_entities: int = Field(4, ge=1, description="unvisited entities visited per level and state (closest first)")
    path_margin: float = Field(2.3, ge=0.0, description=dc.PATH_MARGIN_HELP)
    prune: Literal["llm", "embedding"] = Field(
        "llm", description="llm: the LLM picks relations / neighbours by letter; embedding: cosine to the "
                           "question + thought")
    entity_min_score: float = Field(0.6, ge=-1.0, le=1.0,
                                    description="cosine needed to match an extracted name to an entity by embedding")
    thought_max_tokens: int = Field(64, ge=8, description="tokens of one thought")
    prune_max_tokens: int = Field(24, ge=4, description="tokens of an extraction or pruning reply")
    max_context_triples: int = Field(40, ge=1, description="triples shown in the thought and answer prompts")
    answer_max_tokens: int = Field(
        160, ge=8, description="tokens of the final answer call (chain of thought over the triples found)")
    extract_temperature: float = Field(0.0, ge=0.0, description="sampling temperature of the entity extraction")
    prune_temperature: float = Field(0.0, ge=0.0, description="sampling temperature of the relation / neighbour "
                                     "pruning calls")
    names_per_thought: int = Field(8, ge=1, description="extracted names matched to KG entities per thought")
    render_facts: int = Field(15, ge=1, description="last facts of a state shown to the ToT / GoT evaluator")


SYSTEM = "You answer a question over a knowledge graph, one short thought at a time."
PRUNE_SYSTEM = "You pick the knowledge graph items most useful for answering a question."
EXTRACT_SYSTEM = "You list the entity names mentioned in a text."
# decide: score: the options scored as the reply
RELATION_SCORE = ("Question: {question}\nThought: {thought}\n\n"
                  "Which relation of {entity} is most useful for answering the question? Reply with the relation.")
FACT_SCORE = ("Question: {question}\nThought: {thought}\n\n"
              "Which fact (head, relation, tail) about {entity} is most useful for answering the question? "
              "Reply with the fact.")


@dataclass(eq=False)
class ExploreState:
    """One chain: its thoughts, the triples found (edge ids, in order), seen entities and which were visited."""

    thoughts: tuple[str, ...] = ()
    edges: tuple[int, ...] = ()
    seen: tuple[int, ...] = ()
    visited: frozenset[int] = frozenset()
    answer: str | None = None
    end: str | None = None  # "enough" | "path": the scored End? check said Yes (decide: score, answer: rank)
    paths: dict = field(default_factory=dict)  # demos: entity -> relation path it was reached by ((name, fwd), ...)
    reach: dict = field(default_factory=dict)  # demos: relation path -> the entities (not seeds) found at its end


class ExploreDomain:
    """The exploration's step for the strategy search."""

    def __init__(self, inp: ReasonInput, params: ExploreParams, seed_names: list[str] | None = None) -> None:
        self.inp, self.p, self.kg, self.index = inp, params, inp.kg, inp.index
        self.gid = inp.question.graph_id  # a question with its own graph: exploration stays inside it
        self.unparseable = 0
        self.log: list[ExploreStep] = []
        self.step_no = 0
        # the three policies: deciding, answering, demonstrations (demos: every relation path's scores)
        self.pol: Policies = policies_of(params, inp, seed_names or [])
        self.book = self.pol.demos
        # decide: score with answer: rank: the End? check is a scoring call, the thought's Answer: line not read
        self.checked = self.pol.scored_check

    # ---- prompts --------------------------------------------------------------------------------------
    def facts(self, state: ExploreState) -> str:
        return "\n".join(triple_text(self.kg, state.edges[: self.p.max_context_triples])) if state.edges else ""

    def thought_request(self, state: ExploreState, temperature: float, seed: int) -> LLMRequest:
        s = self.inp.sampling
        user = f"Question: {clean_question(self.inp.question.text)}"
        if state.edges:
            user += f"\n\nKnowledge graph facts (head, relation, tail):\n{self.facts(state)}"
        if state.thoughts:
            user += "\n\nThoughts so far:\n" + "\n".join(f"{i + 1}. {t}" for i, t in enumerate(state.thoughts))
        user += "\n\nWrite the next thought: one sentence naming what to look up next."
        if not self.checked:
            user += separated(" If the facts already answer the question, write 'Answer: name | name' instead.",
                              s.separator)
        return LLMRequest(messages=(("system", SYSTEM), ("user", user)), temperature=temperature, top_p=s.top_p,
                          max_tokens=self.p.thought_max_tokens, seed=seed)

    def extract_request(self, thought: str) -> LLMRequest:
        user = (f"Text: {thought}\n\n"
                + separated("List the named things (entities) in the text, separated by ' | '. Names only.",
                            self.inp.sampling.separator))
        return LLMRequest(messages=(("system", EXTRACT_SYSTEM), ("user", user)), temperature=self.p.extract_temperature,
                          max_tokens=self.p.prune_max_tokens, seed=self.inp.sampling.seed)

    def pick_request(self, what: str, thought: str, options: list[str], keep: int) -> LLMRequest:
        opts = "\n".join(f"({c}) {o}" for c, o in zip(letters(len(options)), options))
        user = (f"Question: {clean_question(self.inp.question.text)}\nThought: {thought}\n\n{what}:\n{opts}\n\n"
                f"Pick up to {keep} of them most useful for answering the question. Reply with the letters in "
                "braces, e.g. {A} {C}.")
        return LLMRequest(messages=(("system", PRUNE_SYSTEM), ("user", user)), temperature=self.p.prune_temperature,
                          max_tokens=self.p.prune_max_tokens, seed=self.inp.sampling.seed)

    def prune_request(self, what: str, entity: str, thought: str, options: list[str], keep: int) -> LLMRequest:
        """A pruning call over ``options``: letters picked (``decide: generate``) or the options scored."""
        tpl = RELATION_SCORE if what == "relations" else FACT_SCORE
        head = f"Relations of {entity}" if what == "relations" else f"Facts about {entity}"
        return self.pol.decide.request(
            options, system=PRUNE_SYSTEM, paper=lambda: self.pick_request(head, thought, options, keep),
            ask=lambda: tpl.format(question=clean_question(self.inp.question.text), thought=thought, entity=entity))

    def pruned(self, rec, ranked: list, texts: list[str], keep: int) -> tuple[list, list[list] | None]:
        """(kept options, scored options for the trace or None) of a pruning call; a pick reply without a valid
        letter keeps the first ``keep`` (counted unparseable)."""
        got = self.pol.decide.choose(rec, len(ranked), keep)
        self.unparseable += int(not got.parsed)
        return [ranked[i] for i in got.positions], \
            dc.scored_options(texts, got.scores) if self.pol.decide.scored else None

    # ---- graph helpers ----------------------------------------------------------------------------------
    def qvec(self, thought: str) -> np.ndarray | None:
        if self.index is None:
            return None
        return self.index.encode([f"{clean_question(self.inp.question.text)} {thought}".strip()])[0]

    def rank_relations(self, rels: list[int], q: np.ndarray | None) -> list[int]:
        if q is None or not len(self.index.relation_vectors):
            return list(rels)
        s = self.index.relation_vectors[np.asarray(rels, dtype=np.int64)] @ q
        return [rels[i] for i in np.argsort(-s, kind="stable")]

    def rank_edges(self, edges: list[int], node: int, q: np.ndarray | None) -> list[int]:
        if q is None or not len(self.index.entity_vectors) or not edges:
            return list(edges)
        ends = np.asarray([other_end(self.kg, e, node) for e in edges], dtype=np.int64)
        s = self.index.entity_vectors[ends] @ q
        return [edges[i] for i in np.argsort(-s, kind="stable")]

    def prune_relations(self, visits: list) -> Gen:
        """Relation pruning of each visited entity (``prune: llm``: one call per entity with more relations than
        ``max_relations``, all in one batch; ``embedding``: the pre-rank's first). Returns ``[(kept relations,
        scored options for the trace or None), ...]`` per visit."""
        p, reqs = self.p, []
        for child, _, ent, rels in visits:
            if p.prune == "llm" and len(rels) > p.max_relations:
                reqs.append([self.prune_request("relations", self.kg.names([ent])[0], child.thoughts[-1],
                                                [rel_name(self.kg, r) for r in rels[:26]], p.max_relations)])
            else:
                reqs.append([])
        recs = yield from gather(reqs)
        out = []
        for (_, _, _, rels), rr in zip(visits, recs):
            opts = rels[:26]
            if rr:
                out.append(self.pruned(rr[0], opts, [rel_name(self.kg, r) for r in opts], p.max_relations))
            else:
                out.append((opts[: p.max_relations], None))
        return out

    # ---- demos: relation paths ---------------------------------------------------------------------------------
    def steps_of(self, ent: int, rels: list[int]) -> list[tuple[int, bool]]:
        """The steps out of ``ent``, ``(relation id, forward)`` in ``rels``' order: forward where ``ent`` is an
        edge's head (walked head -> tail), backward where it is the tail."""
        out: list[tuple[int, bool]] = []
        for r in rels:
            es = edges_of(self.kg, ent, r, graph_id=self.gid)
            if (self.kg.heads[es] == ent).any():
                out.append((r, True))
            if (self.kg.tails[es] == ent).any():
                out.append((r, False))
        return out

    def along(self, ent: int, rel) -> list[int]:
        """Edges of ``ent`` over ``rel``: a relation id (either direction) or a step ``(relation id, forward)``."""
        if isinstance(rel, tuple):
            es = edges_of(self.kg, ent, rel[0], graph_id=self.gid)
            return [int(e) for e in es.tolist() if (int(self.kg.heads[e]) == ent) == rel[1]]
        return [int(e) for e in edges_of(self.kg, ent, rel, graph_id=self.gid).tolist()]

    def named(self, st: tuple[int, bool]) -> tuple[str, bool]:
        return rel_name(self.kg, st[0]), st[1]

    def prune_by_path(self, visits: list) -> Gen:
        """Relation pruning with demonstrations: each visited entity's steps scored as the next step of the
        relation path it was reached by, after the demonstrations' paths (``decide.PathBook.expand``: the path
        plus the step ending and going on, their log-sum; one call for every distinct path); the
        ``max_relations`` best within ``path_margin`` of the best kept (a failed call: the pre-rank's first).
        Returns ``[(kept steps, trace entry), ...]`` per visit."""
        p, book = self.p, self.book
        groups: dict[tuple, list] = {}
        for child, _, ent, steps in visits:
            groups.setdefault(child.paths.get(ent, ()), []).extend(self.named(st) for st in steps)
        yield from book.expand(groups)
        out = []
        for child, _, ent, steps in visits:
            h = child.paths.get(ent, ())
            vals = [book.score.get(h + (self.named(st),)) for st in steps]
            if steps and None in vals:
                kept = steps[: p.max_relations]
            else:
                order = dc.best_k(vals, p.max_relations)
                kept = [steps[i] for i in order if vals[i] >= vals[order[0]] - p.path_margin]
            entry = {"path": dc.path_text(h),
                     "relation_scores": [[dc.step_text(*self.named(st)), v] for st, v in zip(steps, vals)]}
            if h in book.ends:
                entry["path_end"] = dc.scored_options(dc.END_OPTIONS, book.ends[h])
            out.append((kept, entry))
        return out

    def path_end(self, kids: list) -> Gen:
        """The End? check with demonstrations: each reached path not scored yet gets its end options scored
        (``PathBook.score_ends``, one batch); a state ends when its most likely whole path (log P(path '.'))
        scores at least every path it can still extend (``PathBook.open_bound`` over the paths its unvisited
        entities were reached by), so no longer path can be more likely."""
        book = self.book
        yield from book.score_ends([x for _, _, c, _ in kids for x in c.reach])
        for _, _, child, log in kids:
            best, bs = book.best(child.reach)
            os_ = book.open_bound([child.paths[e] for e in child.seen if e not in child.visited and e in child.paths])
            ends = best is not None and (os_ is None or bs >= os_)
            log["path_end"] = {"path": None if best is None else dc.path_text(best), "score": bs,
                               "open_score": os_, "ends": ends}
            if ends:
                child.end = "path"

    # ---- one step --------------------------------------------------------------------------------------------
    def expand(self, states: list[ExploreState], k: int, temperature: float, seeds: list[list[int]]) -> Gen:
        """One step of every state: ``k`` thoughts each (a child per thought), then for the children without an
        answer the entities their thought names, the graph explored from them ``depth`` levels, and the End?
        check where it is scored; the children, per parent."""
        self.step_no += 1
        kids = yield from self.thoughts(states, k, temperature, seeds)
        open_ = [c for c in kids if c[2].answer is None]
        yield from self.extract(open_)
        qs = {id(c[2]): self.qvec(c[2].thoughts[-1]) for c in open_}
        for level in range(self.p.depth):
            if not (yield from self.explore_level(open_, qs, level)):
                break
        if self.checked and self.book.active:  # demos: the End? check is the path's
            yield from self.path_end(open_)
        elif self.checked:  # the End? check scored: Yes / No over each open state's facts
            yield from self.check_enough(open_)
        for *_, log in kids:
            self.log.append(log)
        out: list[list[ExploreState]] = [[] for _ in states]
        for i, _, child, _ in kids:
            out[i].append(child)
        return out

    def thoughts(self, states: list[ExploreState], k: int, temperature: float, seeds: list[list[int]]) -> Gen:
        """``k`` thoughts of every state, in one batch: (parent, branch, child, log) per thought; a thought that
        answers (not with the scored check) gives a child with its answer."""
        recs = yield from gather([[self.thought_request(s, temperature, seeds[i][j]) for j in range(k)]
                                  for i, s in enumerate(states)])
        kids: list[tuple[int, int, ExploreState, dict]] = []  # (parent, branch, child, log)
        for i, (s, rs) in enumerate(zip(states, recs)):
            for j, r in enumerate(rs):
                thought = text_of(r).strip()
                ans = None if self.checked else final_answer(thought)
                log: ExploreStep = {"step": self.step_no, "parent": i, "branch": j, "thought": thought}
                child = ExploreState(thoughts=s.thoughts + (thought,), edges=s.edges, seen=s.seen, visited=s.visited,
                                     answer=ans, paths=dict(s.paths), reach=dict(s.reach))
                kids.append((i, j, child, log))
        return kids

    def extract(self, open_: list) -> Gen:
        """Entity extraction: one request per open child, all in one batch; the names resolved to entities join
        the child's seen ones (decide: score: none, the search goes on from the state's own entities)."""
        p = self.p
        scored = self.pol.decide.scored
        ext = yield from gather([[] if scored else [self.extract_request(c[2].thoughts[-1])] for c in open_])
        for (_, _, child, log), recs_ in zip(open_, ext):
            if scored:
                log.update(extraction=None, entities=[], explored=[])
                continue
            (rec,) = recs_
            names = parse_answers(text_of(rec), self.inp.sampling.separator)
            matched = []
            for n in names[: p.names_per_thought]:
                nid, how = resolve_entity(self.kg, self.index, n, min_score=p.entity_min_score, graph_id=self.gid)
                if nid is not None:
                    matched.append({"text": n, "entity": self.kg.names([nid])[0], "how": how})
                    if nid not in child.seen:
                        child.seen = child.seen + (nid,)
            log["extraction"] = text_of(rec)
            log["entities"] = matched
            log["explored"] = []

    def explore_level(self, open_: list, qs: dict, level: int) -> Gen:
        """One level of exploration from each open child's entities not yet visited: relation pruning, then
        neighbour pruning, the kept triples joining the child; False where no entity was left to visit."""
        p = self.p
        visits = []  # (child, log, entity, relations)
        for _, _, child, log in open_:
            todo = [e for e in child.seen if e not in child.visited]
            if self.book.active:  # demos: the entities at the end of the likeliest paths first
                todo.sort(key=lambda e: -self.book.score.get(child.paths.get(e), -1e18))
            todo = todo[: p.max_entities]
            child.visited = child.visited | frozenset(todo)
            for ent in todo:
                visits.append((child, log, ent, self.rank_relations(relations_of(self.kg, ent, graph_id=self.gid),
                                                                     qs[id(child)])))
        if not visits:
            return False
        # relation pruning (demos: steps, relation and direction, scored as the next step of a path)
        if self.book.active:
            visits = [(c, lg, ent, self.steps_of(ent, rels[:26])) for c, lg, ent, rels in visits]
            pruned = yield from self.prune_by_path(visits)
        else:
            pruned = yield from self.prune_relations(visits)
        kept_rels, rel_scores = [k for k, _ in pruned], [e for _, e in pruned]
        # neighbour pruning
        reqs, cands = [], []
        for (child, _, ent, _), rels in zip(visits, kept_rels):
            have = set(child.edges)
            es = [e for r in rels for e in self.along(ent, r) if e not in have]
            es = self.rank_edges(es, ent, qs[id(child)])[:26]
            if p.prune == "llm" and len(es) > p.max_neighbours:
                reqs.append([self.prune_request("facts", self.kg.names([ent])[0], child.thoughts[-1],
                                                triple_text(self.kg, es), p.max_neighbours)])
            else:
                reqs.append([])
            cands.append(es)
        nrecs = yield from gather(reqs)
        for (child, log, ent, _), rels, es, nr, rsc in zip(visits, kept_rels, cands, nrecs, rel_scores):
            tsc = None
            if nr:
                kept, tsc = self.pruned(nr[0], es, triple_text(self.kg, es), p.max_neighbours)
            else:
                kept = es[: p.max_neighbours]
            kept = [e for e in kept if e not in child.edges]
            child.edges = child.edges + tuple(kept)
            for e in kept:
                self.reached(child, ent, e)
            entry: Explored = {"level": level + 1, "entity": self.kg.names([ent])[0],
                     "relations": [dc.step_text(*self.named(r)) if isinstance(r, tuple) else rel_name(self.kg, r)
                                   for r in rels], "triples": triple_text(self.kg, kept)}
            if isinstance(rsc, dict):
                entry.update(rsc)
            elif rsc is not None:
                entry["relation_scores"] = rsc
            if tsc is not None:
                entry["triple_scores"] = tsc
            log["explored"].append(entry)
        return True

    def reached(self, child: ExploreState, ent: int, e: int) -> None:
        """The other end of the kept edge ``e`` from ``ent`` is seen; with demos, the path it was first reached by,
        and every path's ends."""
        o = other_end(self.kg, e, ent)
        if o not in child.seen:
            child.seen = child.seen + (o,)
        if self.book.active:  # the path o was first reached by; every path's ends
            p_o = child.paths.get(ent, ()) + ((rel_name(self.kg, self.kg.relations[e]),
                                              int(self.kg.heads[e]) == ent),)
            child.paths.setdefault(o, p_o)
            if child.paths[o] != () and o not in child.reach.get(p_o, ()):
                child.reach[p_o] = child.reach.get(p_o, ()) + (o,)

    def check_enough(self, open_: list) -> Gen:
        """The End? check scored: Yes / No over each open state's facts (states with none are not asked)."""
        chk = [c for c in open_ if c[2].edges]
        recs = yield from gather([[dc.enough_request(self.facts(c[2]), clean_question(self.inp.question.text),
                                                     self.inp.sampling)] for c in chk])
        for (_, _, child, log), (rec,) in zip(chk, recs):
            yes, sc = dc.enough(rec)
            log["enough"] = {"enough": yes, "scores": dc.scored_options(dc.ENOUGH_OPTIONS, sc)}
            if yes:
                child.end = "enough"

    # ---- the rest of the Domain protocol ---------------------------------------------------------------------
    def done(self, state: ExploreState) -> bool:
        return state.answer is not None or state.end is not None

    def render(self, state: ExploreState) -> str:
        out = [f"Thought: {t}" for t in state.thoughts]
        if state.edges:
            out.append("Facts:\n" + "\n".join(triple_text(self.kg, state.edges[-self.p.render_facts:])))
        return "\n".join(out) or "(no thoughts yet)"

    def merge(self, a: ExploreState, b: ExploreState, thought: str) -> ExploreState:
        self.log.append({"step": self.step_no, "parent": "merge", "thought": thought})
        return ExploreState(thoughts=a.thoughts + (thought,),
                            edges=a.edges + tuple(e for e in b.edges if e not in a.edges),
                            seen=a.seen + tuple(e for e in b.seen if e not in a.seen),
                            visited=a.visited | b.visited, answer=None, paths={**b.paths, **a.paths},
                            reach=dc.merged_reach(a.reach, b.reach))


def _init(inp: ReasonInput) -> ExploreState:
    kg = inp.kg
    gid = inp.question.graph_id
    seeds = kg.find_entities(inp.question.text, among=kg.question_nodes(graph_id=gid)) if kg is not None else []
    if not seeds and kg is not None:
        seeds = [i for i in inp.question.topic_ids if 0 <= i < kg.num_entities]
    return ExploreState(seen=tuple(int(s) for s in seeds), paths={int(s): () for s in seeds})


@REASONERS.register("explore", params=ExploreParams, version="6")
def explore(*, inp: ReasonInput, params: ExploreParams) -> ReasonGen:
    """Automatic graph exploration: thought → entities → relation and neighbour pruning → triples, repeated
    (``decide: score``: the pruning scored, no extraction call; ``answer: rank``: rank's answer over the entities
    reached; see the module doc).

    References
    ----------
    "Grounding LLM Reasoning with Knowledge Graphs" (2025), section 4.2.2 and Algorithm 1; Sun et al.,
    Think-on-Graph (2024), for the search + prune pipeline.
    """
    init = _init(inp)
    dom = ExploreDomain(inp, params, seed_names=inp.kg.names(list(init.seen)) if inp.kg is not None else [])
    res = yield from search(dom, question=inp.question.text, init=init, params=params, max_steps=params.max_steps,
                            sampling=inp.sampling, decider=dom.pol.decide)
    finished = [s for s in res.states if s.answer is not None or s.end is not None]
    # demos: the kept state whose most likely whole path scores best
    best = dom.book.best_state(res.states, finished[0] if finished else res.states[0])
    kg, pol = inp.kg, dom.pol
    trace: ExploreTrace = {"reasoner": "explore", "strategy": params.strategy, "prune": params.prune,
             "seed_entities": kg.names(list(init.seen)) if kg is not None else [],
             "thoughts": list(best.thoughts), "triples": triple_text(kg, best.edges) if kg is not None else [],
             "steps": dom.log, "search": res.trace}
    pol.stamp(trace)
    dom.book.stamp(trace)
    unparseable = dom.unparseable + res.unparseable
    ids: dict[str, int] = {}
    if pol.answer.ranks and kg is not None:
        reached = [e for e in best.seen if e not in init.seen]
        path, _ = dom.book.best(best.reach)
        if path is not None:  # demos: the ends of the most likely whole relation path
            reached = [e for e in best.reach[path] if e not in init.seen]
            trace["answer_path"] = dc.path_text(path)
        ids = {str(n): e for n, e in zip(kg.names(reached), reached)}
    done = yield from pol.answer.final(
        ids=ids, facts=triple_text(kg, best.edges[: params.max_context_triples]) if kg is not None else [],
        generated=best.answer, trace=trace, depth=res.steps, unparseable=unparseable)
    if done is not None:
        return done
    fb = yield from pol.answer.fallback("cot", facts=dom.facts(best) if kg is not None else "",
                                        max_tokens=params.answer_max_tokens)
    trace["answer_reply"] = fb.reply
    return Reasoning(answer=fb.answer, depth=res.steps, trace=trace, unparseable=unparseable + fb.unparseable)


__all__ = ["ExploreParams", "ExploreState", "explore"]
