"""Graph reasoners ``agent`` and ``explore`` and their CoT / ToT / GoT strategies.

Control flow with a scripted LLM on the tiny movie KG (real observations, real embedding index); then one
end-to-end run of each with the embedded SmolLM2 on two real MetaQA 2-hop test questions over the real KB.
"""

from __future__ import annotations

import json
import re
import time

import numpy as np
import pytest

from kgrag import schema as S
from kgrag.index.embed import EmbeddingIndex, encode
from kgrag.llm.calls import LLMClient, LLMReply
from kgrag.reasoning.reasoners import REASONERS, ReasonInput, Sampling, rows_of, run_batched
from kgrag.reasoning.reasoners import agent as A
from kgrag.reasoning.reasoners import explore as X
from kgrag.reasoning.reasoners.baselines import COT_SYSTEM
from kgrag.reasoning.reasoners.strategies import EVAL_SYSTEM
from kgrag.types import Question
from tests.conftest import metaqa_entity_vectors, metaqa_sample_store

MODEL = "all-MiniLM-L6-v2"
NO_DEMO = Sampling(few_shot=False)


class Scripted:
    """Replies with ``reply(request)``; keeps every batch it gets (the requests themselves)."""

    model_id = "scripted"

    def __init__(self, reply):
        self.reply, self.batches = reply, []

    def generate(self, requests):
        self.batches.append(list(requests))
        return [LLMReply(text=self.reply(r), tokens_in=5, tokens_out=2) for r in requests]

    @property
    def sizes(self):
        return [len(b) for b in self.batches]


def system(req) -> str:
    return req.messages[0][1]


def user(req) -> str:
    return req.messages[-1][1]


def turns(req) -> int:
    """Agent steps already in a request (assistant turns after the question)."""
    return sum(1 for r, _ in req.messages if r == "assistant")


def q(text: str, i: int = 0) -> Question:
    return Question(f"q{i}", text, (), (), ())


def run(name, questions, reply, kg, index, sampling=NO_DEMO, **params):
    entry = REASONERS.get(name)
    b = Scripted(reply)
    jobs = [entry.impl(inp=ReasonInput(question=qq, context="", kg=kg, index=index, sampling=sampling),
                       params=entry.params(**params)) for qq in questions]
    return run_batched(jobs=jobs, client=LLMClient(b, cache=None)), b


# ---- agent: actions -------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_each_action_observes_the_tiny_kg(kg, index):
    dom = A.AgentDomain(ReasonInput(question=q("x"), context="", kg=kg, index=index), A.AgentParams())
    assert dom.act("RetrieveNode", ["al pacino"]) == "The node is Al Pacino."
    assert dom.act("RetrieveNode", ["who starred in [Top Gun]"]) == "The node is Top Gun."
    assert dom.act("RetrieveNode", ["Micheal Man"]) == "The node is Michael Mann."  # nearest name by embedding
    assert dom.act("NeighborCheck", ["Heat", "directed_by"]) == "(Heat, directed_by, Michael Mann)"
    both = dom.act("NeighborCheck", ["Michael Mann", "directed by"]).splitlines()
    assert sorted(both) == ["(Collateral, directed_by, Michael Mann)", "(Heat, directed_by, Michael Mann)"]
    assert dom.act("NodeDegree", ["Al Pacino", "starred_actors"]) == "Al Pacino has 2 neighbours by starred_actors."
    assert dom.act("NodeDegree", ["Heat", ""]) == "Heat has 3 neighbours in total."
    assert dom.act("NodeFeature", ["Top Gun", "name"]) == "name: Top Gun"
    assert dom.act("NodeFeature", ["Top Gun", "release year"]) == "(Top Gun, release_year, 1986)"
    feats = dom.act("NodeFeature", ["Heat", "relations"])
    assert "directed_by: Michael Mann" in feats and "starred_actors: Al Pacino, Robert De Niro" in feats
    assert dom.act("NeighborCheck", ["the irishman", "director"]) == "(The Irishman, directed_by, Martin Scorsese)"


