"""``demos: k`` of ToG's scored decisions (kgrag.reasoning.reasoners.decide.Demos): the nearest labelled questions
of a learnt plan shown as chat turns, relations scored as the next step of the question's path, the path's end
scored ('.' against ' ->'). Golden steps on the five-edge KG with a tiny plan and a scripted model that copies
the demonstrations' paths; then the real SmolLM2 and MiniLM on the same KG."""

from __future__ import annotations

import numpy as np
import pytest

from kgrag.index.relplan import PlanModel, mask_topics
from kgrag.llm.calls import LLMClient
from kgrag.reasoning.reasoners import REASONERS, ReasonInput, Sampling, run_batched
from kgrag.reasoning.reasoners import decide as dc
from kgrag.types import Question
from tests.test_decide_tog import ScriptedScores
from tests.test_golden_reasoners import EDGES, gkg  # noqa: F401  (fixture)

PLAN_TEXTS = ["where was X born", "who directed the films X starred in", "what films did X star in"]
PLAN_LABELS = [(("born_in", True),), (("starred_actors", False), ("directed_by", True)),
               (("starred_actors", False),)]


class NearestIs:
    """An embedding index whose every text embeds to plan row ``row``'s unit vector (``model`` as the plan's)."""

    model = "fake-encoder"

    def __init__(self, row: int) -> None:
        self.row = row

    def encode(self, texts):
        v = np.zeros((len(texts), len(PLAN_TEXTS)), dtype=np.float32)
        v[:, self.row] = 1.0
        return v


@pytest.fixture()
def plan(tmp_path):
    folder = tmp_path / "relplan"
    PlanModel(model="fake-encoder", texts=PLAN_TEXTS, hops=np.asarray([len(x) for x in PLAN_LABELS]),
              labels=PLAN_LABELS, vectors=np.eye(len(PLAN_TEXTS), dtype=np.float32)).save(folder)
    return str(folder)


def copier(answer=None, prefer=("Film A",)):
    """A model that copies the demonstrations: a path option scores -0.1 when it is a prefix of a shown path
    ('.' options: when it is a whole shown path), else -4; other decisions prefer ``prefer``; rank by ``answer``."""
    def score(req, opt):
        if req.messages[0][1] == dc.PATH_SYSTEM:
            shown = [m[1] for m in req.messages[1:-1] if m[0] == "assistant"]
            if opt.endswith("."):
                return -0.1 if opt in shown else -4.0
            if opt.endswith(" ->"):
                return -0.1 if any(p.startswith(opt[:-3] + " -> ") for p in shown) else -4.0
            return -0.1 if any(p.startswith(opt) for p in shown) else -4.0
        if answer is not None and "Answer:" in req.messages[-1][1]:
            return answer.get(opt, -9.0)
        return -1.0 if any(n in opt for n in prefer) else -5.0
    return score


def ends_of(path: str, start: str) -> set[str]:
    """The entities a relation path written as the demonstrations write it reaches from ``start`` (EDGES)."""
    at = {start}
    for step in path.split(" -> "):
        rel, back = step.removesuffix(" (reverse)"), step.endswith(" (reverse)")
        at = {(h if back else t) for h, r, t in EDGES if r == rel and (t if back else h) in at}
    return at


def run(kg, backend, question, topic, index, **params):
    entry = REASONERS.get("tog")
    q = Question("d1", question, kg.ids_of([topic]))
    job = entry.impl(inp=ReasonInput(question=q, context="", kg=kg, index=index, sampling=Sampling()),
                     params=entry.params(**params))
    ((res, calls),) = run_batched(jobs=[job], client=LLMClient(backend, cache=None))
    return res, calls


def test_demos_pick_the_relation_and_end_the_path(gkg, plan):
    """Dir X has two relations (directed_by in, born_in out), W = 1: the demonstration 'where was X born' ->
    born_in makes born_in the next step; City Q is reached; 'born_in.' is a whole shown path, so the path ends at
    depth 1 and rank answers City Q."""
    b = ScriptedScores(copier(answer={"City Q": -0.3}))
    res, calls = run(gkg, b, "where was [Dir X] born", "Dir X", NearestIs(0), width=1, depth=3, decide="score",
                     answer="rank", stop="path", demos=1, plan=plan)
    (d1,) = res.trace["depths"]
    assert res.trace["demos"] == [["where was X born", "born_in"]]
    assert d1["relations"]["chosen"] == ["(Dir X, born_in, ?)"]
    # a step scores as its whole path ending ('.') or going on (' ->'), log-sum of the two summed log-probs:
    # born_in: '.' -0.1, ' ->' -4.0 -> -0.08; directed_by (reverse): -4.0 twice -> -3.3069
    (paths,) = d1["relations"]["paths"]
    assert paths["path"] == "" and sorted(paths["scores"]) == [["born_in", -0.08], ["directed_by (reverse)", -3.3069]]
    assert d1["reasoning"] == {"path": "born_in", "path_ends": True, "scores": [[".", -0.1], [" ->", -4.0]]}
    assert res.answer == "City Q" and res.trace["stop"] == "answered" and res.depth == 1
    # the path request: the system prompt, the demonstration as a user / assistant pair, the masked question
    path_req = b.requests[0]
    assert path_req.messages[1:] == (("user", "Question: where was X born"), ("assistant", "born_in."),
                                     ("user", "Question: where was X born"))
    assert sorted(path_req.continuations) == ["born_in ->", "born_in.", "directed_by (reverse) ->",
                                              "directed_by (reverse)."]
    # relation (1 call, which also scored the path's end: no end call); City Q was the only entity: no entity call,
    # and the path's one end: no rank call (rank's one-candidate rule)
    assert len(calls) == 1 <= (1 + 2) * 3 + 1
    assert res.trace["rank_top"] == [["City Q", None]] and res.trace["no_call"].startswith("one candidate")


