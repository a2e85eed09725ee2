"""``decide: score`` and ``answer: rank`` of the Graph-CoT agent, graph exploration and the ToT / GoT evaluator
(kgrag.reasoning.reasoners.decide): golden steps on the five-edge KG with scripted scores, failed scoring calls, and the
real SmolLM2 on the same KG.

Scripted scores are log-probs per option (``ScriptedScores``, ``prefer`` of tests/test_decide_tog.py: an option
holding a preferred needle scores -1, others -5, over 2 tokens; the option's score is their mean). The expected
actions, pruning and answers follow from the papers' algorithms ("Grounding LLM Reasoning with Knowledge
Graphs", 2025: section 4.1 equations 2-3, section 4.2.1 Thought → Action → Observation, section 4.2.2 Algorithm
1) with each decision taken as the best-scored option(s). The KG (edge ids in this order)::

    0 (Film A, directed_by, Dir X)      1 (Film A, starred_actors, Actor P)
    2 (Film B, starred_actors, Actor P) 3 (Film B, directed_by, Dir Y)      4 (Dir X, born_in, City Q)
"""

from __future__ import annotations

import json
import math

from kgrag.llm.calls import LLMClient, LLMReply
from kgrag.reasoning.reasoners import REASONERS, ReasonInput, Sampling, run_batched
from kgrag.reasoning.reasoners.decide import ENOUGH_OPTIONS
from kgrag.reasoning.reasoners.strategies import EVAL_SYSTEM
from kgrag.types import Question
from tests.test_decide_tog import ScriptedScores, prefer, smollm2_client
from tests.test_golden_reasoners import OBS_FILMS, QUESTION, gkg, user  # noqa: F401  (fixture)

ENTITIES = {"Film A", "Film B", "Dir X", "Dir Y", "City Q", "Actor P"}


def run(name, kg, backend, **params):
    entry = REASONERS.get(name)
    q = Question("g1", QUESTION, kg.ids_of(["Actor P"]))
    job = entry.impl(inp=ReasonInput(question=q, context="", kg=kg, sampling=Sampling()), params=entry.params(**params))
    ((res, calls),) = run_batched(jobs=[job], client=LLMClient(backend, cache=None))
    return res, calls


def is_action(req) -> bool:
    return "Which action comes next?" in user(req)


def is_eval(req) -> bool:
    return req.messages[0][1] == EVAL_SYSTEM


def finish_until_a_director(base):
    """``Finish`` scores best (-0.25 mean) once the history shows Dir Y, else worst (-4.5); other options by
    ``base``."""
    def score(req, opt):
        if opt == "Finish":
            return -0.5 if "Dir Y" in user(req) else -9.0
        return base(req, opt)
    return score


# ---------------------------------------------------------------------------------------------- agent

