"""``decide: score`` and ``answer: rank`` of ToG (kgrag.reasoning.reasoners.decide): golden steps on the five-edge KG with
scripted scores, the call bound, a failed scoring call, and the real SmolLM2 on the same KG.

Scripted scores are log-probs per option (the reply text of a scoring call, ``llm.score_reply_text``): the test
says which option must score best, and the expected pruning and answer follow from ToG's algorithm (Sun et al.,
ICLR 2024, section 2.1) with each choice taken as the best-scored option(s).
"""

from __future__ import annotations

import json

import pytest

from kgrag.llm.calls import LLMClient, LLMReply, score_reply_text
from kgrag.reasoning.reasoners import REASONERS, ReasonInput, Sampling, run_batched
from kgrag.reasoning.reasoners.decide import ENOUGH_OPTIONS
from kgrag.types import Question
from tests.test_golden_reasoners import QUESTION, gkg, user  # noqa: F401  (fixture)


class ScriptedScores:
    """Scoring requests answered by ``score(request, option) -> log-prob``; generation requests by ``text``."""

    model_id = "scripted-scores"

    def __init__(self, score, text=lambda req: "Answer: fallback"):
        self.score, self.text, self.requests = score, text, []

    def generate(self, requests):
        self.requests.extend(requests)
        out = []
        for r in requests:
            if r.continuations:
                out.append(LLMReply(text=score_reply_text([(self.score(r, c), 2) for c in r.continuations]),
                                    tokens_in=1, tokens_out=0))
            else:
                out.append(LLMReply(text=self.text(r), tokens_in=1, tokens_out=1))
        return out


def run(kg, backend, **params):
    entry = REASONERS.get("tog")
    q = Question("g1", QUESTION, kg.ids_of(["Actor P"]))
    job = entry.impl(inp=ReasonInput(question=q, context="", kg=kg, sampling=Sampling()), params=entry.params(**params))
    ((res, calls),) = run_batched(jobs=[job], client=LLMClient(backend, cache=None))
    return res, calls


def prefer(*needles, enough_at=("directed_by",), answer=None):
    """Options containing a needle score -1 (earlier needles higher), others -5; the sufficiency check says Yes
    once the facts contain one of ``enough_at``; rank's names score by ``answer`` (name -> log-prob)."""
    def score(req, opt):
        u = user(req)
        if tuple(req.continuations) == ENOUGH_OPTIONS:
            yes = any(n in u for n in enough_at)
            return {"Yes": -1.0 if yes else -3.0, "No": -3.0 if yes else -1.0}[opt]
        if answer is not None and "Answer:" in u:
            return answer.get(opt, -9.0)
        for i, n in enumerate(needles):
            if n in opt:
                return -1.0 - 0.1 * i
        return -5.0
    return score


def test_tog_scored_pruning_and_rank_answer(gkg):
    """W = 1, D = 2, decide score, answer rank. Depth 1: one relation option, then Film A scores above Film B
    (one chain); the facts name no director: No. Depth 2: (Film A, directed_by, ?) is the only unused relation of
    Film A; Dir X is reached; the check says Yes; the chain's one end Dir X is the answer without rank's call
    (rank's one-candidate rule)."""
    b = ScriptedScores(prefer("directed_by", "Film A", answer={"Dir X": -0.5}))
    res, calls = run(gkg, b, width=1, depth=2, decide="score", answer="rank")
    d1, d2 = res.trace["depths"]
    # one relation option with W = 1: nothing to choose, so no call and no score
    assert d1["relations"]["chosen"] == ["(?, starred_actors, Actor P)"] and "scores" not in d1["relations"]
    assert d1["relations"]["no_call"]
    assert d1["entities"]["chosen"] == ["(Film A, starred_actors, Actor P)"]
    ents = dict(map(tuple, d1["entities"]["scores"]))
    assert ents["(Film A, starred_actors, Actor P)"] > ents["(Film B, starred_actors, Actor P)"]
    assert d1["reasoning"]["enough"] is False
    assert d2["relations"]["chosen"] == ["(Film A, directed_by, ?)"]
    assert d2["chains"] == [["(Film A, starred_actors, Actor P)", "(Film A, directed_by, Dir X)"]]
    assert d2["reasoning"]["enough"] is True
    assert res.answer == "Dir X" and res.depth == 2 and res.unparseable == 0
    assert res.trace["answer_from"] == "rank" and res.trace["rank_top"] == [["Dir X", None]]
    assert res.trace["no_call"].startswith("one candidate")
    # every decision with a choice was a scoring call: depth 1's entities + 2 checks = 3 <= 3 D + 1 (the relation
    # decisions, depth 2's entities and rank had one option each)
    assert len(calls) == 3 and all(r.continuations for r in b.requests)
    assert b.requests[-1].continuations == ("Yes", "No")  # the last call was the check, not rank
    # the option's score is the mean over its tokens (score_normalize mean): -5.0 over 2 tokens
    assert ents["(Film B, starred_actors, Actor P)"] == -2.5


