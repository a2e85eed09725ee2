"""Golden tests: on a five-edge KG, with a scripted LLM whose replies are fixed and keyed on the request, each
reasoner must produce the exact chains / states / answers its paper's algorithm gives, step by step.

The expected values were derived by hand from the papers (not by running the code):

* ToG — Sun et al. (ICLR 2024), section 2.1 / Algorithm 1 (as FastToG describes it): per depth, relation
  pruning over the current entities' (entity, relation, direction) candidates, entity pruning over the triples
  they reach, a reasoning call over every kept path.
* FastToG — Liang et al. (2024), Algorithms 1 and 2: initial phase = multiple-choice pruning of the
  communities around c0 plus one reasoning call ("1 round of pruning and reasoning in the initial phase");
  then per round one single-choice pruning per chain and one reasoning call. With MaxSize M = 1 every community
  is one node (the paper's "MaxSize = 1 refers to ... ToG").
* Agent with ToT / GoT — "Grounding LLM Reasoning with Knowledge Graphs" (2025), section 4.1 (equations 2, 3:
  k children per kept state, the evaluator keeps b; GoT merges two chains) and 4.2.1 (Thought → Action →
  Observation).
* Explore — the same paper, section 4.2.2 / Algorithm 1: thought → entity extraction → relation pruning →
  neighbour pruning → triples.

The KG (edge ids in this order)::

    0 (Film A, directed_by, Dir X)      1 (Film A, starred_actors, Actor P)
    2 (Film B, starred_actors, Actor P) 3 (Film B, directed_by, Dir Y)      4 (Dir X, born_in, City Q)
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from kgrag.kg.duckdb_io import write_duckdb
from kgrag.llm.calls import LLMClient, LLMReply
from kgrag.reasoning.reasoners import REASONERS, ReasonInput, Sampling, run_batched
from kgrag.reasoning.reasoners.tog import incident_edges
from kgrag.kg.store import KGStore
from kgrag.types import Question
from tests.conftest import tiny_tables

EDGES = [
    ("Film A", "directed_by", "Dir X"),
    ("Film A", "starred_actors", "Actor P"),
    ("Film B", "starred_actors", "Actor P"),
    ("Film B", "directed_by", "Dir Y"),
    ("Dir X", "born_in", "City Q"),
]
QUESTION = "who directed the movies starred by [Actor P]"


@pytest.fixture(scope="module")
def gkg(tmp_path_factory) -> KGStore:
    path = tmp_path_factory.mktemp("golden") / "kg.duckdb"
    write_duckdb(path, tiny_tables(EDGES))
    return KGStore(path)


class Scripted:
    """Fixed replies: ``reply(request)`` reads the request (its messages and seed); every request is kept."""

    model_id = "scripted"

    def __init__(self, reply):
        self.reply, self.requests = reply, []

    def generate(self, requests):
        self.requests.extend(requests)
        return [LLMReply(text=self.reply(r), tokens_in=1, tokens_out=1) for r in requests]


def user(req) -> str:
    return req.messages[-1][1]


def system(req) -> str:
    return req.messages[0][1]


def letters_of(text: str, needles, brace_lines: bool = True) -> str:
    """``{X}`` of the option lines that contain any of ``needles``, in the needles' order."""
    pat = r"^\{([A-Z])\} (.*)$" if brace_lines else r"^\(([A-Z])\) (.*)$"
    opts = [(m.group(1), m.group(2)) for m in re.finditer(pat, text, re.M)]
    out = []
    for n in needles:
        for c, o in opts:
            if n in o and f"{{{c}}}" not in out:
                out.append(f"{{{c}}}")
    return " ".join(out)


def run(name, kg, reply, *, sampling=Sampling(), **params):
    b = Scripted(reply)
    entry = REASONERS.get(name)
    q = Question("g1", QUESTION, kg.ids_of(["Actor P"]))
    job = entry.impl(inp=ReasonInput(question=q, context="", kg=kg, sampling=sampling), params=entry.params(**params))
    ((res, calls),) = run_batched(jobs=[job], client=LLMClient(b, cache=None))
    return res, calls, b