def test_agent_cot_scored_actions_and_rank_answer(gkg):
    """CoT, decide score, answer rank. Step 1: nothing observed, the only valid action is RetrieveNode[Actor P]
    (no Finish yet). Step 2: Actor P's one relation, or Finish: NeighborCheck[Actor P, starred_actors] scores
    best and shows Film A, Film B. Step 3: Actor P's NeighborCheck is taken and the films' starred_actors would
    show only triples already shown, so the options are the films' directed_by and Finish: Film B's is preferred;
    it shows Dir Y. Step 4: Film A's directed_by or Finish (Dir Y's one triple was shown): Finish scores best.
    Rank scores the entities
    observed, the topic Actor P left out (Film A, Film B, Dir Y in observation order): Dir Y."""
    base = prefer("RetrieveNode", "Actor P, starred_actors", "Film B, directed_by", answer={"Dir Y": -0.5})
    b = ScriptedScores(finish_until_a_director(base))
    res, calls = run("agent", gkg, b, decide="score", answer="rank", max_steps=6)
    steps = res.trace["steps"]
    assert [s["action"] for s in steps] == ["RetrieveNode[Actor P]", "NeighborCheck[Actor P, starred_actors]",
                                            "NeighborCheck[Film B, directed_by]", "Finish"]
    assert [s["observation"] for s in steps] == ["The node is Actor P.", OBS_FILMS, "(Film B, directed_by, Dir Y)", ""]
    assert steps[0]["scores"] == [["RetrieveNode[Actor P]", -0.5]]
    assert steps[1]["scores"] == [["NeighborCheck[Actor P, starred_actors]", -0.55], ["Finish", -4.5]]
    s3 = dict(map(tuple, steps[2]["scores"]))
    assert set(s3) == {"NeighborCheck[Film A, directed_by]", "NeighborCheck[Film B, directed_by]", "Finish"}
    assert steps[2]["scores"][-1][0] == "Finish"  # listed last: a tie goes to a NeighborCheck
    assert s3["NeighborCheck[Film B, directed_by]"] == -0.6 and s3["Finish"] == -4.5
    assert steps[3]["scores"] == [["NeighborCheck[Film A, directed_by]", -2.5], ["Finish", -0.25]]
    assert res.answer == "Dir Y" and res.depth == 4 and res.fallback is None and res.unparseable == 0
    assert res.trace["answer_from"] == "rank" and res.trace["rank_top"][0] == ["Dir Y", -0.5]
    # 4 action calls + rank, every one a scoring call; rank's names are the observed entities but the topic
    assert len(calls) == 5 and all(r.continuations for r in b.requests)
    rank = b.requests[-1]
    assert rank.continuations == ("Film A", "Film B", "Dir Y")
    assert "(Film B, directed_by, Dir Y)" in user(rank) and user(rank).endswith("Answer:")
    # the step-4 action prompt carries the chain's actions and observations; its options are the reply
    assert user(b.requests[3]) == (
        "Question: who directed the movies starred by Actor P\n\n"
        "Action: RetrieveNode[Actor P]\nObservation: The node is Actor P.\n"
        f"Action: NeighborCheck[Actor P, starred_actors]\nObservation: {OBS_FILMS}\n"
        "Action: NeighborCheck[Film B, directed_by]\nObservation: (Film B, directed_by, Dir Y)\n\n"
        "Which action comes next? Reply with the action.")
    json.dumps(res.trace)


def test_agent_scored_finish_with_generated_answer(gkg):
    """decide score, answer generate: the chosen Finish is answered by the chain-of-thought call over the
    observations (not a fallback); without Finish by max_steps the same call is the fallback."""
    base = prefer("RetrieveNode", "Actor P, starred_actors", "Film B, directed_by")

    def text(req):
        return "Answer: Dir Y" if "(Film B, directed_by, Dir Y)" in user(req) else "Answer: none"
    b = ScriptedScores(finish_until_a_director(base), text=text)
    res, calls = run("agent", gkg, b, decide="score", answer="generate", max_steps=6)
    assert res.answer == "Dir Y" and res.fallback is None and res.trace["answer_from"] == "observations"
    assert [bool(r.continuations) for r in b.requests] == [True] * 4 + [False] and len(calls) == 5
    res, calls = run("agent", gkg, ScriptedScores(finish_until_a_director(base), text=text), decide="score",
                     max_steps=2)
    assert res.fallback == "observations" and res.answer == "none" and len(calls) == 3


def test_agent_tot_scored_branches_and_scored_evaluator(gkg):
    """ToT, k = 2, b = 1, decide score (the select evaluator scored). Step 1: one valid action, one child (no
    evaluation). Step 2: the two best actions are the children: Finish (scored first) and NeighborCheck[Actor P,
    starred_actors]; the evaluator prefers the state that shows Film B: child 1. Step 3: the children are the
    two best NeighborCheck (Film A's directed_by first); the evaluator prefers the state showing Dir Y: child 1.
    max_steps ends the search; rank answers over the kept chain's observed entities."""
    def score(req, opt):
        u = user(req)
        if is_eval(req):
            return -1.0 if "Dir Y" in opt else -2.0 if "(Film B, starred_actors" in opt else -5.0
        if "Answer:" in u:
            return {"Dir Y": -0.5}.get(opt, -9.0)
        if opt == "Finish":
            return -1.0 if "starred_actors" not in u else -9.0
        return {"RetrieveNode[Actor P]": -1.0, "NeighborCheck[Actor P, starred_actors]": -3.0,
                "NeighborCheck[Film A, directed_by]": -1.0, "NeighborCheck[Film B, directed_by]": -1.2}.get(opt, -5.0)
    b = ScriptedScores(score)
    res, calls = run("agent", gkg, b, decide="score", answer="rank", strategy="tot", branching=2, breadth=1,
                     evaluator="select", max_steps=3)
    assert res.trace["search"] == [
        {"step": 1, "candidates": 1, "kept": [0]},
        {"step": 2, "candidates": 2, "evaluator": "select", "decide": "score", "scores": [-2.5, -1.0],
         "chosen": [1], "kept": [1]},
        {"step": 3, "candidates": 2, "evaluator": "select", "decide": "score", "scores": [-1.0, -0.5],
         "chosen": [1], "kept": [1]},
    ]
    assert [s["action"] for s in res.trace["steps"]] == [
        "RetrieveNode[Actor P]", "NeighborCheck[Actor P, starred_actors]", "NeighborCheck[Film B, directed_by]"]
    # every branch is traced: 1 + 2 + 2
    assert [(s["step"], s["branch"], s["action"]) for s in res.trace["all_steps"]] == [
        (1, 0, "RetrieveNode[Actor P]"), (2, 0, "Finish"), (2, 1, "NeighborCheck[Actor P, starred_actors]"),
        (3, 0, "NeighborCheck[Film A, directed_by]"), (3, 1, "NeighborCheck[Film B, directed_by]")]
    assert res.answer == "Dir Y" and res.depth == 3 and res.unparseable == 0
    # action calls 1 + 1 + 1, evaluator calls 2, rank 1; the evaluator scores the two renderings in one call
    assert len(calls) == 6 and all(r.continuations for r in b.requests)
    evals = [r for r in b.requests if is_eval(r)]
    assert len(evals) == 2 and all(len(r.continuations) == 2 for r in evals)
    assert evals[0].continuations[0].endswith("Action: Finish")


