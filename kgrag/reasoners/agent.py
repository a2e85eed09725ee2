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

Defaults that differ from the paper: ``max_steps`` 6 (the paper's Table 1 uses n = 10 steps; its Figure 4 shows
the agent improving with more steps), ToT / GoT ``branching`` 2 and ``breadth`` 1 (paper k = t = 3, see
``strategies``). Not given by the paper, as params: ``max_observation_triples`` (15) triples per observation,
``feature_values`` (5) values shown per relation by ``NodeFeature``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from pydantic import Field

from kgrag.llm import LLMRequest
from kgrag.reasoners.baselines import cot_answer, cot_request
from kgrag.reasoners.core import REASONERS, ReasonGen, ReasonInput, Reasoning, Sampling, text_of
from kgrag.reasoners.kgtools import (
    clean_name, edges_of, other_end, rel_name, relations_of, resolve_entity, resolve_relation, triple_text,
)
from kgrag.reasoners.strategies import Gen, StrategyParams, gather, search


class AgentParams(StrategyParams):
    """Params of ``agent`` (the strategy fields are shared with ``explore``)."""

    max_steps: int = Field(6, ge=1, le=30, description="Thought/Action/Observation steps before the fallback answer")
    step_max_tokens: int = Field(64, ge=8, description="tokens of one Thought + Action reply")
    max_observation_triples: int = Field(15, ge=1, description="triples / values shown in one observation")
    answer_max_tokens: int = Field(
        160, ge=8, description="tokens of the fallback answer call (chain of thought over the observations)")
    feature_values: int = Field(5, ge=1, description="values shown per relation when NodeFeature lists every "
                                "relation of a node")


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
DEMO = (  # placeholder entities no KG holds (kgrag.generate.DEMO_NAMES)
    ("user", "Question: who directed the movies starred by [Example Actor]"),
    ("assistant", "Thought: I need the movies of Example Actor.\nAction: NeighborCheck[Example Actor, starred_actors]"),
    ("user", "Observation: (Example Film One, starred_actors, Example Actor)\n"
             "(Example Film Two, starred_actors, Example Actor)"),
    ("assistant", "Thought: Now the directors of these movies.\nAction: NeighborCheck[Example Film One, directed_by]"),
    ("user", "Observation: (Example Film One, directed_by, Example Director One)"),
    ("assistant", "Thought: And Example Film Two.\nAction: NeighborCheck[Example Film Two, directed_by]"),
    ("user", "Observation: (Example Film Two, directed_by, Example Director Two)"),
    ("assistant", "Thought: I have both directors.\nAction: Finish[Example Director One | Example Director Two]"),
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


@dataclass(eq=False)
class AgentState:
    """One chain: its steps (thought, action, observation, valid) and the answer once finished."""

    steps: tuple[dict, ...] = ()
    answer: str | None = None
    merged_from: tuple[int, ...] = field(default=())


class AgentDomain:
    """The agent's step for the strategy search: one LLM call per branch, then the action on the KG."""

    def __init__(self, inp: ReasonInput, params: AgentParams) -> None:
        self.inp, self.p, self.kg, self.index = inp, params, inp.kg, inp.index
        self.gid = inp.question.graph_id  # a question with its own graph: every action stays inside it
        self.unparseable = 0
        self.log: list[dict] = []
        self.step_no = 0

    # ---- prompts ------------------------------------------------------------------------------------
    def request(self, state: AgentState, temperature: float, seed: int) -> LLMRequest:
        s: Sampling = self.inp.sampling
        msgs: list[tuple[str, str]] = [("system", SYSTEM)]
        if s.few_shot:
            msgs.extend(DEMO)
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

    def _triples(self, edges) -> str:
        n = self.p.max_observation_triples
        lines = triple_text(self.kg, list(edges)[:n])
        more = len(edges) - n
        return "\n".join(lines) + (f"\n... and {more} more" if more > 0 else "")

    def act(self, name: str, args: list[str]) -> str:
        """The observation of one parsed action (``Finish`` is handled by the caller)."""
        kg = self.kg
        if kg is None:
            return "No knowledge graph is available."
        if name == "RetrieveNode":
            nid, how = resolve_entity(kg, self.index, args[0], graph_id=self.gid)
            return f"No node matches '{args[0]}'." if nid is None else f"The node is {kg.names([nid])[0]}."
        nid, note = self._node(args[0])
        if nid is None:
            return note
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
            return note + (self._triples(e.tolist()) if len(e) else f"{node} has no {feature} neighbours.")
        # NodeFeature with a non-relation feature: every relation and its values
        parts = []
        for r in rels[: self.p.max_observation_triples]:
            vals = [kg.names([other_end(kg, x, nid)])[0] for x in edges_of(kg, nid, r, graph_id=self.gid).tolist()]
            nv = self.p.feature_values
            shown = ", ".join(vals[:nv]) + (f", ... ({len(vals)} in all)" if len(vals) > nv else "")
            parts.append(f"{rel_name(kg, r)}: {shown}")
        return note + (f"{node} - " + "; ".join(parts) if parts else f"{node} has no relations.")

    def step(self, state: AgentState, reply: str, parent: int, branch: int) -> AgentState:
        thought = parse_thought(reply)
        parsed = parse_action(reply)
        if parsed is not None and parsed[0] == "Finish" and not parsed[1][0]:
            parsed = None
        if parsed is None:
            self.unparseable += 1
            action_line = re.sub(r"\s+", " ", reply or "").strip()[:120] or "(empty)"
            rec = {"thought": thought, "action": action_line, "observation": INVALID, "valid": False}
            answer = None
        else:
            name, args = parsed
            action_line = f"{name}[{', '.join(a for a in args if a)}]"
            if name == "Finish":
                rec = {"thought": thought, "action": action_line, "observation": "", "valid": True}
                answer = args[0]
            else:
                rec = {"thought": thought, "action": action_line, "observation": self.act(name, args), "valid": True}
                answer = None
        self.log.append({"step": self.step_no, "parent": parent, "branch": branch, "reply": reply, **rec})
        return AgentState(steps=state.steps + (rec,), answer=answer)

    # ---- the Domain protocol --------------------------------------------------------------------------
    def expand(self, states: list[AgentState], k: int, temperature: float, seeds: list[list[int]]) -> Gen:
        self.step_no += 1
        groups = [[self.request(s, temperature, seeds[i][j]) for j in range(k)] for i, s in enumerate(states)]
        recs = yield from gather(groups)
        return [[self.step(s, text_of(r), i, j) for j, r in enumerate(rs)]
                for i, (s, rs) in enumerate(zip(states, recs))]

    def done(self, state: AgentState) -> bool:
        return state.answer is not None

    def render(self, state: AgentState) -> str:
        out = []
        for st in state.steps:
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
        merged = {"thought": thought, "action": "", "observation": "", "valid": True}
        self.log.append({"step": self.step_no, "parent": "merge", "branch": None, **merged})
        return AgentState(steps=a.steps + extra + (merged,), answer=None)

    def observations(self, state: AgentState) -> str:
        """The valid observations of a chain, one block each (the fallback's facts)."""
        return "\n".join(st["observation"] for st in state.steps if st["valid"] and st["observation"])


@REASONERS.register("agent", params=AgentParams, version="2")
def agent(*, inp: ReasonInput, params: AgentParams) -> ReasonGen:
    """Graph-CoT agent: Thought → Action → Observation on the KG until ``Finish`` or ``max_steps``.

    References
    ----------
    "Grounding LLM Reasoning with Knowledge Graphs" (2025), sections 4.1-4.2.1; Jin et al., Graph Chain-of-
    Thought (2024); Yao et al., ReAct (2023).
    """
    dom = AgentDomain(inp, params)
    res = yield from search(dom, question=inp.question.text, init=AgentState(), params=params,
                            max_steps=params.max_steps, sampling=inp.sampling)
    finished = [s for s in res.states if s.answer is not None]
    best = finished[0] if finished else res.states[0]
    trace = {"reasoner": "agent", "strategy": params.strategy, "steps": [dict(s) for s in best.steps],
             "all_steps": dom.log, "search": res.trace}
    unparseable = dom.unparseable + res.unparseable
    if finished:
        return Reasoning(answer=best.answer or "", depth=res.steps, trace=trace, unparseable=unparseable)
    facts = dom.observations(best)
    (rec,) = yield [cot_request(inp.question.text, inp.sampling, facts=facts,
                               max_tokens=params.answer_max_tokens, choices=inp.question.choices)]
    ans, ok = cot_answer(text_of(rec))
    trace["fallback_reply"] = text_of(rec)
    return Reasoning(answer=ans, depth=res.steps, fallback="observations", trace=trace,
                     unparseable=unparseable + int(not ok and bool(text_of(rec))))


__all__ = ["ACTIONS", "AgentParams", "AgentState", "agent", "parse_action", "parse_thought"]