# ---------------------------------------------------------------------------------------------- ToG

def test_tog_golden(gkg):
    """W = 2, D = 2. Depth 1: Actor P's only relation candidate is (?, starred_actors, Actor P); it reaches Film A
    and Film B (two chains); the facts do not say who directed: Unknown. Depth 2: the chain ends Film A, Film B
    offer (Film A, directed_by, ?) and (Film B, directed_by, ?) (the starred_actors edges are on the paths);
    the chains grow to Dir X and Dir Y; the reasoning call sees all four triples and answers."""
    def reply(req):
        u = user(req)
        if "Relations of the current entities" in u:
            return letters_of(u, ["directed_by"]) or letters_of(u, ["starred_actors"])
        if "Candidate facts" in u:
            return letters_of(u, ["Dir X", "Dir Y"]) or letters_of(u, ["Film A", "Film B"])
        if "Knowledge graph paths" in u:
            return "Answer: Dir X | Dir Y" if "directed_by" in u else "Answer: Unknown"
        return "Answer: fallback"

    res, calls, b = run("tog", gkg, reply, width=2, depth=2)
    d1, d2 = res.trace["depths"]
    assert d1["relations"]["options"] == ["(?, starred_actors, Actor P)"]
    assert d1["relations"]["chosen"] == ["(?, starred_actors, Actor P)"]
    assert sorted(d1["entities"]["options"]) == ["(Film A, starred_actors, Actor P)",
                                                 "(Film B, starred_actors, Actor P)"]
    assert d1["chains"] == [["(Film A, starred_actors, Actor P)"], ["(Film B, starred_actors, Actor P)"]]
    assert d1["reasoning"] == {"reply": "Answer: Unknown", "parsed": True, "answer": None}
    assert sorted(d2["relations"]["options"]) == ["(Film A, directed_by, ?)", "(Film B, directed_by, ?)"]
    assert d2["chains"] == [["(Film A, starred_actors, Actor P)", "(Film A, directed_by, Dir X)"],
                            ["(Film B, starred_actors, Actor P)", "(Film B, directed_by, Dir Y)"]]
    assert user(b.requests[-1]).startswith(
        "Knowledge graph paths (head, relation, tail):\n(Film A, starred_actors, Actor P)\n"
        "(Film A, directed_by, Dir X)\n(Film B, starred_actors, Actor P)\n(Film B, directed_by, Dir Y)\n\n"
        "Question: who directed the movies starred by Actor P\n")
    assert res.answer == "Dir X | Dir Y" and res.depth == 2 and res.fallback is None and res.unparseable == 0
    assert res.trace["stop"] == "answered" and len(calls) == 6


def test_hub_truncation_is_a_seeded_random_subsample(tmp_path):
    """Past max_edges a hub's incident edges are a uniform seeded subsample, not the first ones in KB order."""
    star = [(f"m{i:02d}", "r", "hub") for i in range(30)]
    path = tmp_path / "star.duckdb"
    write_duckdb(path, tiny_tables(star))
    kg = KGStore(path)
    hub = kg.ids_of(["hub"])
    first = incident_edges(kg, hub, None, 5)
    assert first.tolist() == list(range(5))  # without a generator: KB order (the old behaviour)
    draws = [incident_edges(kg, hub, None, 5, rng=np.random.default_rng([0, s])) for s in range(4)]
    assert all(len(d) == 5 and np.all(np.diff(d) > 0) and set(d.tolist()) <= set(range(30)) for d in draws)
    assert len({tuple(d.tolist()) for d in draws}) > 1  # different seeds, different subsamples
    again = incident_edges(kg, hub, None, 5, rng=np.random.default_rng([0, 0]))
    assert np.array_equal(again, draws[0])  # the same seed, the same subsample
    # below the cap nothing is drawn: all edges, sorted
    assert incident_edges(kg, hub, None, 100, rng=np.random.default_rng(0)).tolist() == list(range(30))