def test_demos_path_goes_on_until_the_shown_path_ends(gkg, plan):
    """Actor P, the demonstration 'starred_actors (reverse) -> directed_by': after depth 1 the path goes on
    (' ->' is a prefix of the shown path, '.' is not), after depth 2 it ends; rank answers the chain's end."""
    b = ScriptedScores(copier(answer={"Dir X": -0.5}))
    res, calls = run(gkg, b, "who directed the films [Actor P] starred in", "Actor P", NearestIs(1), width=1,
                     depth=3, decide="score", answer="rank", stop="path", demos=1, plan=plan)
    d1, d2 = res.trace["depths"]
    assert d1["reasoning"]["path"] == "starred_actors (reverse)" and d1["reasoning"]["path_ends"] is False
    assert d2["reasoning"]["path"] == "starred_actors (reverse) -> directed_by" and d2["reasoning"]["path_ends"]
    assert d2["chains"] == [["(Film A, starred_actors, Actor P)", "(Film A, directed_by, Dir X)"]]
    assert res.answer == "Dir X" and res.depth == 2
    assert len(calls) <= (1 + 2) * 3 + 1


def test_demos_are_distinct_and_nearest_first(plan):
    """The k nearest labelled questions, nearest first, each (text, path) once."""
    demos = dc.Demos(plan, NearestIs(2))
    got = demos.nearest("what films did X star in", 2)
    assert got[0] == ("what films did X star in", (("starred_actors", False),))
    assert len(got) == 2 and len(set(got)) == 2
    assert mask_topics("what films did [Actor P] star in", ["Actor P"]) == "what films did X star in"


def test_plan_nearest_is_what_votes_and_demos_use(plan):
    """PlanModel.nearest: rows nearest first (cosine rounded, ties by row), within a hop count when given; votes
    weigh exactly those rows, and the demonstrations are those rows' questions."""
    from kgrag.index import relplan

    model = relplan.load_cached(plan)
    q = np.asarray([0.5, 1.0, 0.5], dtype=np.float32)  # row 1 nearest; rows 0 and 2 tie
    rows, sims = model.nearest(q, 3)
    assert rows.tolist() == [1, 0, 2] and sims.tolist() == [1.0, 0.5, 0.5]
    assert model.nearest(q, 3, hops=1)[0].tolist() == [0, 2]
    _, whole = model.votes(q, 2)
    assert whole == {PLAN_LABELS[1]: 0.666667, PLAN_LABELS[0]: 0.333333}  # cosines 1.0 and 0.5
    assert model.shares(*model.nearest(q, 2)) == model.votes(q, 2)
    assert model.nearest(q, 0)[0].tolist() == [] and model.votes(q, 0) == ({}, {})


def test_demos_need_scored_decisions_and_a_matching_encoder(plan):
    entry = REASONERS.get("tog")
    with pytest.raises(ValueError, match="decide: score"):
        entry.params(demos=2)
    with pytest.raises(ValueError, match="needs demos"):
        entry.params(decide="score", answer="rank", stop="path")

    class Other(NearestIs):
        model = "another-encoder"
    with pytest.raises(ValueError, match="relplan"):
        dc.Demos(plan, Other(0))


def run_real(kg, tmp_path, reasoner: str, **params):
    """``reasoner`` on 'where was [Dir X] born' with the real embedded models: MiniLM embeds a plan of
    PLAN_TEXTS and the question (the demonstrations use only the index's encoder), SmolLM2 scores."""
    from kgrag.index.embed import EmbeddingIndex, encode
    from tests.test_decide_tog import smollm2_client

    model = "all-MiniLM-L6-v2"
    folder = tmp_path / "relplan"
    PlanModel(model=model, texts=PLAN_TEXTS, hops=np.asarray([len(x) for x in PLAN_LABELS]), labels=PLAN_LABELS,
              vectors=encode(PLAN_TEXTS, model=model).astype(np.float32)).save(folder)
    empty = np.zeros((0, 384), dtype=np.float32)
    index = EmbeddingIndex(model=model, entity_vectors=empty, relation_vectors=empty)
    entry = REASONERS.get(reasoner)
    q = Question("r1", "where was [Dir X] born", kg.ids_of(["Dir X"]))
    job = entry.impl(inp=ReasonInput(question=q, context="", kg=kg, index=index, sampling=Sampling()),
                     params=entry.params(plan=str(folder), **params))
    ((res, calls),) = run_batched(jobs=[job], client=smollm2_client())
    return res, calls


def test_demos_with_real_smollm2_and_minilm(gkg, tmp_path):
    """The real embedded models: MiniLM embeds the plan's questions and the question; SmolLM2 scores the path
    steps and the end. Every path decision gets finite scores; the answer is an entity of the KG."""
    res, calls = run_real(gkg, tmp_path, "tog", width=1, depth=2, decide="score", answer="rank", stop="path",
                          demos=2)
    assert res.trace["demos"][0] == ["where was X born", "born_in"]  # MiniLM finds the same question
    d1 = res.trace["depths"][0]
    assert all(isinstance(s, float) and s < 0 for p in d1["relations"]["paths"] for _, s in p["scores"])
    assert res.answer in {"City Q", "Film A", "Dir X", "Actor P", "Film B", "Dir Y"}
    assert not any(c.failed for c in calls)


def test_report_view_shows_the_demonstrations_and_path_scores(gkg, plan):
    """report.html's ToG view lists the demonstrations, the path-end decision, and every path option's score."""
    from kgrag.reporting import report_html as R
    from kgrag.reporting import trace_views as T
    from tests.test_report_html import _all_edges, _gen_row

    b = ScriptedScores(copier(answer={"City Q": -0.3}))
    res, calls = run(gkg, b, "where was [Dir X] born", "Dir X", NearestIs(0), width=1, depth=3, decide="score",
                     answer="rank", stop="path", demos=1, plan=plan)
    view = R.question_view(R.QuestionData(row=_gen_row(res, calls, "tog"), subgraph=_all_edges(gkg),
                                          topic_ids=gkg.ids_of(["Dir X"])))
    assert '<ul class="demos"><li>where was X born → <code>born_in</code></li></ul>' in view
    assert "path ends here" in view
    assert "depths[0].relations.paths[0]" in view and "directed_by (reverse)" in view