@pytest.mark.parametrize("reply,want", [
    ("Thought: t\nAction: RetrieveNode[Al Pacino]", ("RetrieveNode", ["Al Pacino"])),
    ("ACTION:  neighbour_check ( 'Heat' , directed by )", ("NeighborCheck", ["Heat", "directed by"])),
    ("Thought: x\nAction: nodeDegree Heat, starred_actors", ("NodeDegree", ["Heat", "starred_actors"])),
    ('Action: NodeFeature["Crouching Tiger, Hidden Dragon", release_year]',
     ("NodeFeature", ["Crouching Tiger, Hidden Dragon", "release_year"])),
    ("Thought: I will finish now\nAction: Finish[Michael Mann | Martin Scorsese].",
     ("Finish", ["Michael Mann | Martin Scorsese"])),
    ("1. **Finish{Tom Cruise}**", ("Finish", ["Tom Cruise"])),
    ("I am not sure what to do", None),
    ("Action: Search[Heat]", None),
])
def test_action_line_is_parsed_robustly(reply, want):
    assert A.parse_action(reply) == want


# ---- agent: the loop ------------------------------------------------------------------------------------------

def test_agent_observations_feed_the_next_step_and_finish_ends_it(kg, index):
    script = ["Thought: Al Pacino's movies first.\nAction: NeighborCheck[Al Pacino, starred_actors]",
              "Thought: Who directed Heat?\nAction: NeighborCheck[Heat, directed_by]",
              "Thought: Done.\nAction: Finish[Michael Mann]",
              "Action: Finish[never reached]"]
    ((res, calls),), b = run("agent", [q("who directed the movies starred by [Al Pacino]")],
                             lambda r: script[turns(r)], kg, index, max_steps=6)
    assert res.answer == "Michael Mann" and res.depth == 3 and len(calls) == 3 and res.fallback is None
    assert res.unparseable == 0
    obs = [s["observation"] for s in res.trace["steps"]]
    assert obs[0].splitlines() == ["(Heat, starred_actors, Al Pacino)", "(The Irishman, starred_actors, Al Pacino)"]
    assert obs[1] == "(Heat, directed_by, Michael Mann)"
    assert [s["action"] for s in res.trace["steps"]] == [
        "NeighborCheck[Al Pacino, starred_actors]", "NeighborCheck[Heat, directed_by]", "Finish[Michael Mann]"]
    assert res.trace["steps"][1]["thought"] == "Who directed Heat?"
    assert "Observation: (Heat, directed_by, Michael Mann)" in [c for _, c in b.batches[2][0].messages]
    assert b.batches[0][0].stop == ("Observation:",)


def test_agent_without_finish_answers_from_its_observations(kg, index):
    def reply(r):
        if system(r) == COT_SYSTEM:
            assert "Al Pacino has 2 neighbours by starred_actors." in user(r)
            return "He starred in two.\nAnswer: 2"
        return "Thought: count.\nAction: NodeDegree[Al Pacino, starred_actors]"

    ((res, calls),), b = run("agent", [q("how many movies did [Al Pacino] star in")], reply, kg, index, max_steps=2)
    assert res.answer == "2" and res.fallback == "observations" and res.depth == 2 and len(calls) == 3
    assert b.sizes == [1, 1, 1] and res.trace["fallback_reply"].endswith("Answer: 2")


def test_unparseable_action_is_counted_and_answered_with_the_valid_actions(kg, index):
    script = ["Hmm, let me think about movies.", "Action: finish [ 'Tom Cruise' ]"]
    ((res, calls),), b = run("agent", [q("who starred in [Top Gun]")], lambda r: script[turns(r)], kg, index)
    assert res.answer == "Tom Cruise" and res.unparseable == 1 and len(calls) == 2
    assert res.trace["steps"][0]["observation"] == A.INVALID and not res.trace["steps"][0]["valid"]
    assert f"Observation: {A.INVALID}" == user(b.batches[1][0])
    assert all(a in A.INVALID for a in ("RetrieveNode[text]", "NodeFeature[node, feature]",
                                        "NeighborCheck[node, relation]", "NodeDegree[node, relation]", "Finish[answer]"))


# ---- strategies -------------------------------------------------------------------------------------------

BRANCH = {0: "Action: Finish[Martin Scorsese]", 1: "Action: Finish[Michael Mann]", 2: "Action: Finish[Tom Cruise]"}