def test_agent_failed_scoring_calls_take_the_prerank_first(gkg):
    """Every action scoring call fails: step 1 takes RetrieveNode[Actor P] (the only option), step 2 the
    pre-rank's first, NeighborCheck[Actor P, starred_actors] (Finish is listed last); scores are None and nothing
    is unparseable. Rank's call succeeds and answers over Film A, Film B."""
    class Broken(ScriptedScores):
        def generate(self, requests):
            self.requests.extend(requests)
            return [LLMReply(text="", error="boom") if is_action(r) else super(Broken, self).generate([r])[0]
                    for r in requests]
    b = Broken(prefer("nothing", answer={"Film B": -0.5}))
    res, calls = run("agent", gkg, b, decide="score", answer="rank", max_steps=2)
    steps = res.trace["steps"]
    assert [s["action"] for s in steps] == ["RetrieveNode[Actor P]", "NeighborCheck[Actor P, starred_actors]"]
    assert steps[1]["scores"] == [["NeighborCheck[Actor P, starred_actors]", None], ["Finish", None]]
    assert res.unparseable == 0 and res.answer == "Film B" and len(calls) == 3
    assert b.requests[-1].continuations == ("Film A", "Film B")


# ---------------------------------------------------------------------------------------------- explore

def test_explore_scored_pruning_check_and_rank_answer(gkg):
    """CoT, depth 1, max_relations 1, max_neighbours 1, decide score, answer rank. Step 1: the thought prompt asks
    for the next thought only; no extraction call: GraphExplore starts from Actor P, whose one relation needs no
    call; its two triples are scored, Film B's kept; the scored End? check over that fact says No. Step 2: Film B
    (seen, unvisited) is visited: its two relations are scored, directed_by kept; its one triple needs no call;
    the check over the facts with directed_by says Yes. Rank scores the entities reached but the question's
    (Film B, Dir Y): Dir Y."""
    b = ScriptedScores(prefer("directed_by", "Film B", answer={"Dir Y": -0.5}),
                       text=lambda req: "Look at the films of Actor P. answer: Film B")
    res, calls = run("explore", gkg, b, decide="score", answer="rank", depth=1, max_relations=1, max_neighbours=1,
                     max_steps=3)
    s1, s2 = res.trace["steps"]
    # final_answer reads "Film B" from this thought; the scored check ignores it
    assert s1["thought"] == "Look at the films of Actor P. answer: Film B"
    assert s1["extraction"] is None and s1["entities"] == []
    assert s1["explored"] == [
        {"level": 1, "entity": "Actor P", "relations": ["starred_actors"],
         "triples": ["(Film B, starred_actors, Actor P)"],
         "triple_scores": [["(Film A, starred_actors, Actor P)", -2.5], ["(Film B, starred_actors, Actor P)", -0.55]]}]
    assert s1["enough"] == {"enough": False, "scores": [["Yes", -3.0], ["No", -1.0]]}
    assert s2["explored"] == [
        {"level": 1, "entity": "Film B", "relations": ["directed_by"], "triples": ["(Film B, directed_by, Dir Y)"],
         "relation_scores": [["starred_actors", -2.5], ["directed_by", -0.5]]}]
    assert s2["enough"]["enough"] is True
    assert res.trace["triples"] == ["(Film B, starred_actors, Actor P)", "(Film B, directed_by, Dir Y)"]
    assert res.answer == "Dir Y" and res.depth == 2 and res.unparseable == 0
    assert res.trace["answer_from"] == "rank" and res.trace["rank_top"][0] == ["Dir Y", -0.5]
    kinds = ["check" if r.continuations == ENOUGH_OPTIONS else "score" if r.continuations else "text"
             for r in b.requests]
    assert kinds == ["text", "score", "check", "text", "score", "check", "score"] and len(calls) == 7
    assert b.requests[-1].continuations == ("Film B", "Dir Y")
    assert "Answer: name | name" not in user(b.requests[0]) and user(b.requests[0]).endswith("to look up next.")
    assert user(b.requests[-2]).startswith("Knowledge graph paths (head, relation, tail):\n"
                                           "(Film B, starred_actors, Actor P)\n(Film B, directed_by, Dir Y)\n")