# ---- explore with demonstrations ---------------------------------------------------------------------------------

class ExploreIndex(NearestIs):
    """NearestIs with empty entity / relation vectors: explore's pre-rank keeps the KG's order."""

    entity_vectors = np.zeros((0, len(PLAN_TEXTS)), dtype=np.float32)
    relation_vectors = np.zeros((0, len(PLAN_TEXTS)), dtype=np.float32)


def run_explore(kg, backend, question, topic, index, **params):
    entry = REASONERS.get("explore")
    q = Question("e1", question, kg.ids_of([topic]))
    base = dict(max_steps=2, depth=2, max_relations=1, max_neighbours=5, decide="score", answer="rank")
    job = entry.impl(inp=ReasonInput(question=q, context="", kg=kg, index=index, sampling=Sampling()),
                     params=entry.params(**{**base, **params}))
    ((res, calls),) = run_batched(jobs=[job], client=LLMClient(backend, cache=None))
    return res, calls


def test_explore_demos_walk_the_shown_path_and_answer_its_ends(gkg, plan):
    """Actor P, the demonstration 'starred_actors (reverse) -> directed_by'. Level 1: the one step out of Actor P
    (no end options: the path is empty); level 2: Film A and Film B share the path 'starred_actors (reverse)', one
    call scores its steps, each ending and going on; directed_by is kept. The End? check: the 2-step path ending
    ('.') outscores every path still open, so the chain ends after one step and rank answers
    over the ends of that path only (Dir X, Dir Y; not the films)."""
    b = ScriptedScores(copier(answer={"Dir X": -0.5, "Film A": -0.1}))
    res, calls = run_explore(gkg, b, "who directed the films [Actor P] starred in", "Actor P", ExploreIndex(1),
                             demos=1, plan=plan)
    assert res.trace["demos"] == [["who directed the films X starred in", "starred_actors (reverse) -> directed_by"]]
    (step,) = res.trace["steps"]
    lv1, fa, fb = step["explored"]
    assert lv1["entity"] == "Actor P" and lv1["path"] == "" and "path_end" not in lv1
    # a step's score: log(P(path -> step '.') + P(path -> step ' ->')); -0.08 on the shown path, -3.3069 off it
    assert lv1["relation_scores"] == [["starred_actors (reverse)", -0.08]]
    assert {fa["entity"], fb["entity"]} == {"Film A", "Film B"}
    assert fa["path"] == "starred_actors (reverse)" and fa["path_end"] == [[".", -4.0], [" ->", -0.1]]
    assert dict(fa["relation_scores"]) == {"directed_by": -0.08, "starred_actors": -3.3069}
    assert fa["relations"] == ["directed_by"]  # max_relations 1; starred_actors back to Actor P not walked
    assert step["path_end"] == {"path": "starred_actors (reverse) -> directed_by", "score": -0.1,
                                "open_score": -4.0, "ends": True}
    assert res.trace["answer_path"] == "starred_actors (reverse) -> directed_by"
    assert [n for n, _ in res.trace["rank_top"]] == ["Dir X", "Dir Y"]  # Film A scores higher but is not an end
    assert res.answer == "Dir X" and res.depth == 1
    # thought (1), the path calls of the two levels (2; they score the new paths' ends too), rank (1)
    assert len(calls) == 4


def test_explore_demos_an_expanded_path_does_not_hold_the_end(gkg, plan):
    """max_entities 1: level 2 visits Film A only. Film B stays unvisited, but its path 'starred_actors
    (reverse)' was expanded at Film A (the scores are the path's), so its ' ->' (scored here above the whole
    2-step path) does not keep the chain open; the director's path, not expanded, is the open bound."""
    base = copier(answer={"Dir X": -0.5})

    def score(req, opt):
        return -0.05 if opt == "starred_actors (reverse) ->" else base(req, opt)
    res, _ = run_explore(gkg, ScriptedScores(score), "who directed the films [Actor P] starred in", "Actor P",
                         ExploreIndex(1), demos=1, plan=plan, max_entities=1)
    (step,) = res.trace["steps"]
    assert [e["entity"] for e in step["explored"]] == ["Actor P", "Film A"]
    assert step["path_end"] == {"path": "starred_actors (reverse) -> directed_by", "score": -0.1,
                                "open_score": -4.0, "ends": True}
    assert res.answer == "Dir X" and res.depth == 1


def test_explore_demos_a_one_step_path_answers_its_ends(gkg, plan):
    """The demonstration 'starred_actors (reverse)': the walk still reaches the directors (max_relations 1 keeps
    the best step even when it is unlikely), but the whole path 'starred_actors (reverse).' is the most likely
    reply, so rank answers over the films."""
    b = ScriptedScores(copier(answer={"Film B": -0.2, "Dir X": -0.1}))
    res, _ = run_explore(gkg, b, "what films did [Actor P] star in", "Actor P", ExploreIndex(2), demos=1, plan=plan)
    assert res.trace["answer_path"] == "starred_actors (reverse)"
    assert sorted(n for n, _ in res.trace["rank_top"]) == ["Film A", "Film B"]
    assert res.answer == "Film B"


def test_explore_demos_need_scored_decisions(plan):
    entry = REASONERS.get("explore")
    with pytest.raises(ValueError, match="decide: score"):
        entry.params(demos=2)
    with pytest.raises(ValueError, match="prune: llm"):
        entry.params(demos=2, decide="score", prune="embedding")
    assert entry.params(demos=2, decide="score").plan == "data/relplan"