def test_tot_select_sends_all_branches_in_one_batch_and_follows_the_choice(kg, index):
    def reply(r):
        if system(r) == EVAL_SYSTEM:
            assert "(A)" in user(r) and "(C)" in user(r)
            return "The best is {B}."
        return BRANCH[r.seed]

    out, b = run("agent", [q("who directed [Heat]", 0), q("who directed [Collateral]", 1)], reply, kg, index,
                 strategy="tot", branching=3, breadth=1, evaluator="select", max_steps=3)
    assert b.sizes == [6, 2]  # 3 branches x 2 questions in one batch; then one select call per question
    assert {r.seed for r in b.batches[0]} == {0, 1, 2} and all(r.temperature == 0.7 for r in b.batches[0])
    for res, calls in out:
        assert res.answer == "Michael Mann" and len(calls) == 4 and res.unparseable == 0
        assert res.trace["search"][0]["chosen"] == [1] and res.trace["search"][0]["kept"] == [1]
        assert len(res.trace["all_steps"]) == 3  # every branch's thought/action/observation is traced


def test_tot_score_keeps_the_best_scored_branches(kg, index):
    scores = {"Martin Scorsese": "3", "Michael Mann": "Score: 9/10", "Tom Cruise": "no idea"}

    def reply(r):
        if system(r) == EVAL_SYSTEM:
            return next(v for k, v in scores.items() if f"Answer: {k}" in user(r))
        return BRANCH[r.seed]

    ((res, calls),), b = run("agent", [q("who directed [Heat]")], reply, kg, index, strategy="tot", branching=3,
                             breadth=2, evaluator="score", max_steps=2)
    assert b.sizes == [3, 3]  # branches in one batch, then one score call per branch in one batch
    assert res.answer == "Michael Mann" and res.unparseable == 1  # "no idea" scores 0 and is counted
    assert res.trace["search"][0]["scores"] == [0.3, 0.9, None] and res.trace["search"][0]["kept"] == [1, 0]


def test_got_merges_the_two_best_chains(kg, index):
    first = {0: "Thought: director.\nAction: NeighborCheck[Heat, directed_by]",
             1: "Thought: cast.\nAction: NeighborCheck[Heat, starred_actors]"}
    seen = []

    def reply(r):
        if system(r) == EVAL_SYSTEM:
            return "{A}" if "Combine" not in user(r) else "Heat: Michael Mann directed Al Pacino."
        if turns(r) == 0:
            return first[r.seed]
        seen.append(r)
        return "Action: Finish[Michael Mann]"

    ((res, calls),), b = run("agent", [q("who directed the movie of [Al Pacino]")], reply, kg, index,
                             strategy="got", branching=2, breadth=1, max_steps=3)
    # step 1: 2 branches | select | merge ; step 2: 2 branches of the merged chain | select (both finished: no merge)
    assert b.sizes == [2, 1, 1, 2, 1]
    assert "Reasoning chain 1" in user(b.batches[2][0]) and "Reasoning chain 2" in user(b.batches[2][0])
    merged_prompt = "\n".join(c for _, c in seen[0].messages)
    assert "(Heat, directed_by, Michael Mann)" in merged_prompt and "(Heat, starred_actors, Al Pacino)" in merged_prompt
    assert "Heat: Michael Mann directed Al Pacino." in merged_prompt
    m = res.trace["search"][0]["merged"]
    assert m["parents"] == [0, 1] and res.trace["search"][0]["kept"] == ["merged"]
    assert res.answer == "Michael Mann" and res.depth == 2 and len(calls) == 7


# ---- explore ---------------------------------------------------------------------------------------------

def test_explore_embedding_pruning_keeps_the_relevant_relation(kg, index):
    def reply(r):
        if system(r) == X.SYSTEM:
            return "I should look up the release year of Top Gun."
        if system(r) == X.EXTRACT_SYSTEM:
            return "Top Gun"
        assert system(r) == COT_SYSTEM
        return "Answer: 1986"

    ((res, calls),), b = run("explore", [q("what year was [Top Gun] released")], reply, kg, index, prune="embedding",
                             max_relations=1, depth=1, max_steps=1)
    assert res.answer == "1986" and b.sizes == [1, 1, 1]
    assert res.trace["triples"] == ["(Top Gun, release_year, 1986)"]
    assert res.trace["steps"][0]["explored"][0]["relations"] == ["release_year"]
    assert "(Top Gun, release_year, 1986)" in user(b.batches[-1][0]) and "starred_actors" not in user(b.batches[-1][0])