# ---------------------------------------------------------------------------------------------- FastToG

def fast_reply(req):
    u = user(req)
    if "Selection:" in u:
        if "up to" in u:  # the initial multiple-choice pruning: both films
            return letters_of(u, ["Film A", "Film B"])
        return letters_of(u, ["directed by"])
    if u.startswith("Context:"):
        return "Answer: Dir X | Dir Y" if "directed by" in u else "Answer: Unknown"
    return "Answer: fallback"


def test_fasttog_golden(gkg):
    """W = 2, M = 1 (one-node communities), rho = 1. Initial phase: the communities adjacent to c0 = {Actor P}
    are {Film A} and {Film B}; both become chain heads; the initial reasoning over them says Unknown. Round 1:
    around {Film A} the only adjacent unvisited community is {Dir X} (Actor P is visited, City Q and Film B are
    not adjacent), around {Film B} it is {Dir Y}; the reasoning call over both chains answers: depth 1."""
    res, calls, b = run("fasttog", gkg, fast_reply, width=2, d_max=3, max_size=1, rho=1.0)
    init = res.trace["initial"]
    assert sorted(init["options"]) == ["Film A starred actors Actor P", "Film B starred actors Actor P"]
    assert init["chains"] == [[["Film A"]], [["Film B"]]]
    assert init["context"] == "Chain 1: Film A starred actors Actor P\nChain 2: Film B starred actors Actor P"
    assert init["reasoning"] == {"reply": "Answer: Unknown", "parsed": True, "answer": None}
    (d1,) = res.trace["depths"]
    assert [p["options"] for p in d1["pruning"]] == [["Film A directed by Dir X"], ["Film B directed by Dir Y"]]
    assert d1["chains"] == [[["Film A"], ["Dir X"]], [["Film B"], ["Dir Y"]]]
    assert d1["context"] == ("Chain 1: Film A starred actors Actor P -> Film A directed by Dir X\n"
                             "Chain 2: Film B starred actors Actor P -> Film B directed by Dir Y")
    assert res.answer == "Dir X | Dir Y" and res.depth == 1 and res.fallback is None and res.unparseable == 0
    assert res.trace["llm_requests"] == ["prune_multi", "reason", "prune", "prune", "reason"] and len(calls) == 5
    # the premise of a chain's single-choice prompt: the start community, then the chain's communities
    prunes = [r for r in b.requests if "Selection:" in user(r) and "up to" not in user(r)]
    assert "Premise: Actor P; Film A starred actors Actor P\n" in user(prunes[0])
    # the paper's temperatures: pruning 0.4, reasoning 0.1
    assert {r.temperature for r in b.requests if "Selection:" in user(r)} == {0.4}
    assert {r.temperature for r in b.requests if user(r).startswith("Context:")} == {0.1}


def test_fasttog_golden_answers_in_the_initial_phase(gkg):
    """Asked which films Actor P starred in, the head communities already answer: depth 0, two calls."""
    def reply(req):
        u = user(req)
        if u.startswith("Context:"):
            return "Answer: Film A | Film B" if "starred actors Actor P" in u else "Answer: Unknown"
        return fast_reply(req)

    res, calls, _ = run("fasttog", gkg, reply, width=2, d_max=3, max_size=1, rho=1.0)
    assert res.answer == "Film A | Film B" and res.depth == 0 and res.trace["depths"] == []
    assert res.trace["llm_requests"] == ["prune_multi", "reason"] and res.trace["stop"] == "answered"


# ---------------------------------------------------------------------------------------------- agent: ToT, GoT

AGENT_SYSTEM_START = "You answer a question by exploring a knowledge graph"
OBS_FILMS = "(Film A, starred_actors, Actor P)\n(Film B, starred_actors, Actor P)"