def test_explore_demos_with_real_smollm2_and_minilm(gkg, tmp_path):
    """The real embedded models through explore's path decisions: finite scores for every step and end, the
    answer an end of the path the search judged most likely."""
    res, calls = run_real(gkg, tmp_path, "explore", max_steps=1, depth=1, decide="score", answer="rank", demos=2,
                          thought_max_tokens=16)
    assert res.trace["demos"][0] == ["where was X born", "born_in"]
    (lv1,) = res.trace["steps"][0]["explored"]
    assert all(isinstance(s, float) and s < 0 for _, s in lv1["relation_scores"])
    assert res.answer in ends_of(res.trace["answer_path"], "Dir X")
    assert not any(c.failed for c in calls)


# ---- agent with demonstrations: a best-first search over relation paths --------------------------------------------

def run_agent(kg, backend, question, topic, index, **params):
    entry = REASONERS.get("agent")
    q = Question("a1", question, kg.ids_of([topic]))
    base = dict(max_steps=6, decide="score", answer="rank")
    job = entry.impl(inp=ReasonInput(question=q, context="", kg=kg, index=index, sampling=Sampling()),
                     params=entry.params(**{**base, **params}))
    ((res, calls),) = run_batched(jobs=[job], client=LLMClient(backend, cache=None))
    return res, calls


def test_agent_demos_walk_the_likeliest_path_then_finish(gkg, plan):
    """RetrieveNode first (the empty path, no call); NeighborCheck[Actor P, starred_actors] (the only step);
    then the films share the path 'starred_actors (reverse)': directed_by is offered at Film A only (Film B
    would walk the same path) and outscores Finish (that path's '.'); at Dir X the whole path
    'starred_actors (reverse) -> directed_by.' outscores born_in, so Finish; rank answers over that path's ends."""
    b = ScriptedScores(copier(answer={"Dir X": -0.5, "Film A": -0.1}))
    res, calls = run_agent(gkg, b, "who directed the films [Actor P] starred in", "Actor P", ExploreIndex(1),
                           demos=1, plan=plan)
    acts = [st["action"] for st in res.trace["steps"]]
    assert acts == ["RetrieveNode[Actor P]", "NeighborCheck[Actor P, starred_actors]",
                    "NeighborCheck[Film A, directed_by]", "Finish"]
    s3, s4 = res.trace["steps"][2], res.trace["steps"][3]
    assert s3["scores"] == [["NeighborCheck[Film A, directed_by]", -0.08], ["Finish", -4.0]]
    assert s4["scores"] == [["NeighborCheck[Dir X, born_in]", -3.3069], ["Finish", -0.1]]
    assert s4["best_path"] == {"path": "starred_actors (reverse) -> directed_by", "score": -0.1}
    assert res.trace["answer_path"] == "starred_actors (reverse) -> directed_by"
    # Film A would score higher but is not an end; Dir X, the path's one end, is the answer without rank's call
    assert res.trace["rank_top"] == [["Dir X", None]] and res.trace["no_call"].startswith("one candidate")
    assert res.answer == "Dir X"
    assert len(calls) == 3  # three path calls (one per new path)


def test_agent_demos_a_one_step_path_finishes_early(gkg, plan):
    b = ScriptedScores(copier(answer={"Film B": -0.2}))
    res, calls = run_agent(gkg, b, "what films did [Actor P] star in", "Actor P", ExploreIndex(2), demos=1,
                           plan=plan)
    assert [st["action"] for st in res.trace["steps"]][-1] == "Finish" and len(res.trace["steps"]) == 3
    assert sorted(n for n, _ in res.trace["rank_top"]) == ["Film A", "Film B"] and res.answer == "Film B"


def test_agent_demos_need_scored_decisions():
    entry = REASONERS.get("agent")
    with pytest.raises(ValueError, match="set decide: score, or demos: 0"):
        entry.params(demos=2)
    assert entry.params(demos=2, decide="score").demos == 2


def test_agent_demos_with_real_smollm2_and_minilm(gkg, tmp_path):
    """The real embedded models through the agent's path-scored actions: finite scores, the answer an end of
    the path the search judged most likely."""
    res, calls = run_real(gkg, tmp_path, "agent", max_steps=4, decide="score", answer="rank", demos=2)
    assert res.trace["demos"][0] == ["where was X born", "born_in"]
    step2 = res.trace["steps"][1]
    assert all(isinstance(s, float) and s < 0 for _, s in step2["scores"] if s is not None)
    assert res.answer in ends_of(res.trace["answer_path"], "Dir X")
    assert not any(c.failed for c in calls)


def test_report_views_of_explore_and_agent_show_demos_and_path_scores(gkg, plan):
    """report.html's explore and agent views list the demonstrations and the answer's path; every path
    decision (explore's relation_scores and path_end, the agent's action scores) is drawn with its scores."""
    from kgrag.reporting import report_html as R
    from kgrag.reporting import trace_views as T
    from tests.test_report_html import _all_edges, _gen_row

    for name, runner in (("explore", run_explore), ("agent", run_agent)):
        b = ScriptedScores(copier(answer={"Dir X": -0.5}))
        res, calls = runner(gkg, b, "who directed the films [Actor P] starred in", "Actor P", ExploreIndex(1),
                            demos=1, plan=plan)
        view = R.question_view(R.QuestionData(row=_gen_row(res, calls, name), subgraph=_all_edges(gkg),
                                              topic_ids=gkg.ids_of(["Actor P"])))
        assert '<ul class="demos"><li>who directed the films X starred in → <code>starred_actors (reverse) -&gt; ' \
               'directed_by</code></li></ul>' in view, name
        assert "likeliest whole path <code>starred_actors (reverse) -&gt; directed_by</code>" in view, name
        where = [w for w, _ in T.scored_decisions(res.trace)]
        if name == "explore":
            assert "steps[0].explored[1].relation_scores" in where and "steps[0].explored[1].path_end" in where
            assert "steps[0].explored[1].relation_scores: 2 options scored" in view
        else:
            assert "steps[2]" in where and "steps[2]: 2 options scored" in view