def test_explore_scored_pruning_with_generated_answer(gkg):
    """decide score, answer generate: the pruning is scored and the thought's Answer: line is the End? check
    and the answer (Algorithm 1), so no check and no rank call. Step 1 keeps Film B's triple, step 2 Film B's
    directed_by triple, step 3's thought answers: 5 calls."""
    def text(req):
        u = user(req)
        return "Answer: Dir Y" if "(Film B, directed_by, Dir Y)" in u else "Look at the films of Actor P."
    g = ScriptedScores(prefer("directed_by", "Film B"), text=text)
    res, calls = run("explore", gkg, g, decide="score", depth=1, max_relations=1, max_neighbours=1, max_steps=3)
    assert [e["triples"] for s in res.trace["steps"] for e in s.get("explored", [])] == [
        ["(Film B, starred_actors, Actor P)"], ["(Film B, directed_by, Dir Y)"]]
    assert res.answer == "Dir Y" and res.depth == 3 and "answer_from" not in res.trace
    assert ["score" if r.continuations else "text" for r in g.requests] == ["text", "score", "text", "score", "text"]
    assert "write 'Answer: name | name' instead." in user(g.requests[0]) and len(calls) == 5


def test_explore_tot_with_the_scored_score_evaluator(gkg):
    """ToT, k = 2, b = 1, evaluator score, decide score: one scoring call ranks both candidates (not one 0-10
    rating per candidate). Branch 0 thinks of Film A and keeps its triple, branch 1 of Film B (each neighbour
    pruning scores the triple of the film its thought names); the evaluator prefers the state with Film B's
    triple. No Answer: thought within max_steps 1: the chain-of-thought call answers from the kept triples."""
    thoughts = {0: "Look at Film A.", 1: "Look at Film B."}

    def text(req):
        if req.messages[0][1].startswith("You answer a question over a knowledge graph"):
            return thoughts[req.seed]
        return "Answer: Film B" if "(Film B, starred_actors, Actor P)" in user(req) else "Answer: none"

    def score(req, opt):
        if is_eval(req):
            return -1.0 if "(Film B" in opt else -5.0
        film = "Film A" if "Look at Film A." in user(req) else "Film B"
        return -1.0 if film in opt else -5.0
    b = ScriptedScores(score, text=text)
    res, calls = run("explore", gkg, b, decide="score", strategy="tot", branching=2, breadth=1, evaluator="score",
                     depth=1, max_neighbours=1, max_steps=1)
    assert [e["triples"] for s in res.trace["steps"] for e in s["explored"]] == [
        ["(Film A, starred_actors, Actor P)"], ["(Film B, starred_actors, Actor P)"]]
    assert res.trace["search"] == [{"step": 1, "candidates": 2, "evaluator": "score", "decide": "score",
                                    "scores": [-2.5, -0.5], "chosen": [1], "kept": [1]}]
    evals = [r for r in b.requests if is_eval(r)]
    assert len(evals) == 1 and evals[0].continuations == (
        "Thought: Look at Film A.\nFacts:\n(Film A, starred_actors, Actor P)",
        "Thought: Look at Film B.\nFacts:\n(Film B, starred_actors, Actor P)")
    assert res.answer == "Film B" and res.fallback is None and res.unparseable == 0 and len(calls) == 6