def agent_reply(steps: dict, evaluate):
    """Agent turns keyed on (last user message, seed); evaluator and merge prompts answered by ``evaluate``."""
    def reply(req):
        if system(req).startswith(AGENT_SYSTEM_START):
            return steps[(user(req), req.seed)]
        if "step by step" in system(req):
            return "Answer: Dir Y" if "(Film B, directed_by, Dir Y)" in user(req) else "Answer: none"
        return evaluate(req)
    return reply


def pick(needle):
    """A select evaluator naming (in braces) the candidate whose block holds ``needle``."""
    def ev(req):
        starts = list(re.finditer(r"^\(([A-Z])\) ", user(req), re.M))
        for m, nxt in zip(starts, starts[1:] + [None]):
            if needle in user(req)[m.start(): nxt.start() if nxt else None]:
                return "{" + m.group(1) + "}"
        return ""
    return ev


def test_agent_tot_golden(gkg):
    """ToT, k = 2, b = 1, select. Step 1: branch 0 lists Actor P's films, branch 1 only finds the node; the
    evaluator keeps branch 0. Step 2 (from it): branch 0 asks Film A's director, branch 1 Film B's; the evaluator
    keeps the one that found Dir Y. Step 3: branch 0 finishes with Dir Y, branch 1 counts neighbours; the
    evaluator keeps the finished one, which is the answer at depth 3."""
    q0 = f"Question: {QUESTION}"
    steps = {
        (q0, 0): "Thought: I need the movies of Actor P.\nAction: NeighborCheck[Actor P, starred_actors]",
        (q0, 1): "Thought: Find the node.\nAction: RetrieveNode[Actor P]",
        (f"Observation: {OBS_FILMS}", 0): "Thought: The director of Film A.\nAction: NeighborCheck[Film A, directed_by]",
        (f"Observation: {OBS_FILMS}", 1): "Thought: The director of Film B.\nAction: NeighborCheck[Film B, directed_by]",
        ("Observation: (Film B, directed_by, Dir Y)", 0): "Thought: Found it.\nAction: Finish[Dir Y]",
        ("Observation: (Film B, directed_by, Dir Y)", 1): "Thought: Count them.\nAction: NodeDegree[Film B, directed_by]",
    }
    needles = iter(["NeighborCheck[Actor P", "Dir Y)", "Answer: Dir Y"])
    res, calls, b = run("agent", gkg, agent_reply(steps, lambda req: pick(next(needles))(req)),
                        strategy="tot", branching=2, breadth=1, evaluator="select", max_steps=3)
    assert [s["action"] for s in res.trace["steps"]] == [
        "NeighborCheck[Actor P, starred_actors]", "NeighborCheck[Film B, directed_by]", "Finish[Dir Y]"]
    assert [s["observation"] for s in res.trace["steps"]] == [OBS_FILMS, "(Film B, directed_by, Dir Y)", ""]
    assert [(r["candidates"], r["chosen"], r["kept"]) for r in res.trace["search"]] == [
        (2, [0], [0]), (2, [1], [1]), (2, [0], [0])]
    assert res.answer == "Dir Y" and res.depth == 3 and res.fallback is None and len(calls) == 9
    # branches of one state differ by seed only and are sampled at branch_temperature
    agent_reqs = [r for r in b.requests if system(r).startswith(AGENT_SYSTEM_START)]
    assert [r.seed for r in agent_reqs] == [0, 1] * 3 and {r.temperature for r in agent_reqs} == {0.7}


def test_agent_got_keeps_a_finished_state(gkg):
    """GoT, k = 3, b = 1: branch 0 finishes at step 1 and the evaluator keeps it. The two open branches must not
    be merged into the one place (which would drop the answer): the search ends with the answer at depth 1."""
    q0 = f"Question: {QUESTION}"
    steps = {
        (q0, 0): "Thought: I know it.\nAction: Finish[Dir X | Dir Y]",
        (q0, 1): "Thought: I need the movies of Actor P.\nAction: NeighborCheck[Actor P, starred_actors]",
        (q0, 2): "Thought: Find the node.\nAction: RetrieveNode[Actor P]",
    }
    res, calls, b = run("agent", gkg, agent_reply(steps, pick("Answer:")), strategy="got", branching=3, breadth=1,
                        evaluator="select", max_steps=3)
    assert res.answer == "Dir X | Dir Y" and res.depth == 1 and res.fallback is None
    assert len(calls) == 4 and not any("Combine what both chains" in user(r) for r in b.requests)
    assert res.trace["search"] == [{"step": 1, "candidates": 3, "evaluator": "select", "reply": "{A}",
                                    "chosen": [0], "kept": [0]}]