def test_agent_demos_a_walked_path_is_not_offered_again(tmp_path, plan):
    """NeighborCheck[Film A, directed_by] walks 'written_by (reverse) -> directed_by' but finds only W, the topic
    itself (no node gets the new path); Film B's directed_by walks the same path, so it is not offered again:
    the chain goes on with the other options (then Finish), not with one check per film."""
    from kgrag.kg.duckdb_io import write_duckdb
    from kgrag.kg.store import KGStore
    from tests.conftest import tiny_tables

    path = tmp_path / "kg.duckdb"
    write_duckdb(path, tiny_tables([("Film A", "written_by", "W"), ("Film A", "directed_by", "W"),
                                    ("Film B", "written_by", "W"), ("Film B", "directed_by", "W")]))
    kg = KGStore(path)
    folder = tmp_path / "relplan"
    PlanModel(model="fake-encoder-1d", texts=["who directed the films X wrote"], hops=np.asarray([2]),
              labels=[(("written_by", False), ("directed_by", True))],
              vectors=np.ones((1, 1), dtype=np.float32)).save(folder)

    class One(ExploreIndex):  # its own model name: encodings are cached per model
        model = "fake-encoder-1d"
        entity_vectors = relation_vectors = np.zeros((0, 1), dtype=np.float32)

        def encode(self, texts):
            return np.ones((len(texts), 1), dtype=np.float32)

    res, _ = run_agent(kg, ScriptedScores(copier()), "who directed the films [W] wrote", "W", One(0), demos=1,
                       plan=str(folder))
    acts = [st["action"] for st in res.trace["steps"]]
    assert acts[:3] == ["RetrieveNode[W]", "NeighborCheck[W, written_by]", "NeighborCheck[Film A, directed_by]"]
    assert "NeighborCheck[Film B, directed_by]" not in acts
    assert "NeighborCheck[Film B, directed_by]" not in [o for st in res.trace["steps"] for o, _ in st["scores"]]


def test_explore_demos_an_entity_reached_first_by_another_path_is_still_its_end(tmp_path):
    """X is reached first by r1 (T -r1-> X), then by the shown path r2 -> r3 (T -r2-> Y -r3-> X): the answer
    ranks the ends of the likeliest whole path, r2 -> r3, which X is, though X's first path was r1."""
    from kgrag.kg.duckdb_io import write_duckdb
    from kgrag.kg.store import KGStore
    from tests.conftest import tiny_tables

    path = tmp_path / "kg.duckdb"
    write_duckdb(path, tiny_tables([("T", "r1", "X"), ("T", "r2", "Y"), ("Y", "r3", "X")]))
    kg = KGStore(path)
    folder = tmp_path / "relplan"
    PlanModel(model="fake-encoder-1d", texts=["what is the r3 of the r2 of X"], hops=np.asarray([2]),
              labels=[(("r2", True), ("r3", True))], vectors=np.ones((1, 1), dtype=np.float32)).save(folder)

    class One(ExploreIndex):
        model = "fake-encoder-1d"
        entity_vectors = relation_vectors = np.zeros((0, 1), dtype=np.float32)

        def encode(self, texts):
            return np.ones((len(texts), 1), dtype=np.float32)

    res, _ = run_explore(kg, ScriptedScores(copier(answer={"X": -0.5, "Y": -0.1})), "what is the r3 of the r2 of [T]",
                         "T", One(0), demos=1, plan=str(folder), max_relations=2, path_margin=5.0)
    lv1 = res.trace["steps"][0]["explored"][0]
    assert lv1["relations"] == ["r2", "r1"]  # both walked (path_margin 5): X is first reached by r1
    assert res.trace["answer_path"] == "r2 -> r3"
    assert [n for n, _ in res.trace["rank_top"]] == ["X"] and res.answer == "X"


def test_pathbook_scores_each_step_once(plan):
    """PathBook.expand scores only the steps it has not scored: a path expanded again with one more step asks
    for that step only (two options: the path ending there and going on), and keeps the earlier scores; the new
    steps of several paths go in one request."""
    client = LLMClient(ScriptedScores(copier()), cache=None)
    book = dc.PathBook(plan=plan, index=NearestIs(1), k=1, question="who directed the films [P] starred in",
                       topic_names=["P"], s=Sampling())

    def drive(groups):
        gen = book.expand(groups)
        sent = []
        try:
            reqs = next(gen)
            while True:
                sent.append(reqs)
                reqs = gen.send(client.generate(reqs))
        except StopIteration:
            return sent

    sa, db, wb = ("starred_actors", False), ("directed_by", True), ("written_by", True)
    (first,) = drive({(sa,): [db]})
    assert first[0].continuations == ("starred_actors (reverse) -> directed_by.",
                                      "starred_actors (reverse) -> directed_by ->")
    assert book.score[(sa, db)] == -0.08 and book.ends[(sa, db)] == [-0.1, -4.0]
    (second,) = drive({(sa,): [db, wb]})
    assert [r.continuations for r in second] == [("starred_actors (reverse) -> written_by.",
                                                  "starred_actors (reverse) -> written_by ->")]
    assert book.score[(sa, wb)] == -3.3069 and book.score[(sa, db)] == -0.08
    assert drive({(sa,): [db, wb]}) == [] and (sa,) in book.expanded
    # steps of several paths (different prefixes) in ONE request, each scored as when asked alone
    bi = ("born_in", True)
    (third,) = drive({(sa, db): [bi], (): [bi], (sa,): [db]})
    assert [r.continuations for r in third] == [("starred_actors (reverse) -> directed_by -> born_in.",
                                                 "starred_actors (reverse) -> directed_by -> born_in ->",
                                                 "born_in.", "born_in ->")]
    alone = dc.PathBook(plan=plan, index=NearestIs(1), k=1, question="who directed the films [P] starred in",
                        topic_names=["P"], s=Sampling())
    for path in ((sa, db, bi), (bi,)):
        gen = alone.score_paths([[path]])
        try:
            gen.send(client.generate(next(gen)))
        except StopIteration:
            pass
        assert alone.ends[path] == book.ends[path] and alone.score[path] == book.score[path]
    # the end options of several paths not scored yet: one request too, each as when asked alone
    hg = ("has_genre", True)
    gen = book.score_ends([(wb,), (bi,), (sa, hg), (sa, db)])  # (bi,) and (sa, db) have their ends already
    reqs = next(gen)
    assert [r.continuations for r in reqs] == [("written_by.", "written_by ->", "starred_actors (reverse) -> "
                                                "has_genre.", "starred_actors (reverse) -> has_genre ->")]
    with pytest.raises(StopIteration) as stop:
        gen.send(client.generate(reqs))
    assert stop.value.value == 1
    for path in ((wb,), (sa, hg)):
        assert book.ends[path] == alone_ends(plan, client, path)
    assert book.ends[(sa, db)] == [-0.1, -4.0]