def test_tog_scored_pruning_keeps_the_width_best(gkg):
    """W = 2: both films kept at depth 1, then both directed_by relations; rank picks the better-scored end."""
    b = ScriptedScores(prefer("directed_by", "Film B", "Film A", answer={"Dir X": -2.0, "Dir Y": -1.0}))
    res, _ = run(gkg, b, width=2, depth=2, decide="score", answer="rank", margin=0.0)
    d1, d2 = res.trace["depths"]
    # two films, W = 2: both kept without a call
    assert sorted(d1["entities"]["chosen"]) == ["(Film A, starred_actors, Actor P)", "(Film B, starred_actors, Actor P)"]
    assert d1["entities"]["no_call"]
    assert sorted(d2["relations"]["chosen"]) == ["(Film A, directed_by, ?)", "(Film B, directed_by, ?)"]
    assert res.answer == "Dir Y" and "no_call" not in res.trace
    # rank's call is the answer prompt over the chains' facts, the two ends as continuations
    assert sorted(b.requests[-1].continuations) == ["Dir X", "Dir Y"]
    assert "(Film A, directed_by, Dir X)" in user(b.requests[-1]) and "(Film B, directed_by, Dir Y)" in user(b.requests[-1])
    res2, _ = run(gkg, b, width=2, depth=2, decide="score", answer="rank", margin=1.5)
    assert res2.answer == "Dir Y | Dir X"  # within the margin: both, best first


def test_tog_rank_at_max_depth_and_generated_answer_with_scored_pruning(gkg):
    """The check never says Yes: at depth D rank answers over the chains' ends (no CoT fallback). With answer
    generate, the pruning is scored and the reasoning reply is generated and parsed as in the paper."""
    b = ScriptedScores(prefer("directed_by", "Film A", enough_at=("nothing",), answer={"Dir X": -0.1}))
    res, calls = run(gkg, b, width=1, depth=2, decide="score", answer="rank")
    assert res.trace["stop"] == "max_depth" and res.answer == "Dir X" and res.fallback is None
    assert len(calls) == 3  # depth 1's entities, 2 checks (single-option decisions, rank's one end: no call)

    def text(req):
        return "Answer: Dir X" if "directed_by" in user(req) else "Answer: Unknown"
    g = ScriptedScores(prefer("directed_by", "Film A"), text=text)
    res, calls = run(gkg, g, width=1, depth=2, decide="score", answer="generate")
    assert res.answer == "Dir X" and res.trace["stop"] == "answered"
    kinds = ["score" if r.continuations else "text" for r in g.requests]
    assert kinds == ["score", "text", "text"]  # depth 1's entities scored; each depth's reasoning generated


def test_tog_stop_rank_answers_with_the_best_scored_depth(gkg):
    """stop: rank: rank's call after every depth over the chains' ends; the depth whose best name scores highest
    answers (here depth 1's Film A at -0.5 beats depth 2's Dir X at -1.0), no check call (rank at each depth,
    depth 1's entity decision; the others have one option)."""
    b = ScriptedScores(prefer("directed_by", "Film A", answer={"Film A": -0.5, "Dir X": -1.0}))
    res, calls = run(gkg, b, width=1, depth=2, decide="score", answer="rank", stop="rank")
    d1, d2 = res.trace["depths"]
    assert d1["reasoning"] == {"rank_top": [["Film A", -0.5]]}
    assert d2["reasoning"] == {"rank_top": [["Dir X", -1.0]]}
    assert res.answer == "Film A" and res.depth == 1 and res.trace["answer_depth"] == 1
    assert len(calls) == 3 and not any(tuple(r.continuations) == ENOUGH_OPTIONS for r in b.requests)
    b = ScriptedScores(prefer("directed_by", "Film A", answer={"Film A": -3.0, "Dir X": -1.0}))
    res, _ = run(gkg, b, width=1, depth=2, decide="score", answer="rank", stop="rank")
    assert res.answer == "Dir X" and res.depth == 2


# the five-edge KG with directors whose names parse_answers would cut: "3. Dir Y" reads as a bullet, the full
# stop of "Dir X Jr." as the end of a sentence
CUT = {"Dir X": "Dir X Jr.", "Dir Y": "3. Dir Y"}


@pytest.fixture(scope="module")
def cut_kg(tmp_path_factory):
    from kgrag.kg.duckdb_io import write_duckdb
    from kgrag.kg.store import KGStore
    from tests.conftest import tiny_tables
    from tests.test_golden_reasoners import EDGES

    path = tmp_path_factory.mktemp("cut") / "kg.duckdb"
    write_duckdb(path, tiny_tables([(CUT.get(h, h), r, CUT.get(t, t)) for h, r, t in EDGES]))
    return KGStore(path)