def test_explore_failed_scoring_calls_keep_the_prerank(gkg):
    """The neighbour pruning and the evaluator scoring calls fail: the pre-rank's first triple (Film A's, edge
    order without an index) is kept in both branches, the evaluator keeps generation order; scores are None and
    nothing is unparseable."""
    class Broken(ScriptedScores):
        def generate(self, requests):
            self.requests.extend(requests)
            return [LLMReply(text="", error="boom") if r.continuations else super(Broken, self).generate([r])[0]
                    for r in requests]
    b = Broken(prefer("Film B"), text=lambda req: "Answer: Film A" if "step by step" in req.messages[0][1]
               else "Look at the films.")
    res, calls = run("explore", gkg, b, decide="score", strategy="tot", branching=2, breadth=1, depth=1,
                     max_neighbours=1, max_steps=1)
    ex = [e for s in res.trace["steps"] for e in s["explored"]]
    assert [e["triples"] for e in ex] == [["(Film A, starred_actors, Actor P)"]] * 2
    assert ex[0]["triple_scores"] == [["(Film A, starred_actors, Actor P)", None],
                                      ["(Film B, starred_actors, Actor P)", None]]
    (rec,) = res.trace["search"]
    assert rec["scores"] is None and rec["kept"] == [0] and res.unparseable == 0
    assert res.answer == "Film A" and len(calls) == 6  # 2 thoughts, 2 prunings, the evaluator, the answer


# ---------------------------------------------------------------------------------------------- real SmolLM2

def _finite(scores) -> bool:
    return bool(scores) and all(isinstance(s, float) and math.isfinite(s) and s <= 0 for _, s in scores)


def test_agent_score_with_real_smollm2(gkg):
    """The real embedded model chooses every action by score: each step's options have finite scores, the first
    step retrieves the topic (the only valid action), the answer is an entity the chain observed, and the calls
    are within the bound (one per step plus rank's)."""
    entry = REASONERS.get("agent")
    q = Question("g1", QUESTION, gkg.ids_of(["Actor P"]))
    job = entry.impl(inp=ReasonInput(question=q, context="", kg=gkg, sampling=Sampling()),
                     params=entry.params(decide="score", answer="rank", max_steps=3))
    ((res, calls),) = run_batched(jobs=[job], client=smollm2_client())
    steps = res.trace["steps"]
    assert steps and all(_finite(s["scores"]) for s in steps), steps
    assert steps[0]["action"] == "RetrieveNode[Actor P]"
    assert all(s["action"] in {o for o, _ in s["scores"]} for s in steps)
    assert len(calls) <= 3 + 1 and not any(c.failed for c in calls)
    assert res.trace["answer_from"] == "rank"  # step 2 on, something was observed: rank answers
    assert res.answer and set(res.answer.split(" | ")) <= ENTITIES - {"Actor P"}
    json.dumps(res.trace)


def test_explore_score_with_real_smollm2(gkg):
    """The real embedded model through explore's scored pruning and End? check: every scored relation / triple
    and check has a finite score, the calls are within max_steps · (2 + 2 · depth · max_entities) + 1, and the
    answer is an entity the search reached."""
    entry = REASONERS.get("explore")
    q = Question("g1", QUESTION, gkg.ids_of(["Actor P"]))
    params = entry.params(decide="score", answer="rank", depth=2, max_relations=1, max_neighbours=1, max_entities=2,
                          max_steps=2, thought_max_tokens=24)
    job = entry.impl(inp=ReasonInput(question=q, context="", kg=gkg, sampling=Sampling()), params=params)
    ((res, calls),) = run_batched(jobs=[job], client=smollm2_client())
    explored = [e for s in res.trace["steps"] for e in s.get("explored", [])]
    scored = [e[k] for e in explored for k in ("relation_scores", "triple_scores") if k in e]
    checks = [s["enough"]["scores"] for s in res.trace["steps"] if "enough" in s]
    assert scored and checks and all(_finite(sc) for sc in scored + checks), res.trace["steps"]
    assert len(calls) <= 2 * (2 + 2 * 2 * 2) + 1 and not any(c.failed for c in calls)
    assert res.trace["answer_from"] == "rank"
    assert res.answer and set(res.answer.split(" | ")) <= ENTITIES - {"Actor P"}
    json.dumps(res.trace)