def alone_ends(plan, client, path):
    """A path's end options scored in a call of its own, by a fresh book."""
    book = dc.PathBook(plan=plan, index=NearestIs(1), k=1, question="who directed the films [P] starred in",
                       topic_names=["P"], s=Sampling())
    gen = book.score_ends([path])
    try:
        gen.send(client.generate(next(gen)))
    except StopIteration:
        pass
    return book.ends[path]


@pytest.mark.parametrize("strategy", ["tot", "got"])
@pytest.mark.parametrize("reasoner", ["agent", "explore"])
def test_demos_under_tot_and_got_answer_with_the_state_of_the_likeliest_path(gkg, plan, strategy, reasoner):
    """ToT / GoT keep several states; with demonstrations the answer comes from the kept state whose most likely
    whole path scores best (the agent's second branch finishes early on 'starred_actors (reverse).', -4.0; the
    first reaches 'starred_actors (reverse) -> directed_by.', -0.1)."""
    runner = run_agent if reasoner == "agent" else run_explore
    b = ScriptedScores(copier(answer={"Dir X": -0.5, "Film A": -0.2}))
    res, _ = runner(gkg, b, "who directed the films [Actor P] starred in", "Actor P", ExploreIndex(1), demos=1,
                    plan=plan, strategy=strategy, branching=2, breadth=2)
    assert res.trace["answer_path"] == "starred_actors (reverse) -> directed_by"
    assert res.answer == "Dir X"


# ---- FastToG with demonstrations: communities rated by their nodes' relation paths --------------------------------

def run_fasttog(kg, backend, question, topic, index, **params):
    entry = REASONERS.get("fasttog")
    q = Question("f1", question, kg.ids_of([topic]))
    base = dict(width=1, d_max=3, decide="score", answer="rank", stop="path")
    job = entry.impl(inp=ReasonInput(question=q, context="", kg=kg, index=index, sampling=Sampling()),
                     params=entry.params(**{**base, **params}))
    ((res, calls),) = run_batched(jobs=[job], client=LLMClient(backend, cache=None))
    return res, calls


def test_fasttog_demos_grow_the_chain_along_the_shown_path_then_stop(gkg, plan):
    """Actor P, the demonstration 'starred_actors (reverse) -> directed_by': the head community {Film A, Film B}
    scores as its nodes' path 'starred_actors (reverse)' (-0.08: '.' -4.0, ' ->' -0.1); round 1 rates both
    director communities as 'starred_actors (reverse) -> directed_by' (a tie: modularity's pre-rank keeps Dir
    X); round 2's only candidate, City Q, walks one step past the shown path and scores -3.31, below that
    whole path's -0.1, so the chain stops and rank answers over the path's ends. One path call per pruning."""
    b = ScriptedScores(copier(answer={"Dir X": -0.5}))
    res, calls = run_fasttog(gkg, b, "who directed the films [Actor P] starred in", "Actor P", NearestIs(1),
                             demos=1, plan=plan)
    t = res.trace
    assert t["demos"] == [["who directed the films X starred in", "starred_actors (reverse) -> directed_by"]]
    assert t["initial"]["paths"] == ["starred_actors (reverse)"] and t["initial"]["chosen"] == [0]
    assert t["initial"]["reasoning"] == {"path": "starred_actors (reverse)", "score": -4.0}
    (p1,), (p2,) = t["depths"][0]["pruning"], t["depths"][1]["pruning"]
    assert [s for _, s in p1["scores"]] == [-0.08, -0.08] and p1["chosen"] == [0]
    assert p1["paths"] == ["starred_actors (reverse) -> directed_by"] * 2
    assert t["depths"][0]["chains"] == [[["Film A", "Film B"], ["Dir X"]]]
    assert p2["paths"] == ["starred_actors (reverse) -> directed_by -> born_in"] and p2["stopped"] == "path_ends"
    assert p2["scores"][0][1] == -3.3069 < t["depths"][0]["reasoning"]["score"] == -0.1
    assert t["answer_path"] == "starred_actors (reverse) -> directed_by" and t["stop"] == "answered"
    assert t["rank_top"] == [["Dir X", None]] and res.answer == "Dir X" and res.depth == 1
    # no reasoning call: initial pruning, one pruning per round; the path's one end: no rank call (rank's
    # one-candidate rule); within the paper's bound
    assert t["llm_requests"] == ["prune_multi", "prune", "prune"] and len(calls) == 3
    assert t["no_call"].startswith("one candidate")
    assert t["call_bound"]["holds"] and t["call_bound"]["bound"] == 2 * 1 * 3 + 3 + 2
    # a path call scores whole paths of any prefix, each ending and going on
    assert b.requests[1].continuations == ("starred_actors (reverse) -> directed_by.",
                                           "starred_actors (reverse) -> directed_by ->")