def _pick(prompt: str, want: str) -> str:
    """Reply with the letter of the listed option containing ``want``."""
    for m in re.finditer(r"^\(([A-Z])\) (.*)$", prompt, flags=re.MULTILINE):
        if want in m.group(2):
            return "{" + m.group(1) + "}"
    return "none"


def test_explore_llm_pruning_follows_the_relations_and_neighbours_picked(kg, index):
    def reply(r):
        s, u = system(r), user(r)
        if s == X.SYSTEM:
            return "Find the movies of Al Pacino and their directors."
        if s == X.EXTRACT_SYSTEM:
            return "Al Pacino"
        if s == X.PRUNE_SYSTEM:
            return _pick(u, "The Irishman" if u.split("\n\n")[1].startswith("Facts") else "directed_by")
        return "Answer: Martin Scorsese"

    ((res, calls),), b = run("explore", [q("who directed the movies starred by [Al Pacino]")], reply, kg, index,
                             prune="llm", max_relations=1, max_neighbours=1, depth=2, max_steps=1)
    assert res.trace["seed_entities"] == ["Al Pacino"]
    # level 1: Al Pacino has one relation (no call), two neighbours (one pick); level 2: The Irishman has two
    # relations (one pick) and one directed_by neighbour (no call); then the answer call
    assert b.sizes == [1, 1, 1, 1, 1]
    assert res.trace["triples"] == ["(The Irishman, starred_actors, Al Pacino)",
                                    "(The Irishman, directed_by, Martin Scorsese)"]
    ex = res.trace["steps"][0]["explored"]
    assert [(e["level"], e["entity"], e["relations"]) for e in ex] == [
        (1, "Al Pacino", ["starred_actors"]), (2, "The Irishman", ["directed_by"])]
    assert res.answer == "Martin Scorsese" and res.unparseable == 0 and len(calls) == 5


def test_explore_answer_thought_ends_and_bad_pick_falls_back(kg, index):
    ((res, calls),), b = run("explore", [q("who directed [Heat]")], lambda r: "Answer: Michael Mann", kg, index)
    assert res.answer == "Michael Mann" and len(calls) == 1 and res.depth == 1

    def reply(r):
        if system(r) == X.SYSTEM:
            return "Look at Heat."
        if system(r) == X.PRUNE_SYSTEM:
            return "I cannot decide"
        return "Heat" if system(r) == X.EXTRACT_SYSTEM else "Answer: x"

    ((res, calls),), b = run("explore", [q("who starred in [Heat]")], reply, kg, index, prune="llm",
                             max_relations=1, max_neighbours=5, depth=1, max_steps=1)
    # the relation pick is unreadable: the embedding ranking's best relation is kept, with all its neighbours
    assert res.unparseable == 1 and b.sizes == [1, 1, 1, 1]
    kept = res.trace["steps"][0]["explored"][0]["relations"]
    assert len(kept) == 1 and res.trace["triples"] and all(f", {kept[0]}, " in t for t in res.trace["triples"])


def explore_got_reply(r):
    """Scripted LLM of an explore GoT run: one thought per branch seed, the named film extracted, branch B
    selected, a merged thought, then an answer (also used by tests/test_report_html.py)."""
    thought = {0: "Look at Heat.", 1: "Look at Top Gun."}
    s, u = system(r), user(r)
    if s == X.SYSTEM:
        return thought[r.seed]
    if s == X.EXTRACT_SYSTEM:
        return "Heat" if "Heat" in u else "Top Gun"
    if s == EVAL_SYSTEM:
        return "{B}" if "Combine" not in u else "Both films matter."
    return "Answer: done"