def predicted(res, calls) -> list[str]:
    """The question's parsed answers as the generations row stores them (``rows_of``)."""
    from kgrag import schema as S
    from kgrag.reasoning.reasoners import rows_of

    (row,) = rows_of(question_ids=["g1"], results=[(res, calls)], reasoner="x", separator="|", seed=0, per_q_ms=0.0)
    return row[S.PREDICTED_ANSWERS]


def test_tog_rank_answer_reports_the_entities_it_chose_not_a_reparse(cut_kg):
    """answer: rank: the ends rank chose are the answers as they are (``Reasoning.answers``), at the check's
    stop (both within the margin, best first), with one end and no call, and with stop: rank (the best depth's);
    the answer text is their joined names as before. A generated answer is still parsed from its text."""
    from kgrag.llm.prompts import parse_answers

    b = ScriptedScores(prefer("directed_by", "Film B", "Film A", answer={"Dir X Jr.": -2.0, "3. Dir Y": -1.0}))
    res, calls = run(cut_kg, b, width=2, depth=2, decide="score", answer="rank", margin=1.5)
    assert res.answer == "3. Dir Y | Dir X Jr." and res.answers == ("3. Dir Y", "Dir X Jr.")
    assert parse_answers(res.answer) == ["Dir Y", "Dir X Jr"]  # what a re-parse of the text would have scored
    assert predicted(res, calls) == ["3. Dir Y", "Dir X Jr."]
    one, calls = run(cut_kg, ScriptedScores(prefer("directed_by", "Film A")), width=1, depth=2, decide="score",
                     answer="rank")
    assert one.trace["no_call"] and one.answers == ("Dir X Jr.",) and predicted(one, calls) == ["Dir X Jr."]
    b = ScriptedScores(prefer("directed_by", "Film A", answer={"Film A": -3.0, "Dir X Jr.": -1.0}))
    best, calls = run(cut_kg, b, width=1, depth=2, decide="score", answer="rank", stop="rank")
    assert best.depth == 2 and best.answers == ("Dir X Jr.",) and predicted(best, calls) == ["Dir X Jr."]

    def text(req):
        return "Answer: 3. Dir Y" if "directed_by" in user(req) else "Answer: Unknown"
    gen, calls = run(cut_kg, ScriptedScores(prefer("directed_by", "Film B"), text=text), width=1, depth=2,
                     decide="score", answer="generate")
    assert gen.answers is None and predicted(gen, calls) == ["Dir Y"]


def test_tog_failed_scoring_call_keeps_the_prerank_and_is_not_unparseable(gkg):
    """A scoring call that failed (no score list) keeps the pre-rank's first W; scores are recorded as None."""
    class Broken(ScriptedScores):
        def generate(self, requests):
            self.requests.extend(requests)
            return [LLMReply(text="", error="boom") if r.continuations and "Which fact" in user(r)
                    else super(Broken, self).generate([r])[0] for r in requests]
    b = Broken(prefer("directed_by", "Film A"))
    res, _ = run(gkg, b, width=1, depth=1, decide="score", answer="rank")
    (d1,) = res.trace["depths"]
    assert [s for _, s in d1["entities"]["scores"]] == [None, None]
    assert len(d1["entities"]["chosen"]) == 1 and res.unparseable == 0


def smollm2_client():
    """A client of the embedded default LLM (SmolLM2-135M through llama.cpp), without a call cache."""
    from kgrag.llm.clients import client_for
    from kgrag.params import GenerateParams

    g = GenerateParams()
    assert g.backend == "llamacpp"  # the embedded default: SmolLM2-135M through llama.cpp
    return client_for(g, cache=None)


def test_tog_score_with_real_smollm2(gkg):
    """The real embedded model through every scored decision: every option gets a finite score, the answer is a
    KG entity reached by the search, and the calls are within the bound."""
    client = smollm2_client()
    entry = REASONERS.get("tog")
    q = Question("g1", QUESTION, gkg.ids_of(["Actor P"]))
    job = entry.impl(inp=ReasonInput(question=q, context="", kg=gkg, sampling=Sampling()),
                     params=entry.params(width=1, depth=2, decide="score", answer="rank"))
    ((res, calls),) = run_batched(jobs=[job], client=client)
    scored = 0
    for d in res.trace["depths"]:
        for step in ("relations", "entities"):
            assert ("scores" in d[step]) != bool(d[step].get("no_call"))  # scored, or no choice to make
            assert all(isinstance(s, float) and s < 0 for _, s in d[step].get("scores", []))
            scored += "scores" in d[step]
    assert scored >= 1
    assert res.answer and set(res.answer.split(" | ")) <= {"Dir X", "Dir Y", "Film A", "Film B", "City Q"}
    assert len(calls) <= 3 * 2 + 1 and not any(c.failed for c in calls)
    json.dumps(res.trace)  # the trace is JSON (generations.parquet stores it)
