"""``agent``: Graph-CoT agent — Thought → Action → Observation over the KG, under the CoT / ToT / GoT strategy.

Each step the LLM writes a ``Thought:`` and an ``Action:`` line; the action runs on the ``KGStore`` and its
result comes back as the ``Observation:`` of the next turn (paper: "Grounding LLM Reasoning with Knowledge
Graphs", section 4.2.1, after Graph-CoT, Jin et al. 2024, and ReAct). Actions:

- ``RetrieveNode[text]``: the node ``text`` names — exact or ``[bracketed]`` name (``KGStore.find_entities``),
  the name ignoring case, else the nearest entity name by embedding (``EmbeddingIndex.search_entities``).
- ``NodeFeature[node, feature]``: ``name`` gives the node's name; a relation name gives that relation's
  values; anything else (``relations``, ``attributes`` ...) lists every relation of the node with its values.
- ``NeighborCheck[node, relation]``: the triples linking ``node`` by ``relation`` (either direction; the
  relation is matched to the node's relations by name, else by embedding; empty = all).
- ``NodeDegree[node, relation]``: how many such neighbours (empty relation = all).
- ``Finish[answer]``: ends the chain with ``answer``.

A question with its own graph (``Question.graph_id``, e.g. ExplaGraphs) only sees that graph: nodes resolve
to its nodes and edges are its edges (``KGStore.question_neighbourhood``).

The action line is parsed leniently: any case, spaces or underscores inside the name (``neighbor_check``),
quotes around arguments, round/curly or missing brackets, a missing ``Action:`` prefix. Two-argument
actions split at the last comma (entity names may hold commas). Documented fallbacks: a reply with no
readable action (or ``Finish`` with no answer) is counted in ``Reasoning.unparseable`` and answered with an
observation that lists the valid actions; when ``max_steps`` end without ``Finish``, one chain-of-thought call
answers from the observations collected (``Reasoning.fallback = "observations"``).

``decide: score`` (``kgrag.reasoning.reasoners.decide``; kgrag's adaptation for small models, not the paper's setting): no
Thought / Action line is generated; each step one scoring call scores every valid action as the reply to the
question and the chain's actions and observations so far (``SCORE_SYSTEM``, ``SCORE_PROMPT``), and the best is
taken (ToT / GoT: the ``branching`` best, one child each). The valid actions, enumerated per chain:
``RetrieveNode[name]`` for each of the question's topic entities (``KGStore.find_entities``, else
``Question.topic_ids``) not yet observed; ``NeighborCheck[node, relation]`` for every relation of every node
observed so far (a retrieved node, the nodes of the triples shown) that links it by a triple no observation
showed yet, those already taken left out, pre-ranked by the relevance of ``node relation`` to the question
(``tog.Scorer``: cosine with the embedding index, else BM25) and cut to ``max_actions`` - 1; ``Finish`` once a
node was observed (always an option then, listed last: ties go to the pre-rank's first). NodeFeature and
NodeDegree are not offered (NeighborCheck shows the same facts). A failed scoring call takes the pre-rank's first
option(s) (not counted unparseable); a chain without any valid action (no topic entity, nothing observed) stops
and the final answer is given as after ``max_steps``. A chosen ``Finish`` ends the chain; its answer is the final
answer below. Every option's score is in the trace (``scores`` of each step).

``demos: k`` (with ``decide: score``; ``decide.PathBook``; kgrag's adaptation): the agent becomes a best-first
search over relation paths after the paths of the ``k`` labelled questions nearest to the question (the relplan
stage's plan, ``plan``). Each node observed gets the path it was first observed by (a topic: the empty path). The
options: ``RetrieveNode`` of an unobserved topic (the empty path: score 0, so retrieval comes first);
``NeighborCheck[node, relation]`` where it walks a path the chain has not walked, scored as its best step after
the node's path (the path plus the step ending and going on, their log-sum; a path several nodes share is
offered at the first observed); ``Finish``, scored as the chain's most likely whole path (log P(path '.')).
Finish is thus taken once no walk can reach a more likely path. One scoring call a step for the new paths (none
when the options' paths were scored before); rank answers over the ends of the most likely whole path.

``answer: rank``: the final answer (after ``Finish``, generated or scored, or after ``max_steps``) is ``rank``'s
selection over the entities the chain observed, the question's topic entities left out, with the chain's
observations as the facts (one scoring call; ``margin`` as rank's). With none observed, the generated
``Finish`` answer, else the chain-of-thought call answers. With ``answer: generate`` and ``decide: score``, a
chosen ``Finish`` is answered by the chain-of-thought call over the observations (``answer_from:
observations``, not counted as a fallback). LLM calls with ``decide: score``: at most one per kept state and
step, plus the evaluator (ToT / GoT) and the merge (GoT) per step, plus one final answer call (``cot``:
``max_steps`` + 1).

Defaults that differ from the paper: ``max_steps`` 6 (the paper's Table 1 uses n = 10 steps; its Figure 4 shows
the agent improving with more steps), ToT / GoT ``branching`` 2 and ``breadth`` 1 (paper k = t = 3, see
``strategies``). Not given by the paper, as params: ``max_observation_triples`` (15) triples per observation,
``feature_values`` (5) values shown per relation by ``NodeFeature``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from pydantic import Field

from kgrag.llm.prompts import DEMO_QUESTION, clean_question, separated
from kgrag.llm.calls import LLMRequest
from kgrag.reasoning.reasoners import decide as dc
from kgrag.reasoning.reasoners.core import REASONERS, ReasonGen, ReasonInput, Reasoning, Sampling, text_of
from kgrag.reasoning.reasoners.kgtools import (
    clean_name, edges_of, other_end, rel_name, relations_of, resolve_entity, resolve_relation, triple_text,
)
from kgrag.reasoning.reasoners.policies import Policies, policies_of
from kgrag.reasoning.reasoners.strategies import Gen, StrategyParams, gather, search
from kgrag.reasoning.traces import AgentStep, AgentTrace
from kgrag.reasoning.reasoners.tog import Scorer, rel_words


class AgentParams(StrategyParams, dc.DemoFields):
    """Params of ``agent`` (the strategy fields are shared with ``explore``, the ``demos`` fields with ``tog``)."""

    max_steps: int = Field(6, ge=1, le=30, description="Thought/Action/Observation steps before the fallback answer "
                                                       "(the paper: n = 10)")
    step_max_tokens: int = Field(64, ge=8, description="tokens of one Thought + Action reply")
    max_observation_triples: int = Field(15, ge=1, description="triples / values shown in one observation")
    answer_max_tokens: int = Field(
        160, ge=8, description="tokens of the fallback answer call (chain of thought over the observations)")
    feature_values: int = Field(5, ge=1, description="values shown per relation when NodeFeature lists every "
                                "relation of a node")
    max_actions: int = Field(25, ge=2, le=200, description="decide: score: valid actions scored per step, Finish "
                             "included (the RetrieveNode / NeighborCheck options best pre-ranked first)")


SYSTEM = (
    "You answer a question by exploring a knowledge graph. Each turn write one line 'Thought: ...' and one line "
    "'Action: ...' with one of these actions:\n"
    "RetrieveNode[text] - find the graph node named in the text\n"
    "NodeFeature[node, feature] - the node's name, or its relations and their values\n"
    "NeighborCheck[node, relation] - the nodes linked to the node by the relation\n"
    "NodeDegree[node, relation] - how many nodes are linked to the node by the relation\n"
    "Finish[answer] - the final answer, names separated by ' | '\n"
    "Square brackets in the question mark graph nodes."
)
DEMO = (  # the format only: placeholders no KG holds (kgrag.llm.prompts.DEMO_NAMES), no domain
    ("user", "Question: " + DEMO_QUESTION.replace("Entity One", "[Entity One]")),
    ("assistant", "Thought: I need the entities whose relation_1 is Entity One.\n"
                  "Action: NeighborCheck[Entity One, relation_1]"),
    ("user", "Observation: (Entity Two, relation_1, Entity One)\n(Entity Three, relation_1, Entity One)"),
    ("assistant", "Thought: Now the relation_2 of these entities.\nAction: NeighborCheck[Entity Two, relation_2]"),
    ("user", "Observation: (Entity Two, relation_2, Entity Four)"),
    ("assistant", "Thought: And Entity Three.\nAction: NeighborCheck[Entity Three, relation_2]"),
    ("user", "Observation: (Entity Three, relation_2, Entity Five)"),
    ("assistant", "Thought: I have both.\nAction: Finish[Entity Four | Entity Five]"),
)
ACTIONS = ("RetrieveNode", "NodeFeature", "NeighborCheck", "NodeDegree", "Finish")
INVALID = ("Invalid action. Use exactly one of: RetrieveNode[text], NodeFeature[node, feature], "
           "NeighborCheck[node, relation], NodeDegree[node, relation], Finish[answer].")
_CANON = {"retrievenode": "RetrieveNode", "nodefeature": "NodeFeature", "neighborcheck": "NeighborCheck",
          "neighbourcheck": "NeighborCheck", "nodedegree": "NodeDegree", "finish": "Finish"}
_ACTION = re.compile(
    r"(retrieve[\s_]*node|node[\s_]*feature|neighbou?r[\s_]*check|node[\s_]*degree|finish)\b\s*[:=\-]?\s*(.*)",
    re.IGNORECASE)
_NAME_FEATURES = {"name", "names", "text", "title", "label"}

# decide: score: the valid actions scored as the reply (no Thought line is generated)
SCORE_SYSTEM = (
    "You answer a question by exploring a knowledge graph, one action at a time:\n"
    "RetrieveNode[text] - find the graph node named in the text\n"
    "NeighborCheck[node, relation] - the nodes linked to the node by the relation\n"
    "Finish - stop: the observations answer the question"
)
SCORE_PROMPT = "Question: {question}\n\n{history}\n\nWhich action comes next? Reply with the action."
FINISH = "Finish"


def parse_action(reply: str) -> tuple[str, list[str]] | None:
    """(action, args) from a reply; None when no action is readable. The ``Action:`` line wins; else the first
    line that starts with an action name."""
    text = reply or ""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    tagged = [re.sub(r"^\W*action\s*\d*\s*[:：]\s*", "", ln, flags=re.IGNORECASE)
              for ln in lines if re.match(r"^\W*action\s*\d*\s*[:：]", ln, flags=re.IGNORECASE)]
    pool = tagged or [re.sub(r"^[\W\d]+", "", ln) for ln in lines]
    for ln in pool:
        m = _ACTION.match(ln.strip().strip("*`"))
        if m is None:
            continue
        name = _CANON[re.sub(r"[\s_]+", "", m.group(1).lower())]
        arg = m.group(2).strip()
        if arg[:1] in "[({":
            arg = arg[1:]
        arg = re.sub(r"[\])}]+\s*[.;]?\s*$", "", arg).strip()
        if name in ("RetrieveNode", "Finish"):
            args = [clean_name(arg)]
        else:
            node, sep, rel = arg.rpartition(",")
            args = [clean_name(node), clean_name(rel)] if sep else [clean_name(arg), ""]
        if not args[0]:
            return None
        return name, args
    return None


def parse_thought(reply: str) -> str:
    """The ``Thought:`` text (else the reply's text before its action line)."""
    m = re.search(r"thought\s*\d*\s*[:：]\s*(.*?)(?=\n\s*\W*action\s*\d*\s*[:：]|$)", reply or "",
                  flags=re.IGNORECASE | re.DOTALL)
    if m:
        return m.group(1).strip()
    lines = [ln for ln in (reply or "").splitlines() if ln.strip() and not _ACTION.match(ln.strip())]
    return " ".join(ln.strip() for ln in lines[:2])


@dataclass
class Observed:
    """What one observation showed: entity ids and edge ids, in order."""

    nodes: list[int] = field(default_factory=list)
    edges: list[int] = field(default_factory=list)


@dataclass(eq=False)
class AgentState:
    """One chain: its steps (thought, action, observation, valid) and the answer once finished."""

    steps: tuple[AgentStep, ...] = ()
    answer: str | None = None
    merged_from: tuple[int, ...] = field(default=())
    nodes: tuple[int, ...] = ()  # entities observed, in order (a retrieved node, the nodes of the triples shown)
    shown: tuple[int, ...] = ()  # edges shown in observations
    end: str | None = None  # decide: score: "finish" (Finish chosen, answered after the search) | "stuck"
    paths: dict = field(default_factory=dict)  # demos: node -> relation path it was first observed by
    walked: frozenset = frozenset()  # demos: the relation paths the chain's NeighborChecks walked
    reach: dict = field(default_factory=dict)  # demos: relation path -> the nodes (not topics) found at its end


class AgentDomain:
    """The agent's step for the strategy search: one LLM call per branch, then the action on the KG."""

    def __init__(self, inp: ReasonInput, params: AgentParams) -> None:
        self.inp, self.p, self.kg, self.index = inp, params, inp.kg, inp.index
        self.gid = inp.question.graph_id  # a question with its own graph: every action stays inside it
        self.unparseable = 0
        self.log: list[AgentStep] = []
        self.step_no = 0
        self._topics: list[int] | None = None
        self._scorer: Scorer | None = None
        # the three policies: deciding, answering, demonstrations (demos: every relation path's scores)
        self.pol: Policies = policies_of(params, inp, inp.kg.names(self.topics) if inp.kg is not None else [])
        self.book = self.pol.demos

    @property
    def topics(self) -> list[int]:
        """The question's topic entities (``KGStore.find_entities``, else ``Question.topic_ids``)."""
        if self._topics is None:
            kg, q = self.kg, self.inp.question
            found: list[int] = []
            if kg is not None:
                found = [int(i) for i in kg.find_entities(q.text, among=kg.question_nodes(graph_id=self.gid))]
                if not found:
                    found = [int(i) for i in q.topic_ids if 0 <= i < kg.num_entities]
            self._topics = list(dict.fromkeys(found))
        return self._topics

    @property
    def scorer(self) -> Scorer:
        """The pre-rank of NeighborCheck options: cosine to the question with an index, else BM25."""
        if self._scorer is None:
            self._scorer = Scorer("st", self.inp)
        return self._scorer

    # ---- prompts ------------------------------------------------------------------------------------
    def request(self, state: AgentState, temperature: float, seed: int) -> LLMRequest:
        s: Sampling = self.inp.sampling
        msgs: list[tuple[str, str]] = [("system", separated(SYSTEM, s.separator))]
        if s.few_shot:
            msgs.extend((role, separated(text, s.separator)) for role, text in DEMO)
        msgs.append(("user", f"Question: {self.inp.question.text}"))
        for st in state.steps:
            if st["action"]:
                msgs.append(("assistant", f"Thought: {st['thought']}\nAction: {st['action']}"))
                msgs.append(("user", f"Observation: {st['observation']}"))
            else:  # a GoT merged thought
                msgs.append(("assistant", f"Thought: {st['thought']}"))
                msgs.append(("user", "Continue."))
        return LLMRequest(messages=tuple(msgs), temperature=temperature, top_p=s.top_p,
                          max_tokens=self.p.step_max_tokens, seed=seed, stop=("Observation:",))

    # ---- actions ------------------------------------------------------------------------------------
    def _node(self, text: str) -> tuple[int | None, str]:
        nid, how = resolve_entity(self.kg, self.index, text, graph_id=self.gid)
        if nid is None:
            return None, f"No node matches '{text}'."
        name = self.kg.names([nid])[0]
        note = "" if how in ("exact", "case") else f"('{text}' read as {name}) "
        return nid, note

    def _triples(self, edges, seen: Observed | None = None) -> str:
        n = self.p.max_observation_triples
        shown = list(edges)[:n]
        if seen is not None:
            seen.edges.extend(int(e) for e in shown)
            for e in shown:
                seen.nodes.extend((int(self.kg.heads[e]), int(self.kg.tails[e])))
        lines = triple_text(self.kg, shown)
        more = len(edges) - n
        return "\n".join(lines) + (f"\n... and {more} more" if more > 0 else "")

    def act(self, name: str, args: list[str], seen: Observed | None = None) -> str:
        """The observation of one parsed action (``Finish`` is handled by the caller); the entities and edges it
        shows are added to ``seen`` when given."""
        kg = self.kg
        if kg is None:
            return "No knowledge graph is available."
        seen = Observed() if seen is None else seen
        if name == "RetrieveNode":
            nid, how = resolve_entity(kg, self.index, args[0], graph_id=self.gid)
            if nid is not None:
                seen.nodes.append(int(nid))
            return f"No node matches '{args[0]}'." if nid is None else f"The node is {kg.names([nid])[0]}."
        nid, note = self._node(args[0])
        if nid is None:
            return note
        seen.nodes.append(int(nid))
        node = kg.names([nid])[0]
        rels = relations_of(kg, nid, graph_id=self.gid)
        feature = args[1]
        if name == "NodeFeature" and feature.lower() in _NAME_FEATURES:
            return f"{note}name: {node}"
        rel = None
        if feature and feature.lower() not in ("all", "relations", "attributes", "features", "any", "edges"):
            rel = resolve_relation(kg, self.index, feature, among=rels)
        if name == "NodeDegree":
            e = edges_of(kg, nid, rel, graph_id=self.gid)
            what = f"by {rel_name(kg, rel)}" if rel is not None else "in total"
            return f"{note}{node} has {len({other_end(kg, x, nid) for x in e.tolist()})} neighbours {what}."
        if name == "NeighborCheck" or rel is not None:
            e = edges_of(kg, nid, rel, graph_id=self.gid)
            return note + (self._triples(e.tolist(), seen) if len(e) else f"{node} has no {feature} neighbours.")
        # NodeFeature with a non-relation feature: every relation and its values
        parts = []
        for r in rels[: self.p.max_observation_triples]:
            es = edges_of(kg, nid, r, graph_id=self.gid).tolist()
            ends = [other_end(kg, x, nid) for x in es]
            vals = [kg.names([o])[0] for o in ends]
            nv = self.p.feature_values
            seen.nodes.extend(int(o) for o in ends[:nv])
            seen.edges.extend(int(x) for x in es[:nv])
            shown = ", ".join(vals[:nv]) + (f", ... ({len(vals)} in all)" if len(vals) > nv else "")
            parts.append(f"{rel_name(kg, r)}: {shown}")
        return note + (f"{node} - " + "; ".join(parts) if parts else f"{node} has no relations.")

    def step(self, state: AgentState, reply: str, parent: int, branch: int) -> AgentState:
        seen = Observed()
        thought = parse_thought(reply)
        parsed = parse_action(reply)
        if parsed is not None and parsed[0] == "Finish" and not parsed[1][0]:
            parsed = None
        if parsed is None:
            self.unparseable += 1
            action_line = re.sub(r"\s+", " ", reply or "").strip()[:120] or "(empty)"
            rec: AgentStep = {"thought": thought, "action": action_line, "observation": INVALID, "valid": False}
            answer = None
        else:
            name, args = parsed
            action_line = f"{name}[{', '.join(a for a in args if a)}]"
            if name == "Finish":
                rec = {"thought": thought, "action": action_line, "observation": "", "valid": True}
                answer = args[0]
            else:
                rec = {"thought": thought, "action": action_line, "observation": self.act(name, args, seen),
                       "valid": True}
                answer = None
        self.log.append({"step": self.step_no, "parent": parent, "branch": branch, "reply": reply, **rec})
        return AgentState(steps=state.steps + (rec,), answer=answer, nodes=_joined(state.nodes, seen.nodes),
                          shown=_joined(state.shown, seen.edges))

    # ---- decide: score ------------------------------------------------------------------------------
    def options(self, state: AgentState) -> list[tuple[str, list[str], str]]:
        """The valid actions of a chain as (action, args, text): RetrieveNode for the unobserved topic entities,
        NeighborCheck for each relation of each observed node that links it by a triple not shown yet (not yet
        taken; pre-ranked, cut to ``max_actions`` - 1), Finish once a node was observed."""
        kg = self.kg
        if kg is None:
            return []
        taken = {st["action"] for st in state.steps}
        shown = set(state.shown)
        out = [("RetrieveNode", [n], f"RetrieveNode[{n}]") for n in kg.names([t for t in self.topics
                                                                              if t not in state.nodes])]
        checks = []
        for nid in state.nodes:
            node = kg.names([nid])[0]
            es = edges_of(kg, nid, graph_id=self.gid)
            rels = dict.fromkeys(int(r) for r in kg.relations[es].tolist())  # relations_of's order
            new = {int(r) for e, r in zip(es.tolist(), kg.relations[es].tolist()) if e not in shown}
            for r in rels:
                rel = rel_name(kg, r)
                text = f"NeighborCheck[{node}, {rel}]"
                if r in new and text not in taken:  # a name two nodes share is offered once
                    taken.add(text)
                    checks.append(("NeighborCheck", [node, rel], text, f"{node} {rel_words(rel)}"))
        if checks:
            checks = [checks[i] for i in self.scorer.rank([c[3] for c in checks])]
        out += [c[:3] for c in checks]
        finish = bool(state.nodes)
        out = out[: self.p.max_actions - int(finish)]
        if finish:
            out.append((FINISH, [], FINISH))
        return out

    def score_request(self, state: AgentState, options: list[tuple[str, list[str], str]]) -> LLMRequest:
        """One scoring call: every valid action as the reply after the chain's actions and observations."""
        lines = []
        for st in state.steps:
            if st["action"]:
                lines.append(f"Action: {st['action']}")
                if st["observation"]:
                    lines.append(f"Observation: {st['observation']}")
            else:  # a GoT merged thought
                lines.append(f"Thought: {st['thought']}")
        prompt = SCORE_PROMPT.format(question=clean_question(self.inp.question.text),
                                     history="\n".join(lines) or "No actions yet.")
        return self.pol.decide.request([o[2] for o in options], ask=lambda: prompt, paper=None, system=SCORE_SYSTEM)

    def take(self, state: AgentState, option: tuple[str, list[str], str], scores: list[list], parent: int,
             branch: int, path: dict | None = None, walks: set | None = None) -> AgentState:
        """The chain grown by a chosen (scored) action (with demos: ``path``, the chain's most likely whole path
        when it was taken, for the trace; ``walks``, the relation paths the action walks); with demos, each node
        the action observed first gets its path."""
        name, args, text = option
        seen = Observed()
        obs = "" if name == FINISH else self.act(name, args, seen)
        rec: AgentStep = {"thought": "", "action": text, "observation": obs, "valid": True, "scores": scores}
        if path is not None:
            rec["best_path"] = path
        self.log.append({"step": self.step_no, "parent": parent, "branch": branch, **rec})
        paths = dict(state.paths)
        if self.book.active and name == "RetrieveNode":
            for n in seen.nodes:
                paths.setdefault(n, ())
        reach = dict(state.reach)
        if self.book.active and name == "NeighborCheck" and seen.nodes and seen.nodes[0] in paths:
            src = seen.nodes[0]  # act() records the checked node first, then each shown triple's two ends
            for e in seen.edges:
                o = other_end(self.kg, e, src)
                p = paths[src] + ((rel_name(self.kg, self.kg.relations[e]), int(self.kg.heads[e]) == src),)
                paths.setdefault(o, p)
                if o not in self.topics and o not in reach.get(p, ()):
                    reach[p] = reach.get(p, ()) + (o,)
        return AgentState(steps=state.steps + (rec,), nodes=_joined(state.nodes, seen.nodes),
                          shown=_joined(state.shown, seen.edges), paths=paths, walked=state.walked | (walks or set()),
                          reach=reach, end="finish" if name == FINISH else None)

    # ---- decide: score with demos: a best-first search over relation paths ------------------------------------------
    def path_options(self, state: AgentState) -> list[tuple[str, list[str], str, list, tuple]]:
        """The valid actions with demonstrations, as (action, args, text, steps, path): RetrieveNode for the
        unobserved topics (the empty path); NeighborCheck[node, relation] where it walks a relation path the
        chain has not walked yet (its steps: the directions with edges not shown yet; a path several nodes
        end share is offered at the first observed one; pre-ranked, cut to ``max_actions`` - 1); Finish once a
        node was observed."""
        kg = self.kg
        if kg is None:
            return []
        out = [("RetrieveNode", [n], f"RetrieveNode[{n}]", [], ()) for n in kg.names([t for t in self.topics
                                                                                      if t not in state.nodes])]
        walked = set(state.paths.values()) | set(state.reach) | state.walked
        shown, offered, checks = set(state.shown), set(), []
        for nid in state.nodes:
            h = state.paths.get(nid)
            if h is None:
                continue
            node = kg.names([nid])[0]
            es = edges_of(kg, nid, graph_id=self.gid)
            steps: dict[int, list] = {}
            for e, r in zip(es.tolist(), kg.relations[es].tolist()):
                st = (rel_name(kg, r), int(kg.heads[e]) == nid)
                if e in shown or h + (st,) in walked or h + (st,) in offered or st in steps.get(int(r), []):
                    continue
                steps.setdefault(int(r), []).append(st)
            for r, sts in steps.items():
                offered.update(h + (st,) for st in sts)
                rel = rel_name(kg, r)
                checks.append(("NeighborCheck", [node, rel], f"NeighborCheck[{node}, {rel}]", sts, h,
                               f"{node} {rel_words(rel)}"))
        if checks:
            checks = [checks[i][:5] for i in self.scorer.rank([c[5] for c in checks])]
        out += checks
        finish = bool(state.nodes)
        out = out[: self.p.max_actions - int(finish)]
        if finish:
            out.append((FINISH, [], FINISH, [], ()))
        return out

    def expand_by_path(self, states: list[AgentState], k: int) -> Gen:
        """One step of each chain with demonstrations (``decide.PathBook``): every path the options extend gets
        its next steps scored, each with its new path's ends (one call for the paths not scored before); a
        NeighborCheck scores as its best step (log P(path -> step)), RetrieveNode as the empty path
        (0), Finish as the chain's most likely whole path (log P(path '.')). The best is taken (ToT / GoT: the
        ``branching`` best): Finish once no walk can reach a more likely path."""
        book = self.book
        opts = [self.path_options(s) for s in states]
        groups: dict[tuple, list] = {}
        for os in opts:
            for o in os:
                if o[0] == "NeighborCheck":
                    groups.setdefault(o[4], []).extend(o[3])
        yield from book.expand(groups)  # the steps not scored before
        out: list[list[AgentState]] = []
        for i, (s, os) in enumerate(zip(states, opts)):
            if not os:
                self.log.append({"step": self.step_no, "parent": i, "branch": 0, "action": "",
                                 "observation": "No valid action.", "valid": False})
                out.append([AgentState(steps=s.steps, nodes=s.nodes, paths=s.paths, walked=s.walked, reach=s.reach,
                                       end="stuck")])
                continue
            best, bs = book.best(s.reach)
            scores = []
            for name, _, _, steps, h in os:
                if name == "RetrieveNode":
                    scores.append(0.0)
                elif name == FINISH:
                    scores.append(bs)
                else:
                    vals = [book.score.get(h + (st,)) for st in steps]
                    scores.append(max((v for v in vals if v is not None), default=None))
            chosen = dc.best_k([-1e18 if v is None else v for v in scores], k)
            scored = dc.scored_options([o[2] for o in os], scores)
            path = {"path": None if best is None else dc.path_text(best), "score": bs}
            out.append([self.take(s, os[c][:3], scored, i, j, path=path, walks={os[c][4] + (st,) for st in os[c][3]})
                        for j, c in enumerate(chosen)])
        return out

    def expand_scored(self, states: list[AgentState], k: int) -> Gen:
        opts = [self.options(s) for s in states]
        groups = [[self.score_request(s, os)] if os else [] for s, os in zip(states, opts)]
        recs = yield from gather(groups)
        out: list[list[AgentState]] = []
        for i, (s, os, rs) in enumerate(zip(states, opts, recs)):
            if not os:  # no valid action: the chain stops (the final answer comes as after max_steps)
                self.log.append({"step": self.step_no, "parent": i, "branch": 0, "action": "",
                                 "observation": "No valid action.", "valid": False})
                out.append([AgentState(steps=s.steps, nodes=s.nodes, end="stuck")])
                continue
            got = self.pol.decide.choose(rs[0], len(os), k)
            scored = dc.scored_options([o[2] for o in os], got.scores)
            out.append([self.take(s, os[c], scored, i, j) for j, c in enumerate(got.positions)])
        return out

    # ---- the Domain protocol --------------------------------------------------------------------------
    def expand(self, states: list[AgentState], k: int, temperature: float, seeds: list[list[int]]) -> Gen:
        self.step_no += 1
        if self.book.active:
            return (yield from self.expand_by_path(states, k))
        if self.pol.decide.scored:
            return (yield from self.expand_scored(states, k))
        groups = [[self.request(s, temperature, seeds[i][j]) for j in range(k)] for i, s in enumerate(states)]
        recs = yield from gather(groups)
        return [[self.step(s, text_of(r), i, j) for j, r in enumerate(rs)]
                for i, (s, rs) in enumerate(zip(states, recs))]

    def done(self, state: AgentState) -> bool:
        return state.answer is not None or state.end is not None

    def render(self, state: AgentState) -> str:
        out = []
        for st in state.steps:
            if st["thought"] or not self.pol.decide.scored:
                out.append(f"Thought: {st['thought']}")
            if st["action"]:
                out.append(f"Action: {st['action']}")
                if st["observation"]:
                    out.append(f"Observation: {st['observation']}")
        if state.answer is not None:
            out.append(f"Answer: {state.answer}")
        return "\n".join(out) or "(no steps yet)"

    def merge(self, a: AgentState, b: AgentState, thought: str) -> AgentState:
        seen = {st["action"] for st in a.steps}
        extra = tuple(st for st in b.steps if st["valid"] and st["action"] not in seen)
        merged: AgentStep = {"thought": thought, "action": "", "observation": "", "valid": True}
        self.log.append({"step": self.step_no, "parent": "merge", "branch": None, **merged})
        return AgentState(steps=a.steps + extra + (merged,), answer=None, nodes=_joined(a.nodes, b.nodes),
                          shown=_joined(a.shown, b.shown), paths={**b.paths, **a.paths}, walked=a.walked | b.walked,
                          reach=dc.merged_reach(a.reach, b.reach))

    def observations(self, state: AgentState) -> str:
        """The valid observations of a chain, one block each (the fallback's facts)."""
        return "\n".join(st["observation"] for st in state.steps if st["valid"] and st["observation"])


def _joined(nodes: tuple[int, ...], more) -> tuple[int, ...]:
    """``nodes`` followed by the new ones of ``more``, each once, in order."""
    return nodes + tuple(x for x in dict.fromkeys(int(m) for m in more) if x not in nodes)


@REASONERS.register("agent", params=AgentParams, version="6")
def agent(*, inp: ReasonInput, params: AgentParams) -> ReasonGen:
    """Graph-CoT agent: Thought → Action → Observation on the KG until ``Finish`` or ``max_steps``
    (``decide: score``: the action scored among the valid ones; ``answer: rank``: rank's answer over the entities
    observed; see the module doc).

    References
    ----------
    "Grounding LLM Reasoning with Knowledge Graphs" (2025), sections 4.1-4.2.1; Jin et al., Graph Chain-of-
    Thought (2024); Yao et al., ReAct (2023).
    """
    dom = AgentDomain(inp, params)
    pol = dom.pol
    res = yield from search(dom, question=inp.question.text, init=AgentState(), params=params,
                            max_steps=params.max_steps, sampling=inp.sampling, decider=pol.decide)
    finished = [s for s in res.states if s.answer is not None or s.end == "finish"]
    # demos: the kept state whose most likely whole path scores best
    best = dom.book.best_state(res.states, finished[0] if finished else res.states[0])
    trace: AgentTrace = {"reasoner": "agent", "strategy": params.strategy, "steps": [dict(s) for s in best.steps],
             "all_steps": dom.log, "search": res.trace}
    pol.stamp(trace)
    if pol.decide.scored and dom._scorer is not None:
        trace["prerank"] = dom.scorer.used
    dom.book.stamp(trace)
    unparseable = dom.unparseable + res.unparseable
    ids: dict[str, int] = {}
    if pol.answer.ranks and inp.kg is not None:
        nodes = [i for i in best.nodes if i not in dom.topics]
        path, _ = dom.book.best(best.reach)
        if path is not None:  # demos: the ends of the most likely whole relation path
            nodes = [i for i in nodes if i in best.reach[path]]
            trace["answer_path"] = dc.path_text(path)
        ids = {str(n): i for n, i in zip(inp.kg.names(nodes), nodes)}
    done = yield from pol.answer.final(ids=ids, facts=[ln for ln in dom.observations(best).splitlines() if ln.strip()],
                                       generated=best.answer, trace=trace, depth=res.steps, unparseable=unparseable)
    if done is not None:
        return done
    fb = yield from pol.answer.fallback("cot", facts=dom.observations(best), max_tokens=params.answer_max_tokens)
    chosen = best.end == "finish"  # decide: score chose Finish: this call is its answer, not a fallback
    trace["answer_reply" if chosen else "fallback_reply"] = fb.reply
    if chosen:
        trace["answer_from"] = "observations"
    return Reasoning(answer=fb.answer, depth=res.steps, fallback=None if chosen else "observations", trace=trace,
                     unparseable=unparseable + fb.unparseable)


__all__ = ["ACTIONS", "AgentParams", "AgentState", "agent", "parse_action", "parse_thought"]