def test_explore_got_branches_in_one_batch_and_merges_their_triples(kg, index):
    reply = explore_got_reply
    out, b = run("explore", [q("tell me about these films", 0), q("tell me about those films", 1)], reply, kg, index,
                 strategy="got", branching=2, breadth=1, prune="embedding", depth=1, max_steps=1)
    assert b.sizes == [4, 4, 2, 2, 2]  # thoughts, extractions, select, merge, answer: both questions together
    for res, calls in out:
        assert set(res.trace["triples"]) == {"(Heat, directed_by, Michael Mann)", "(Heat, starred_actors, Al Pacino)",
                                             "(Heat, starred_actors, Robert De Niro)", "(Top Gun, starred_actors, Tom Cruise)",
                                             "(Top Gun, release_year, 1986)"}
        assert res.trace["thoughts"][-1] == "Both films matter." and res.trace["search"][0]["merged"]["parents"] == [1, 0]
        assert res.answer == "done" and len(calls) == 7


def test_params_are_strict():
    with pytest.raises(Exception):
        REASONERS.get("agent").params(max_step=3)
    with pytest.raises(Exception):
        REASONERS.get("explore").params(prune="random")
    for name in ("agent", "explore"):
        for f in REASONERS.get(name).params.model_fields.values():
            assert f.description


# ---- end to end: SmolLM2 on real MetaQA ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def metaqa(tmp_path_factory):
    store, questions = metaqa_sample_store(tmp_path_factory.mktemp("metaqa"))
    names = store.names(np.arange(store.num_entities))
    index = EmbeddingIndex(model=MODEL, entity_vectors=metaqa_entity_vectors(names, MODEL),
                           relation_vectors=encode([str(r).replace("_", " ") for r in store.relation_names], model=MODEL))
    return store, index, questions


@pytest.fixture(scope="module")
def smollm():
    from kgrag.llm.backends.llamacpp import LlamaCppBackend, LlamaCppParams

    return LlamaCppBackend(LlamaCppParams(n_ctx=2048))


@pytest.mark.parametrize("name,params", [
    ("agent", {"max_steps": 1, "step_max_tokens": 48, "max_observation_triples": 8, "answer_max_tokens": 48}),
    ("explore", {"max_steps": 1, "depth": 1, "max_entities": 1, "max_neighbours": 8, "prune": "embedding",
                 "thought_max_tokens": 32, "prune_max_tokens": 16, "max_context_triples": 10, "answer_max_tokens": 48}),
])
@pytest.mark.slow
def test_end_to_end_with_smollm_on_metaqa(metaqa, smollm, name, params):
    kg, index, questions = metaqa
    assert len(questions) == 2
    entry = REASONERS.get(name)
    jobs = [entry.impl(inp=ReasonInput(question=qq, context="", kg=kg, index=index,
                                       sampling=Sampling(max_tokens=48)), params=entry.params(**params))
            for qq in questions]
    t0 = time.perf_counter()
    results = run_batched(jobs=jobs, client=LLMClient(smollm, cache=None))
    seconds = time.perf_counter() - t0
    rows = rows_of(question_ids=[qq.question_id for qq in questions], results=results, reasoner=name,
                   separator="|", seed=0, per_q_ms=0.0)
    for (res, calls), row in zip(results, rows):
        assert isinstance(res.answer, str) and res.answer.strip(), res.trace
        assert not any(c.failed for c in calls), [c.reply.error for c in calls]
        assert row[S.REQUESTS] == len(calls) >= 1 and row[S.LLM_CALLS] >= len(calls)
        assert row[S.TOKENS_IN] > 0 and row[S.DEPTH] >= 1
        trace = json.loads(row[S.TRACE])
        assert trace["reasoner"] == name and len(trace["calls"]) == len(calls)
        if name == "agent":
            assert len(calls) == len(trace["steps"]) + (res.fallback == "observations")
            assert trace["steps"] and all({"thought", "action", "observation"} <= set(s) for s in trace["steps"])
        else:
            assert trace["steps"] and trace["steps"][0]["thought"] and trace["seed_entities"]
            assert len(calls) == 1 or trace["triples"]  # answered at once, or explored the KG first
    print(f"\n{name}: {seconds:.1f}s, calls {[len(c) for _, c in results]}, answers {[r.answer for r, _ in results]}")