def test_agent_got_merges_the_two_best_open_chains(gkg):
    """GoT, k = 2, b = 2, one step: two open chains (no evaluation: 2 candidates fit b = 2); the merge of chain 0
    and chain 1 takes the first place, chain 0 the second. No Finish: the fallback answers from the merged
    state's observations, chain 0's then chain 1's."""
    q0 = f"Question: {QUESTION}"
    steps = {
        (q0, 0): "Thought: I need the movies of Actor P.\nAction: NeighborCheck[Actor P, starred_actors]",
        (q0, 1): "Thought: The director of Film B.\nAction: NeighborCheck[Film B, directed_by]",
    }
    res, calls, b = run("agent", gkg, agent_reply(steps, lambda req: "Film B, starred by Actor P, is by Dir Y."),
                        strategy="got", branching=2, breadth=2, evaluator="select", max_steps=1)
    (rec,) = res.trace["search"]
    assert rec["merged"] == {"parents": [0, 1], "thought": "Film B, starred by Actor P, is by Dir Y."}
    assert rec["kept"] == ["merged", 0]
    assert [s["action"] for s in res.trace["steps"]] == [
        "NeighborCheck[Actor P, starred_actors]", "NeighborCheck[Film B, directed_by]", ""]
    cot = b.requests[-1]
    assert user(cot) == (f"Facts:\n{OBS_FILMS}\n(Film B, directed_by, Dir Y)\n\n"
                         "Question: who directed the movies starred by Actor P")
    assert res.answer == "Dir Y" and res.fallback == "observations" and len(calls) == 4


# ---------------------------------------------------------------------------------------------- explore

def test_explore_golden(gkg):
    """CoT, depth 1, max_neighbours 1. Step 1: the thought (which echoes the instruction — not an answer) names
    Actor P; Actor P has one relation (no relation-pruning call); of its two neighbour triples the LLM keeps
    Film B's. Step 2: the thought prompt shows that one fact and the thought answers: depth 2, four calls."""
    t1 = ("I should look up the movies of Actor P. If the facts already answer the question, write "
          "'Answer: name | name' instead.")

    def reply(req):
        u = user(req)
        if system(req).startswith("You list the entity names"):
            return "Actor P"
        if system(req).startswith("You pick the knowledge graph items"):
            return letters_of(u, ["Film B"], brace_lines=False)
        if "(Film B, starred_actors, Actor P)" in u:
            return "Answer: Film B"
        return t1

    res, calls, b = run("explore", gkg, reply, depth=1, max_relations=1, max_neighbours=1, max_steps=3)
    s1, s2 = res.trace["steps"]
    assert s1["thought"] == t1 and s1["extraction"] == "Actor P"
    assert s1["entities"] == [{"text": "Actor P", "entity": "Actor P", "how": "exact"}]
    assert s1["explored"] == [{"level": 1, "entity": "Actor P", "relations": ["starred_actors"],
                               "triples": ["(Film B, starred_actors, Actor P)"]}]
    assert s2["thought"] == "Answer: Film B"
    assert res.trace["triples"] == ["(Film B, starred_actors, Actor P)"] and res.trace["seed_entities"] == ["Actor P"]
    assert res.answer == "Film B" and res.depth == 2 and len(calls) == 4
    thought2 = [r for r in b.requests if system(r).startswith("You answer a question over a knowledge graph")][-1]
    assert "Knowledge graph facts (head, relation, tail):\n(Film B, starred_actors, Actor P)" in user(thought2)
    assert f"Thoughts so far:\n1. {t1}" in user(thought2)