def test_fasttog_demos_a_one_step_path_answers_the_head_community(gkg, plan):
    """'what films did X star in' (path 'starred_actors (reverse)'): round 1's director communities score -3.31,
    below the head community's whole path (-0.1), so the search stops at depth 0 and rank picks among the
    films."""
    b = ScriptedScores(copier(answer={"Film B": -0.2, "Film A": -0.9}))
    res, calls = run_fasttog(gkg, b, "what films did [Actor P] star in", "Actor P", NearestIs(2), demos=1,
                             plan=plan)
    (p1,) = res.trace["depths"][0]["pruning"]
    assert p1["stopped"] == "path_ends" and res.depth == 0
    assert sorted(n for n, _ in res.trace["rank_top"]) == ["Film A", "Film B"] and res.answer == "Film B"
    assert len(calls) == 3


def test_fasttog_community_paths_follow_links_then_internal_triples(gkg):
    """A candidate's nodes get their paths over its triples: links from the current community add a step; an
    internal triple extends the linked node's path; a node no triple reaches has none."""
    from kgrag.reasoning.reasoners.fasttog import Candidate, community_paths

    kg = gkg
    ids = dict(zip(["Actor P", "Film A", "Dir X", "City Q", "Film B"],
                   kg.ids_of(["Actor P", "Film A", "Dir X", "City Q", "Film B"])))
    heads, tails = kg.heads.tolist(), kg.tails.tolist()

    def edge(h, t):
        return next(i for i in range(len(heads)) if heads[i] == ids[h] and tails[i] == ids[t])

    cand = Candidate(frozenset({ids["Film A"], ids["Dir X"], ids["Film B"]}),
                     (edge("Film A", "Actor P"), edge("Film A", "Dir X")), 0.1)
    got = community_paths(kg, cand, {ids["Actor P"]: ()})
    sa, db = ("starred_actors", False), ("directed_by", True)
    # shortest walks only (Dir X's path does not go back to Film A); Film B: none of its triples is shown
    assert got == {ids["Film A"]: [(sa,)], ids["Dir X"]: [(sa, db)]}
    assert community_paths(kg, cand, {ids["Actor P"]: ()}, layers=1) == {ids["Film A"]: [(sa,)]}  # the links only


def test_fasttog_demos_params_need_scores_and_stop_path_needs_demos(plan):
    entry = REASONERS.get("fasttog")
    with pytest.raises(ValueError, match="set decide: score, or demos: 0"):
        entry.params(demos=2)
    with pytest.raises(ValueError, match="stop: path .* needs demos > 0"):
        entry.params(decide="score", answer="rank", stop="path")
    assert entry.params(demos=2, decide="score", answer="rank", stop="path").path_margin == 2.3


def test_fasttog_demos_with_real_smollm2_and_minilm(gkg, tmp_path):
    """The real embedded models through FastToG's path-rated pruning: finite scores for every community, the
    answer an end of the path judged most likely, the call bound kept."""
    res, calls = run_real(gkg, tmp_path, "fasttog", width=1, d_max=2, decide="score", answer="rank", stop="path",
                          demos=2)
    assert res.trace["demos"][0] == ["where was X born", "born_in"]
    assert all(isinstance(s, float) and s < 0 for _, s in res.trace["initial"]["scores"])
    assert res.answer in ends_of(res.trace["answer_path"], "Dir X")
    assert res.trace["call_bound"]["holds"] and not any(c.failed for c in calls)


def test_report_view_of_fasttog_shows_demos_paths_and_scores(gkg, plan):
    """report.html's FastToG view lists the demonstrations and the answer's path; each pruning's community scores
    and node paths are drawn."""
    from kgrag.reporting import report_html as R
    from kgrag.reporting import trace_views as T
    from tests.test_report_html import _all_edges, _gen_row

    b = ScriptedScores(copier(answer={"Dir X": -0.5}))
    res, calls = run_fasttog(gkg, b, "who directed the films [Actor P] starred in", "Actor P", NearestIs(1),
                             demos=1, plan=plan)
    view = R.question_view(R.QuestionData(row=_gen_row(res, calls, "fasttog"), subgraph=_all_edges(gkg),
                                          topic_ids=gkg.ids_of(["Actor P"])))
    assert '<ul class="demos"><li>who directed the films X starred in → <code>starred_actors (reverse) -&gt; ' \
           'directed_by</code></li></ul>' in view
    assert "likeliest whole path <code>starred_actors (reverse) -&gt; directed_by</code>" in view
    where = [w for w, _ in T.scored_decisions(res.trace)]
    assert "initial" in where and "depths[0].pruning[0]" in where
    assert "depths[0].pruning[0]: 2 options scored" in view and "likeliest node path per option" in view


def test_fasttog_order_by_paths_breaks_ties_by_the_whole_path():
    """Communities sharing their likeliest node path (the films every head community holds) are ordered by the
    whole path one of their nodes already ends (the one holding a release year first), then by modularity."""
    from kgrag.reasoning.reasoners.fasttog import order_by_paths

    assert order_by_paths([-0.9, -0.9, -0.9, -2.0], [-5.0, -1.5, None, -0.1], 2) == [1, 0]
    assert order_by_paths([-0.9, None, -0.9], [None, -0.1, None], 3) == [0, 2, 1]


