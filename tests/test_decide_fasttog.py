"""``decide: score`` and ``answer: rank`` of FastToG and the LEGO ``llm`` scorer's ``decide: score``
(kgrag.reasoning.reasoners.decide): golden steps on the five-edge KG with scripted scores, ``stop: rank`` (the best-scored
depth answers), the call bound, a failed scoring call, and the real SmolLM2 on the same KG.

Scripted scores are log-probs per option (``tests.test_decide_tog.ScriptedScores``: 2 tokens an option, so with
``score_normalize: mean`` a recorded score is half the scripted one). The expected pruning and answer follow from
FastToG's Algorithms 1 and 2 (Liang et al., 2024) with each choice taken as the best-scored option(s); with
``max_size: 1`` every community is one node, so on the five-edge KG (tests/test_golden_reasoners.py)::

    initial, around c0 = {Actor P}:  {Film A} "Film A starred actors Actor P", {Film B} "Film B starred actors Actor P"
    around {Film A}: {Dir X} "Film A directed by Dir X"      around {Film B}: {Dir Y} "Film B directed by Dir Y"
    around {Dir X}:  {City Q} "Dir X born in City Q"          around {Dir Y} or {City Q}: nothing unvisited
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from kgrag.retrieval.lego import SCORERS
from kgrag.retrieval.scorers.loglik import PROMPT as LOGLIK_PROMPT
from kgrag.retrieval.lego.types import Context
from kgrag.llm.calls import LLMClient, LLMReply, score_reply_text
from kgrag.reasoning.reasoners import REASONERS, ReasonInput, Sampling, run_batched
from kgrag.reasoning.reasoners.decide import ENOUGH_OPTIONS
from kgrag.reasoning.reasoners.fasttog import NONE_OPTION, call_bound, implementation_bound
from kgrag.types import Question
from tests.test_decide_tog import ScriptedScores, cut_kg, predicted, prefer  # noqa: F401  (fixture)
from tests.test_golden_reasoners import QUESTION, fast_reply, gkg, user  # noqa: F401  (fixture)
from tests.test_tog_fasttog import random_kg

FILM_A, FILM_B = "Film A starred actors Actor P", "Film B starred actors Actor P"


def run(kg, backend, *, question=None, **params):
    entry = REASONERS.get("fasttog")
    q = question or Question("g1", QUESTION, kg.ids_of(["Actor P"]))
    params = {"max_size": 1, "rho": 1.0, **params}
    job = entry.impl(inp=ReasonInput(question=q, context="", kg=kg, sampling=Sampling()), params=entry.params(**params))
    ((res, calls),) = run_batched(jobs=[job], client=LLMClient(backend, cache=None))
    json.dumps(res.trace)  # the trace is JSON (generations.parquet stores it)
    return res, calls


def chosen_texts(step: dict) -> list[str]:
    return [step["options"][i] for i in step["chosen"]]


def kinds(backend) -> list[str]:
    return ["score" if r.continuations else "text" for r in backend.requests]


@pytest.mark.parametrize("film,director", [("Film A", "Dir X"), ("Film B", "Dir Y")])
def test_fasttog_scored_initial_pruning_decides_the_chain(gkg, film, director):
    """W = 1: the initial multiple-choice pruning keeps the best-scored head community; its chain grows to its
    film's director (the only candidate, above "None of the above"); the check then says Yes (the facts hold a
    directed_by triple) and the chain's last community, that director alone, is the answer without rank's call
    (rank's one-candidate rule)."""
    b = ScriptedScores(prefer("directed", film, answer={"Dir X": -0.5, "Dir Y": -0.5}))
    res, calls = run(gkg, b, width=1, d_max=3, decide="score", answer="rank")
    init = res.trace["initial"]
    assert sorted(init["options"]) == [FILM_A, FILM_B]
    assert chosen_texts(init) == [f"{film} starred actors Actor P"] and init["chains"] == [[[film]]]
    assert dict(map(tuple, init["scores"])) == {f"{film} starred actors Actor P": -0.55,
                                                 ({FILM_A, FILM_B} - {f"{film} starred actors Actor P"}).pop(): -2.5}
    assert init["reasoning"]["enough"] is False
    (d1,) = res.trace["depths"]
    (p,) = d1["pruning"]
    assert p["scores"] == [[f"{film} directed by {director}", -0.5], [NONE_OPTION, -2.5]]
    assert chosen_texts(p) == [f"{film} directed by {director}"] and d1["chains"] == [[[film], [director]]]
    assert d1["reasoning"] == {"enough": True, "scores": [["Yes", -1.0], ["No", -3.0]]}
    assert res.answer == director and res.depth == 1 and res.trace["stop"] == "answered" and res.fallback is None
    assert res.trace["llm_requests"] == ["prune_multi", "reason", "prune", "reason"] and len(calls) == 4
    assert kinds(b) == ["score"] * 4 and b.requests[-1].continuations == ("Yes", "No")
    assert res.trace["rank_top"] == [[director, None]] and res.trace["no_call"].startswith("one candidate")
    assert res.unparseable == 0 and res.trace["decide"] == "score" and res.trace["answer"] == "rank"


def test_fasttog_scored_pruning_with_two_chains_and_rank_margin(gkg):
    """W = 2: both head communities kept, Film A first (it scores best); both chains grow to their directors;
    rank scores Dir X above Dir Y: Dir X; with a margin of 2 both, best first."""
    b = ScriptedScores(prefer("directed", "Film A", answer={"Dir X": -0.5, "Dir Y": -2.0}))
    res, calls = run(gkg, b, width=2, d_max=3, decide="score", answer="rank")
    init = res.trace["initial"]
    assert chosen_texts(init) == [FILM_A, FILM_B] and init["chains"] == [[["Film A"]], [["Film B"]]]
    (d1,) = res.trace["depths"]
    assert [chosen_texts(p) for p in d1["pruning"]] == [["Film A directed by Dir X"], ["Film B directed by Dir Y"]]
    assert d1["chains"] == [[["Film A"], ["Dir X"]], [["Film B"], ["Dir Y"]]]
    assert res.answer == "Dir X" and res.trace["rank_top"] == [["Dir X", -0.5], ["Dir Y", -2.0]]
    assert res.trace["llm_requests"] == ["prune_multi", "reason", "prune", "prune", "reason", "rank"]
    # rank's call: the answer prompt over the chains' triples, the ends of the chains as continuations
    rank = b.requests[-1]
    assert rank.continuations == ("Dir X", "Dir Y")
    for fact in ("(Film A, starred_actors, Actor P)", "(Film A, directed_by, Dir X)",
                 "(Film B, starred_actors, Actor P)", "(Film B, directed_by, Dir Y)"):
        assert fact in user(rank)
    res2, _ = run(gkg, b, width=2, d_max=3, decide="score", answer="rank", margin=2.0)
    assert res2.answer == "Dir X | Dir Y"


def test_fasttog_scored_none_of_the_above_stops_a_chain(gkg):
    """W = 2: for the Film A chain "None of the above" scores best, so that chain stops (``llm_none``) at
    {Film A}; the Film B chain grows to Dir Y. Rank then chooses among the chains' last communities, Film A and
    Dir Y (the entities reached), over the chains' three triples (no Dir X)."""
    base = prefer("directed", "Film A", answer={"Film A": -3.0, "Dir Y": -1.0, "Dir X": -0.1})

    def score(req, opt):
        if "Premise: Actor P; Film A starred actors Actor P\n" in user(req) and opt == NONE_OPTION:
            return -0.2
        return base(req, opt)
    b = ScriptedScores(score)
    res, calls = run(gkg, b, width=2, d_max=3, decide="score", answer="rank")
    (d1,) = res.trace["depths"]
    pa, pb = d1["pruning"]
    assert pa["chain"] == 0 and pa["scores"] == [["Film A directed by Dir X", -0.5], [NONE_OPTION, -0.1]]
    assert pa["chosen"] == [] and pa["stopped"] == "llm_none"
    assert chosen_texts(pb) == ["Film B directed by Dir Y"] and "stopped" not in pb
    assert d1["chains"] == [[["Film A"]], [["Film B"], ["Dir Y"]]]
    rank = b.requests[-1]
    assert rank.continuations == ("Film A", "Dir Y") and "Dir X" not in user(rank)
    assert res.answer == "Dir Y" and res.depth == 1 and len(calls) == 6


def test_fasttog_rank_at_max_depth_and_when_exhausted(gkg):
    """The check never says Yes. D_max = 1: after round 1 rank answers over Dir X, Dir Y (no CoT fallback).
    D_max = 3: round 2 grows the Film A chain to City Q (the Dir Y chain has no candidate left), round 3 has no
    candidate at all and nothing new to check: exhausted at depth 2, rank over City Q and Dir Y."""
    score = prefer("directed", "born", "Film A", enough_at=("nothing",),
                   answer={"Dir X": -2.0, "Dir Y": -1.0, "City Q": -0.3})
    res, calls = run(gkg, ScriptedScores(score), width=2, d_max=1, decide="score", answer="rank")
    assert res.trace["stop"] == "max_depth" and res.depth == 1 and res.fallback is None
    assert res.answer == "Dir Y" and len(calls) == 6 and res.trace["llm_requests"][-1] == "rank"

    b = ScriptedScores(score)
    res, calls = run(gkg, b, width=2, d_max=3, decide="score", answer="rank")
    d1, d2, d3 = res.trace["depths"]
    assert [chosen_texts(p) for p in d2["pruning"] if "chosen" in p] == [["Dir X born in City Q"]]
    assert [p.get("stopped") for p in d2["pruning"]] == [None, "no_candidates"]
    assert d2["chains"] == [[["Film A"], ["Dir X"], ["City Q"]], [["Film B"], ["Dir Y"]]]
    assert [p["stopped"] for p in d3["pruning"]] == ["no_candidates"] and "reasoning" not in d3
    assert res.trace["stop"] == "exhausted" and res.depth == 2 and res.fallback is None
    assert b.requests[-1].continuations == ("City Q", "Dir Y") and res.answer == "City Q"
    assert res.trace["llm_requests"] == ["prune_multi", "reason", "prune", "prune", "reason", "prune", "reason",
                                         "rank"]


def test_fasttog_scored_pruning_with_the_generated_answer(gkg):
    """decide score, answer generate: the pruning is scored, the reasoning reply generated and parsed as in the
    paper (Dir X | Dir Y once the directed-by facts are in the context)."""
    b = ScriptedScores(prefer("directed", "Film A"), text=fast_reply)
    res, calls = run(gkg, b, width=2, d_max=3, decide="score", answer="generate")
    assert res.answer == "Dir X | Dir Y" and res.depth == 1 and res.trace["stop"] == "answered"
    assert kinds(b) == ["score", "text", "score", "score", "text"]
    assert res.trace["initial"]["reasoning"] == {"reply": "Answer: Unknown", "parsed": True, "answer": None}
    assert "rank_top" not in res.trace


def test_fasttog_generated_pruning_with_the_rank_answer(gkg):
    """decide generate, answer rank: the paper's letter pruning and reasoning reply; once the reply answers,
    rank's selection over the chains' ends replaces the generated "Dir X | Dir Y"."""
    b = ScriptedScores(prefer(answer={"Dir X": -2.0, "Dir Y": -1.0}), text=fast_reply)
    res, calls = run(gkg, b, width=2, d_max=3, decide="generate", answer="rank")
    assert res.trace["depths"][0]["reasoning"]["answer"] == "Dir X | Dir Y"
    assert res.answer == "Dir Y" and res.depth == 1 and res.trace["answer_from"] == "rank"
    assert kinds(b) == ["text"] * 5 + ["score"] and b.requests[-1].continuations == ("Dir X", "Dir Y")
    assert res.trace["llm_requests"] == ["prune_multi", "reason", "prune", "prune", "reason", "rank"]


def test_fasttog_rank_answer_reports_the_entities_it_chose_not_a_reparse(cut_kg):
    """answer: rank: the entities rank chose are the answers as they are (``Reasoning.answers``), whether rank
    answers at D_max (both directors within the margin, best first) or the best depth answers (stop: rank);
    the answer text is their joined names as before. A generated answer is still parsed from its text."""
    from kgrag.llm.prompts import parse_answers

    score = prefer("directed", "Film A", enough_at=("nothing",), answer={"Dir X Jr.": -2.0, "3. Dir Y": -1.0})
    res, calls = run(cut_kg, ScriptedScores(score), width=2, d_max=1, decide="score", answer="rank", margin=2.0)
    assert res.trace["llm_requests"][-1] == "rank" and res.answer == "3. Dir Y | Dir X Jr."
    assert res.answers == ("3. Dir Y", "Dir X Jr.") and predicted(res, calls) == ["3. Dir Y", "Dir X Jr."]
    assert parse_answers(res.answer) == ["Dir Y", "Dir X Jr"]  # what a re-parse of the text would have scored
    score = prefer("directed", "Film A", answer={"Film A": -3.0, "Film B": -3.0, "Dir X Jr.": -2.0, "3. Dir Y": -1.0})
    best, calls = run(cut_kg, ScriptedScores(score), width=2, d_max=1, decide="score", answer="rank", stop="rank")
    assert best.depth == best.trace["answer_depth"] == 1 and best.answers == ("3. Dir Y",)
    assert predicted(best, calls) == ["3. Dir Y"]

    def text(req):
        return "Answer: 3. Dir Y" if user(req).startswith("Context:") and "directed by" in user(req) else \
            fast_reply(req)
    gen, calls = run(cut_kg, ScriptedScores(prefer("directed", "Film A"), text=text), width=2, d_max=1,
                     decide="score", answer="generate")
    assert gen.answers is None and predicted(gen, calls) == ["Dir Y"]


def test_fasttog_failed_scoring_calls_keep_the_prerank_and_are_not_unparseable(gkg):
    """Both pruning calls fail (no score list): the initial one keeps the pre-rank's first community, the chain's
    one its first candidate (not "None of the above"); scores are None; nothing counts as unparseable."""
    class Broken(ScriptedScores):
        def generate(self, requests):
            self.requests.extend(requests)
            return [LLMReply(text="", error="boom") if r.continuations and "Which community" in user(r)
                    else super(Broken, self).generate([r])[0] for r in requests]
    b = Broken(prefer("directed", "Film B", answer={"Dir X": -1.0, "Dir Y": -1.0}))
    res, _ = run(gkg, b, width=1, d_max=2, decide="score", answer="rank")
    init = res.trace["initial"]
    assert init["chosen"] == [0] and [s for _, s in init["scores"]] == [None, None]
    film = init["options"][0].split(" starred")[0]
    director = {"Film A": "Dir X", "Film B": "Dir Y"}[film]
    (d1,) = res.trace["depths"]
    (p,) = d1["pruning"]
    assert p["chosen"] == [0] and p["scores"] == [[f"{film} directed by {director}", None], [NONE_OPTION, None]]
    assert res.answer == director and res.unparseable == 0


@pytest.fixture(scope="module")
def dense(tmp_path_factory):
    return random_kg(tmp_path_factory.mktemp("dense_decide"), 120, 480, 3)


@pytest.mark.parametrize("width,d_max,text", [(1, 1, "graph2text"), (2, 2, "graph2text"), (3, 3, "graph2text"),
                                              (2, 2, "triple2text")])
def test_fasttog_scored_call_bound_holds(dense, width, d_max, text):
    """Adversarial scores: "None of the above" scores worst and the check always says No, so every chain keeps
    growing and rank answers after D_max rounds. Scored calls replace generated ones one for one and rank the
    fallback: the worst case is reached exactly (with Triple2Text: W·D_max + D_max + 3 ≤ the paper's bound)."""
    def score(req, opt):
        if tuple(req.continuations) == ENOUGH_OPTIONS:
            return {"Yes": -9.0, "No": -1.0}[opt]
        return -9.0 if opt == NONE_OPTION else -5.0
    q = Question("q", "what is related to [n0]", dense.ids_of(["n0"]))
    res, calls = run(dense, ScriptedScores(score), question=q, width=width, d_max=d_max, text=text,
                     graph2text="llm", decide="score", answer="rank", max_size=4)
    llm_text = text == "graph2text"
    bound = implementation_bound(width, d_max, llm_text)
    assert res.trace["call_bound"] == {"calls": len(calls), "bound": bound, "holds": True}
    req = res.trace["llm_requests"]
    assert req.count("prune_multi") == 1 and req.count("prune") == width * d_max and req.count("reason") == d_max + 1
    assert req[-1] == "rank" and "fallback" not in req and res.depth == d_max and res.trace["stop"] == "max_depth"
    if llm_text:
        assert len(calls) == bound
    else:
        assert len(calls) == width * d_max + d_max + 3 <= call_bound(width, d_max) == bound


# ---------------------------------------------------------------------------------------------- stop: rank

@pytest.mark.parametrize("answer,expected,depth", [
    ({"Film A": -3.0, "Dir X": -0.5, "City Q": -2.0}, "Dir X", 1),
    ({"Film A": -0.4, "Dir X": -0.5, "City Q": -2.0}, "Film A", 0),
    ({"Film A": -3.0, "Dir X": -2.0, "City Q": -1.0}, "City Q", 2),
    ({"Film A": -1.0, "Dir X": -1.0, "City Q": -1.0}, "Film A", 0),  # a tie: the earlier depth
])
def test_fasttog_stop_rank_answers_with_the_best_scored_depth(gkg, answer, expected, depth):
    """stop: rank, W = 1, D_max = 3: rank's call over the chain's last community replaces the check in the initial
    phase (Film A, depth 0) and each round (Dir X, then City Q); round 3 has no candidate and nothing new to rank
    (exhausted at depth 2). The depth whose best name scores highest answers, with no further call: 6 calls, no
    check call."""
    b = ScriptedScores(prefer("directed", "born", "Film A", answer=answer))
    res, calls = run(gkg, b, width=1, d_max=3, decide="score", answer="rank", stop="rank")
    init = res.trace["initial"]
    d1, d2, d3 = res.trace["depths"]
    assert init["chains"] == [[["Film A"]]] and d2["chains"] == [[["Film A"], ["Dir X"], ["City Q"]]]
    assert init["reasoning"] == {"rank_top": [["Film A", answer["Film A"]]]}
    assert d1["reasoning"] == {"rank_top": [["Dir X", answer["Dir X"]]]}
    assert d2["reasoning"] == {"rank_top": [["City Q", answer["City Q"]]]}
    assert [p["stopped"] for p in d3["pruning"]] == ["no_candidates"] and "reasoning" not in d3
    assert res.answer == expected and res.depth == depth and res.trace["answer_depth"] == depth
    assert res.trace["rank_top"] == [[expected, answer[expected]]] and res.trace["answer_from"] == "rank"
    assert res.trace["stop"] == "exhausted" and res.trace["depth_reached"] == 2 and res.fallback is None
    assert res.trace["llm_requests"] == ["prune_multi", "rank", "prune", "rank", "prune", "rank"] and len(calls) == 6
    assert not any(tuple(r.continuations) == ENOUGH_OPTIONS for r in b.requests)
    assert [r.continuations for r in b.requests if "Answer:" in user(r)] == [("Film A",), ("Dir X",), ("City Q",)]
    assert res.trace["call_bound"] == {"calls": 6, "bound": call_bound(1, 3), "holds": True}


@pytest.mark.parametrize("answer,expected,depth", [
    ({"Film A": -0.5, "Film B": -2.0, "Dir X": -1.0, "Dir Y": -3.0}, "Film A", 0),
    ({"Film A": -2.0, "Film B": -2.5, "Dir X": -3.0, "Dir Y": -1.0}, "Dir Y", 1),
])
def test_fasttog_stop_rank_at_max_depth_makes_one_call_less_than_the_check(gkg, answer, expected, depth):
    """W = 2, D_max = 1, the check never says Yes. stop: check: the check at depth 0 and 1, then rank's call
    answers over Dir X, Dir Y (6 calls). stop: rank: rank's call in place of each check, the best depth answers
    (5 calls: the final rank call is not needed)."""
    score = prefer("directed", "Film A", enough_at=("nothing",), answer=answer)
    res, calls = run(gkg, ScriptedScores(score), width=2, d_max=1, decide="score", answer="rank")
    assert res.trace["stop"] == "max_depth" and res.depth == 1 and len(calls) == 6
    b = ScriptedScores(score)
    res, calls = run(gkg, b, width=2, d_max=1, decide="score", answer="rank", stop="rank")
    (d1,) = res.trace["depths"]
    assert d1["chains"] == [[["Film A"], ["Dir X"]], [["Film B"], ["Dir Y"]]]
    by_score = lambda names: sorted(([n, answer[n]] for n in names), key=lambda x: -x[1])  # noqa: E731
    assert res.trace["initial"]["reasoning"] == {"rank_top": by_score(["Film A", "Film B"])}
    assert d1["reasoning"] == {"rank_top": by_score(["Dir X", "Dir Y"])}
    assert res.answer == expected and res.depth == depth and res.trace["answer_depth"] == depth
    assert res.trace["stop"] == "max_depth" and res.trace["depth_reached"] == 1 and res.fallback is None
    assert res.trace["llm_requests"] == ["prune_multi", "rank", "prune", "prune", "rank"] and len(calls) == 5
    assert kinds(b) == ["score"] * 5 and not any(tuple(r.continuations) == ENOUGH_OPTIONS for r in b.requests)


def test_fasttog_stop_rank_only_with_scored_decisions_and_the_rank_answer(gkg):
    """stop: rank changes nothing without decide: score and answer: rank: with decide: generate the paper's
    reasoning reply still ends the search (the same calls and answer as stop: check)."""
    got = []
    for stop in ("check", "rank"):
        b = ScriptedScores(prefer(answer={"Dir X": -2.0, "Dir Y": -1.0}), text=fast_reply)
        res, _ = run(gkg, b, width=2, d_max=3, decide="generate", answer="rank", stop=stop)
        got.append((res.answer, res.depth, res.trace["stop"], res.trace["llm_requests"]))
        assert "answer_depth" not in res.trace
    assert got[0] == got[1] == ("Dir Y", 1, "answered", ["prune_multi", "reason", "prune", "prune", "reason",
                                                          "rank"])


@pytest.mark.parametrize("width,d_max,text", [(1, 1, "graph2text"), (2, 2, "graph2text"), (3, 3, "graph2text"),
                                              (2, 2, "triple2text")])
def test_fasttog_stop_rank_call_bound_holds(dense, width, d_max, text):
    """Adversarial scores for stop: rank ("None of the above" worst, every chain grows each round): rank's call
    replaces each check one for one and the best depth answers with no final call, one call under the scored
    check's worst case."""
    def score(req, opt):
        if "Answer:" in user(req):
            return -1.0 if opt == "n0" else -5.0
        return -9.0 if opt == NONE_OPTION else -5.0
    q = Question("q", "what is related to [n0]", dense.ids_of(["n0"]))
    res, calls = run(dense, ScriptedScores(score), question=q, width=width, d_max=d_max, text=text,
                     graph2text="llm", decide="score", answer="rank", stop="rank", max_size=4)
    llm_text = text == "graph2text"
    bound = implementation_bound(width, d_max, llm_text)
    assert res.trace["call_bound"] == {"calls": len(calls), "bound": bound, "holds": True}
    req = res.trace["llm_requests"]
    assert req.count("prune_multi") == 1 and req.count("prune") == width * d_max and req.count("rank") == d_max + 1
    assert "reason" not in req and "fallback" not in req and res.trace["stop"] == "max_depth"
    assert res.trace["depth_reached"] == d_max and res.depth == res.trace["answer_depth"] <= d_max
    assert len(calls) == (bound - 1 if llm_text else width * d_max + d_max + 2)


# ---------------------------------------------------------------------------------------------- LEGO llm scorer

class TokenScores(ScriptedScores):
    """Scoring requests answered with ``score(request, doc)`` as the sum log-prob over the doc's words (tokens)."""

    def generate(self, requests):
        self.requests.extend(requests)
        return [LLMReply(text=score_reply_text([(self.score(r, c), len(c.split())) for c in r.continuations]),
                         tokens_in=1, tokens_out=0) for r in requests]


def test_lego_llm_scorer_decide_score(gkg):
    """decide score: one scoring call over every doc (the loglik scorer's prompt), nothing generated; mean
    normalization ranks the long doc first (-3 over 6 tokens), sum the short one (-2 over 2); a failed call
    scores every doc -1e9 and counts them unparsed."""
    docs = ["Film A directed by Dir X", "Dir X", "Dir X born in City Q"]
    lp = {docs[0]: -3.0, docs[1]: -2.0, docs[2]: -12.0}
    b = TokenScores(lambda req, doc: lp[doc])
    ctx = Context(question=QUESTION, query_vec=np.zeros(1), kg=gkg, index=None, topic_names=("Actor P",),
                  llm=lambda: LLMClient(b, cache=None))
    entry = SCORERS.get("llm")
    assert entry.version.startswith("3-") and entry.params().decide == "generate"
    mean = entry.impl(query=QUESTION, docs=docs, params=entry.params(decide="score"), ctx=ctx)
    assert mean.tolist() == [-0.5, -1.0, -2.0] and int(np.argmax(mean)) == 0
    (r,) = b.requests
    assert r.continuations == tuple(docs) and user(r) == LOGLIK_PROMPT.format(question=QUESTION, topics="Actor P")
    total = entry.impl(query=QUESTION, docs=docs, params=entry.params(decide="score", score_normalize="sum"), ctx=ctx)
    assert total.tolist() == [-3.0, -2.0, -12.0] and int(np.argmax(total)) == 1
    assert len(b.requests) == 2 and all(q.continuations for q in b.requests) and ctx.take_counts() == {}

    class Broken(TokenScores):
        def generate(self, requests):
            self.requests.extend(requests)
            return [LLMReply(text="", error="boom") for _ in requests]
    bad = Context(question=QUESTION, query_vec=np.zeros(1), kg=gkg, index=None, topic_names=("Actor P",),
                  llm=lambda: LLMClient(Broken(None), cache=None))
    got = entry.impl(query=QUESTION, docs=docs, params=entry.params(decide="score"), ctx=bad)
    assert got.tolist() == [-1e9] * 3 and bad.take_counts() == {"llm_unparsed": 3}


# ---------------------------------------------------------------------------------------------- the real SmolLM2

def test_fasttog_score_with_real_smollm2(gkg):
    """The real embedded model through every scored decision: every option gets a finite score, the answer is
    an entity of the chains' last communities, and the calls are within the bound."""
    from tests.test_decide_tog import smollm2_client

    client = smollm2_client()
    entry = REASONERS.get("fasttog")
    q = Question("g1", QUESTION, gkg.ids_of(["Actor P"]))
    job = entry.impl(inp=ReasonInput(question=q, context="", kg=gkg, sampling=Sampling()),
                     params=entry.params(width=2, d_max=2, max_size=1, rho=1.0, decide="score", answer="rank"))
    ((res, calls),) = run_batched(jobs=[job], client=client)
    steps = [res.trace["initial"]] + [p for d in res.trace["depths"] for p in d["pruning"] if "scores" in p]
    for step in steps:
        assert all(isinstance(s, float) and s < 0 for _, s in step["scores"])
    checks = [res.trace["initial"]] + res.trace["depths"]
    for c in checks:
        if "reasoning" in c:
            assert all(isinstance(s, float) for _, s in c["reasoning"]["scores"])
    chains = res.trace["depths"][-1]["chains"] if res.trace["depths"] else res.trace["initial"]["chains"]
    reached = {n for ch in chains for n in ch[-1]}
    assert res.trace["answer_from"] == "rank" and res.answer and set(res.answer.split(" | ")) <= reached
    assert len(calls) <= call_bound(2, 2) and not any(c.failed for c in calls)
    assert res.trace["llm_requests"][-1] == "rank" and res.unparseable == 0