def test_fasttog_cap_subsamples_round_robin_over_the_nodes_that_reached_them(tmp_path):
    """Past max_nodes, a hub's many neighbours do not crowd out a small node's: a genre with 40 films and a film
    with its director, room 4: the director is kept (a uniform draw keeps it with probability 4/41)."""
    from kgrag.kg.store import KGStore
    from kgrag.reasoning.reasoners.fasttog import fair_subsample
    from tests.test_golden_reasoners import tiny_tables, write_duckdb

    edges = [(f"F{i}", "has_genre", "Drama") for i in range(40)] + [("Film A", "directed_by", "Dir X")]
    write_duckdb(tmp_path / "kg.duckdb", tiny_tables(edges))
    kg = KGStore(tmp_path / "kg.duckdb")
    drama, film, director = kg.ids_of(["Drama", "Film A", "Dir X"])
    e = np.arange(len(kg.heads))
    new = np.asarray(sorted(kg.ids_of([f"F{i}" for i in range(40)] + ["Dir X"])))
    for seed in range(5):
        got = fair_subsample(kg, e, [drama, film], new, 4, np.random.default_rng(seed)).tolist()
        assert len(got) == 4 == len(set(got)) and director in got and set(got) <= set(new.tolist())
    assert fair_subsample(kg, e, [drama, film], new, 0, np.random.default_rng(0)).tolist() == []


def test_fasttog_edge_cap_is_shared_among_the_nodes(tmp_path):
    """incident_edges(fair=True): past max_edges a node with few edges keeps them all and the hub's are a seeded
    draw of the rest (the quota), so the film's director edge is always read; without fair a uniform draw over
    the union can drop it."""
    from kgrag.kg.store import KGStore
    from kgrag.reasoning.reasoners.tog import incident_edges
    from tests.test_golden_reasoners import tiny_tables, write_duckdb

    edges = [(f"F{i}", "has_genre", "Drama") for i in range(40)] + [("Film A", "directed_by", "Dir X"),
                                                                     ("Film A", "has_genre", "Drama")]
    write_duckdb(tmp_path / "kg.duckdb", tiny_tables(edges))
    kg = KGStore(tmp_path / "kg.duckdb")
    drama, film, director = kg.ids_of(["Drama", "Film A", "Dir X"])
    for seed in range(5):
        e = incident_edges(kg, [drama, film], None, 6, rng=np.random.default_rng(seed), fair=True)
        touch = set(kg.heads[e].tolist()) | set(kg.tails[e].tolist())
        assert len(e) == 6 and director in touch  # Film A's 2 edges (quota 4 >= 2) and 4 of Drama's 41
        assert sum(1 for h in kg.heads[e].tolist() if h == film) == 2
    dropped = sum(director not in set(kg.tails[incident_edges(kg, [drama, film], None, 6,
                                                               rng=np.random.default_rng(s))].tolist())
                  for s in range(20))
    assert dropped > 0  # the uniform draw over the union loses it for some seeds


def test_fasttog_demos_coarse_pruning_is_path_diverse(tmp_path):
    """With demos, coarse pruning keeps N candidates round-robin over their relation-path signatures: four tag
    communities (one signature, the higher modularity) and the director's, N = 2: one tag community and the
    director's, in modularity order."""
    from kgrag.kg.store import KGStore
    from kgrag.reasoning.reasoners.fasttog import Candidate, path_diverse
    from tests.test_golden_reasoners import tiny_tables, write_duckdb

    edges = [("Film A", "has_tags", f"tag{i}") for i in range(4)] + [("Film A", "directed_by", "Dir X")]
    write_duckdb(tmp_path / "kg.duckdb", tiny_tables(edges))
    kg = KGStore(tmp_path / "kg.duckdb")
    (film,) = kg.ids_of(["Film A"])
    heads, tails = kg.heads.tolist(), kg.tails.tolist()
    cands = [Candidate(frozenset({t}), (i,), 0.5 - 0.01 * k)
             for k, (i, t) in enumerate(sorted((i, tails[i]) for i in range(len(heads))))]
    tag_first = sorted(cands, key=lambda c: kg.names([next(iter(c.nodes))])[0] == "Dir X")
    got, signatures = path_diverse(kg, tag_first, {film: (("starred_actors", False),)}, 2)
    assert signatures == 2
    assert [kg.names([next(iter(c.nodes))])[0] for c in got] == ["tag0", "Dir X"]
    assert path_diverse(kg, tag_first, {film: ()}, 10)[0] == tag_first  # room for all: nothing dropped


def test_demos_order_vote_shows_the_majority_path_first(tmp_path):
    """demos_order: vote: a path two near questions carry outvotes the one nearest question's; each path is shown
    once, with its nearest question, most voted first. nearest: the nearest question first."""
    a, b = (("directed_by", True), ("written_by", True)), (("directed_by", True), ("starred_actors", True))
    folder = tmp_path / "plan"
    vecs = np.asarray([[1.0, 0.0], [0.9, 0.4359], [0.9, 0.4359]], dtype=np.float32)
    PlanModel(model="fake-encoder", texts=["near b", "a one", "a two"], hops=np.asarray([2, 2, 2]),
              labels=[b, a, a], vectors=vecs).save(folder)

    class Query:
        model = "fake-encoder"

        def encode(self, texts):
            return np.tile(np.asarray([[1.0, 0.0]], dtype=np.float32), (len(texts), 1))

    demos = dc.Demos(str(folder), Query())
    assert demos.nearest("q", 2) == [("near b", b), ("a one", a)]
    assert demos.nearest("q", 2, "vote") == [("a one", a), ("near b", b)]
    assert demos.nearest("q", 1, "vote") == [("a one", a)]
    entry = REASONERS.get("tog")
    assert entry.params(demos=2, decide="score", demos_order="vote").demos_order == "vote"
    with pytest.raises(ValueError):
        entry.params(demos=2, decide="score", demos_order="majority")
