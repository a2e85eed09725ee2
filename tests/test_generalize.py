"""No oracle hop count (issue "Generalize"): relpath picks the sequence length itself, the plan votes across
every labelled question, the flows hand no module a question's declared hop count unless
``retrieve.oracle_hops``, and the no-LLM baselines and ``llm_lift`` come out of the generate and evaluate rows."""

from __future__ import annotations

import dataclasses
import json
import uuid

import numpy as np
import pytest

from kgrag import schema as S
from kgrag.params import RetrieveParams
from kgrag.registry import RETRIEVERS
from kgrag.index.relplan import PlanModel, relation_sequence, train_plan
from kgrag.retrieval.run import retrieve_one
from kgrag.types import Question
from tests.conftest import METAQA, experiment_params, flow_inputs, need, shard_rows, write_index

# one wording per hop count; the topic of each test question is another film than its training question's
WORDING = {1: "who directed [{}]", 2: "which films share a director with [{}]",
           3: "who acted in films that share a director with [{}]"}
TRAIN = [("Collateral", 1, ["Michael Mann"]), ("Collateral", 2, ["Heat"]),
         ("Collateral", 3, ["Al Pacino", "Robert De Niro"]), ("The Irishman", 1, ["Martin Scorsese"])]
TEST = [("Heat", 1, ["Michael Mann"]), ("Heat", 2, ["Collateral"]), ("Heat", 3, ["Tom Cruise"])]


def _q(kg, qid, topic, hops, answers, declared=None):
    return Question(question_id=qid, text=WORDING[hops].format(topic), topic_ids=kg.ids_of([topic]),
                    answer_ids=kg.ids_of(answers), answers=tuple(answers), hops=declared)


def test_labels_without_a_hop_count_search_every_length_shortest_on_a_tie(kg):
    """A training question without a declared hop count is labelled by the best sequence of any length."""
    for topic, hops, answers in TRAIN:
        lab = relation_sequence(kg, kg.ids_of([topic]), kg.ids_of(answers), None)
        assert lab is not None and len(lab[0]) == hops and lab[1] == 1.0, (topic, hops, lab)
    # Michael Mann is 1 hop from Heat and also the end of longer walks: the 1-step label wins the tie
    seq, rec, prec = relation_sequence(kg, kg.ids_of(["Heat"]), kg.ids_of(["Michael Mann"]), None)
    assert seq == (("directed_by", True),) and rec == prec == 1.0


def test_votes_compare_whole_labels_across_lengths():
    a, b = ("r1", True), ("r2", False)
    model = PlanModel(model="m", texts=["x", "y", "z"], hops=np.array([1, 2, 2]), labels=[(a,), (a, b), (b, b)],
                      vectors=np.stack([np.array([1.0, 0.0])] * 3).astype(np.float32))
    prefix, whole = model.votes(np.array([1.0, 0.0]), k=3)
    assert prefix[(a,)] == pytest.approx(2 / 3, abs=1e-4)  # (a,) and (a, b) both start with a
    assert whole[(a,)] == pytest.approx(1 / 3, abs=1e-4)  # only the 1-hop question's label is (a,)
    assert whole[(a, b)] == pytest.approx(1 / 3, abs=1e-4) and (b,) not in whole
    # the oracle: only the declared hop count's questions vote
    assert set(model.votes(np.array([1.0, 0.0]), k=3, hops=2)[1]) == {(a, b), (b, b)}


def test_golden_relpath_finds_answers_1_2_or_3_hops_away_without_being_told(kg, index, tmp_path):
    """Tiny KG, questions whose answers lie 1, 2 or 3 hops away and which do not say which: with a plan trained
    on questions without hop counts, relpath's chosen sequence has the right length and its ends are the
    gold answers. Declaring a wrong hop count (the oracle channel) changes the result: the length is read
    only from there."""
    train = [_q(kg, f"t{i}", t, h, a) for i, (t, h, a) in enumerate(TRAIN)]
    model, stats = train_plan(kg=kg, questions=train, encode=index.encode, model=index.model)
    assert stats["labelled"] == len(TRAIN) and sorted(model.hops.tolist()) == [1, 1, 2, 3]
    model.save(tmp_path / "plan")
    params = RetrieveParams(method="relpath", relpath={"plan": str(tmp_path / "plan"), "plan_k": 1, "paths": 1})
    for i, (topic, hops, answers) in enumerate(TEST):
        q = _q(kg, f"q{i}", topic, hops, answers)
        sub, _ = retrieve_one(question=q, query_vec=index.encode([q.text])[0], kg=kg, index=index, params=params)
        assert len(sub.trace["directions"][0]) == hops, (q.text, sub.trace)
        assert sorted(kg.names(np.asarray(sub.trace["ends"]))) == sorted(answers), (q.text, sub.trace)
    q = _q(kg, "wrong", "Heat", 3, ["Tom Cruise"], declared=1)  # as if retrieve.oracle_hops handed over 1
    sub, _ = retrieve_one(question=q, query_vec=index.encode([q.text])[0], kg=kg, index=index, params=params)
    assert len(sub.trace["directions"][0]) == 1


@pytest.fixture
def flow_project(tmp_path, movies_db):
    from kgrag.kg.store import KGStore

    kg = KGStore(movies_db)
    model = "all-MiniLM-L6-v2"
    write_index(tmp_path / "index", kg, model)
    rows = [{S.QUESTION_ID: f"q{i}", S.SPLIT: "test", S.HOPS: h, S.TEXT: WORDING[h].format(t), S.QTYPE: "",
             S.TOPIC_IDS: kg.ids_of([t]), S.ANSWER_IDS: kg.ids_of(a), S.ANSWERS: a}
            for i, (t, h, a) in enumerate(TEST)]
    return {"db": str(movies_db), "index": str(tmp_path / "index"), "rows": rows, "tmp": tmp_path, "model": model}


@pytest.mark.slow
def test_flows_hand_no_module_the_declared_hop_count_unless_oracle_hops(flow_project, monkeypatch):
    """The retrieve and generate flows' shard tasks (real Prefect, real files) on a question file that declares
    hop counts: the retriever and the reasoner see ``hops=None`` and the retrieved rows equal those of the same
    file with the hop counts removed; only ``retrieve.oracle_hops`` hands the retriever the declared count."""
    from flows.generate import generate_flow
    from flows.retrieve import retrieve_flow
    from kgrag import io
    from kgrag.params import GenerateParams, ReasonParams
    from kgrag.registry import REASONERS
    from tests.test_reliability import FaultServer

    seen: dict[str, list] = {"retriever": [], "reasoner": []}
    for reg, name, key in ((RETRIEVERS, "relpath", "retriever"), (REASONERS, "answer", "reasoner")):
        entry = reg.get(name)

        def spy(*, _impl=entry.impl, _key=key, **kw):
            q = kw["question"] if "question" in kw else kw["inp"].question
            seen[_key].append(q.hops)
            return _impl(**kw)

        monkeypatch.setitem(reg._entries, name, dataclasses.replace(entry, impl=spy))
    p = flow_project

    def retrieve(rows, sub, oracle):
        files = flow_inputs(p["tmp"] / sub, rows)
        shards = retrieve_flow(questions=files["questions"], db_path=p["db"], db_hash=uuid.uuid4().hex,
                               index_dir=p["index"], index_hash="i",
                               params=experiment_params(retrieve=RetrieveParams(method="relpath", shard_size=2,
                                                                                oracle_hops=oracle),
                                                        index_model=p["model"]),
                               shard_dir=files["shard_dir"])
        return files, shards

    declared_files, declared = retrieve(p["rows"], "declared", False)
    assert seen["retriever"] == [None, None, None]
    _, hidden = retrieve([{**r, S.HOPS: None} for r in p["rows"]], "hidden", False)
    strip = lambda rows: [{k: v for k, v in r.items() if k != S.RETRIEVE_MS} for r in rows]  # noqa: E731
    assert strip(shard_rows(declared)) == strip(shard_rows(hidden))
    seen["retriever"].clear()
    retrieve(p["rows"], "oracle", True)
    assert seen["retriever"] == [1, 2, 3]

    retrieved = p["tmp"] / "retrieved.parquet"
    io.stream_shards(declared, {retrieved: S.RETRIEVED})
    srv = FaultServer()
    try:
        res = generate_flow(questions=declared_files["questions"], retrieved=str(retrieved), db_path=p["db"],
                            params=experiment_params(
                                generate=GenerateParams(backend="openai", openai={"base_url": srv.url}, shard_size=2),
                                reason=ReasonParams(method="answer")),
                            cache_path=str(p["tmp"] / "calls.sqlite"), shard_dir=str(p["tmp"] / "gen"))
    finally:
        srv.stop()
    assert seen["reasoner"] == [None, None, None]
    gens = shard_rows(res["shards"])
    # the baselines are the first / a seeded random of the retriever's proposed answers (relpath's ends)
    ends = {r[S.QUESTION_ID]: json.loads(r[S.TRACE])["ends"] for r in shard_rows(declared)}
    from kgrag.kg.store import KGStore

    kg = KGStore(p["db"])
    for g in gens:
        names = kg.names(np.asarray(ends[g[S.QUESTION_ID]]))
        assert g[S.BASELINE_FIRST] == names[0] and g[S.BASELINE_RANDOM] in names


def test_baselines_and_lift_recomputed_from_rows():
    """The ``baselines`` metric: Hit@1 of the first and random candidates, lift = Hit@1 - the best of them, per hop
    count for a mixed set; label tasks add the majority label."""
    from kgrag.evaluation.evaluate import evaluate_rows

    def q(i, hops, gold, choices=None):
        return {S.QUESTION_ID: f"q{i}", S.TEXT: "t", S.HOPS: hops, S.ANSWERS: gold, S.ANSWER_IDS: [i],
                S.CHOICES: choices, S.ANSWERABLE: True}

    def g(i, pred, first, rand):
        return {S.QUESTION_ID: f"q{i}", S.PREDICTION: pred, S.PREDICTED_ANSWERS: [pred], S.FAILED: False,
                S.BASELINE_FIRST: first, S.BASELINE_RANDOM: rand}

    qs = [q(0, 1, ["Heat"]), q(1, 1, ["Ran"]), q(2, 2, ["Jaws"]), q(3, 2, ["Up"])]
    gens = [g(0, "Heat", "Heat", "Alien"), g(1, "Ran", "Alien", "Ran"), g(2, "Jaws", "Alien", "Alien"),
            g(3, "Alien", "Up", "Up")]
    rows, m = evaluate_rows(questions=qs, retrieved=[], generations=gens)
    assert m["hit_at_1"] == 0.75 and m["baseline_first"] == 0.5 and m["baseline_random"] == 0.5
    assert m["llm_lift"] == 0.25
    assert [r["hit_baseline_first"] for r in rows] == [1.0, 0.0, 0.0, 1.0]
    assert m["by_hops"]["1"]["hit_at_1"] == 1.0 and m["by_hops"]["1"]["llm_lift"] == 0.5
    assert m["by_hops"]["2"]["llm_lift"] == 0.0 and m["by_hops"]["2"]["questions"] == 2
    from kgrag.reporting.report import render

    md = render(metrics={**m, "setup": {"oracle_hops": True, "plan": "learnt (9 labelled)"}}, rows=rows,
                figure="f.png", examples=0, validation=None)
    assert "**oracle**" in md and "learnt (9 labelled)" in md
    assert "| 1 | 2 | 1.000 | 1.000 | 0.500 | 0.500 | 0.500 |" in md  # the by-hop row, baselines beside Hit@1
    assert "**oracle**" not in render(metrics={**m, "setup": {"oracle_hops": False}}, rows=rows, figure="f.png",
                                      examples=0, validation=None)
    lab = [q(i, None, [gold], ["support", "counter"]) for i, gold in enumerate(["support", "support", "counter"])]
    lg = [g(i, "support", "support", "counter") for i in range(3)]
    _, m = evaluate_rows(questions=lab, retrieved=[], generations=lg)
    assert m["baseline_majority"] == pytest.approx(2 / 3) and m["baseline_first"] == pytest.approx(2 / 3)
    assert m["llm_lift"] == 0.0 and "by_hops" not in m
    lab_rows, m = evaluate_rows(questions=lab, retrieved=[], generations=lg)
    md = render(metrics=m, rows=lab_rows, figure="f.png", examples=0, validation=None)
    assert "## Predicted labels" in md and "| support | 3 | 1.000 |" in md  # a constant answer shows at once


def test_metaqa_mixed_hop_loader_reads_every_listed_file():
    from kgrag.kg.loaders.metaqa import MetaQAParams, load_metaqa

    need((METAQA / "kb.txt").exists(), "real MetaQA data not found")
    t = load_metaqa(path=str(METAQA), hops=[1, 2, 3], split="dev", sample=4, seed=0)
    hops = t.questions[S.HOPS].to_pylist()
    assert hops == [1] * 4 + [2] * 4 + [3] * 4
    assert all(qid.startswith(f"{h}hop-dev-") for qid, h in zip(t.questions[S.QUESTION_ID].to_pylist(), hops))
    two = load_metaqa(path=str(METAQA), hops=2, split="dev", sample=4, seed=0)
    assert two.questions[S.QUESTION_ID].to_pylist() == t.questions[S.QUESTION_ID].to_pylist()[4:8]
    with pytest.raises(ValueError, match="hops"):
        MetaQAParams(hops=[1, 4])


def test_relplan_learns_from_a_users_own_jsonl_dev_split(tmp_path, monkeypatch):
    """A user's KG (triples file) with a test questions file and a dev questions file of theirs: the real ingest,
    validate and relplan stages label the dev file's questions (no hop count given) and the plan votes for the
    sequence those questions share; without relplan.file the stage says the zero-shot planner answers alone and
    how to give labelled questions; the evaluated file is refused as a plan file."""
    from kgrag.params import ParamsError, load
    from kgrag.index.relplan import PlanModel
    from stages import ingest, relplan, validate
    from tests.conftest import MOVIES, ROOT

    my = tmp_path / "my"
    my.mkdir()
    (my / "kg.tsv").write_text("".join(f"{h}\t{r}\t{t}\n" for h, r, t in MOVIES))

    def jsonl(path, rows):
        path.write_text("".join(json.dumps({"id": f"{path.stem}{i}", "question": q, "topic_entities": [t],
                                            "answers": a}) + "\n" for i, (q, t, a) in enumerate(rows)))

    jsonl(my / "test.jsonl", [("who directed Collateral", "Collateral", ["Michael Mann"])])
    jsonl(my / "dev.jsonl", [("who directed Heat", "Heat", ["Michael Mann"]),
                             ("who directed The Irishman", "The Irishman", ["Martin Scorsese"]),
                             ("who is the director of Heat", "Heat", ["Michael Mann"]),
                             ("what year is Top Gun from", "Top Gun", ["1986"])])
    monkeypatch.chdir(tmp_path)
    common = ["--params", str(ROOT / "params.yaml"), "-S", "data.dataset=triples", "-S", f"data.input={my}",
              "-S", f"data.triples.path={my / 'kg.tsv'}", "-S", f"data.triples.questions={my / 'test.jsonl'}"]
    ingest.main(common)
    validate.main(common)
    relplan.main(common)
    meta = json.loads((tmp_path / "data" / "relplan" / "plan.json").read_text())
    assert PlanModel.load(tmp_path / "data" / "relplan").texts == []
    # no held-out questions: relplan.source auto resolves to kg, which has no text to learn from either: the
    # zero-shot planner alone, and the note says how to give labelled questions
    assert meta["source"] == "kg" and "zero-shot planner alone" in meta["note"] and "relplan.file" in meta["note"]
    relplan.main(common + ["-S", f"relplan.file={my / 'dev.jsonl'}"])
    plan = PlanModel.load(tmp_path / "data" / "relplan")
    assert len(plan.texts) == 4  # every dev question labelled, each with its own label
    from kgrag.index.embed import encode

    from kgrag.index.relplan import mask_topics

    prefix, whole = plan.votes(encode([mask_topics("who directed Collateral", ["Collateral"])], model=plan.model)[0], 3)
    best = max(whole, key=whole.get)
    assert best == (("directed_by", True),), whole
    with pytest.raises(ParamsError, match="evaluated questions file"):
        load(ROOT / "params.yaml", [x for x in common[2:] if x != "-S"] + [f"relplan.file={my / 'test.jsonl'}"])


def test_zero_shot_llm_planner_scores_relation_sequences_with_the_real_model(kg, index):
    """relpath with ``base: scorer``, ``scorer: loglik`` (the zero-shot LLM planner): the embedded SmolLM2's log-likelihood of a
    sequence as the reply to the question, through the scoring primitive. On "who directed Heat" the summed
    log-likelihood prefers "directed by" to the longer "directed by, directed by" that the cosine picks
    (test_question_graphs), and relpath walks it; a failed call is counted, not silent."""
    from kgrag.retrieval.lego import SCORERS
    from kgrag.retrieval.lego.types import Context
    from kgrag.llm.calls import LLMClient, LLMReply
    from kgrag.llm.clients import LLMSettings, llm_client

    q = "who directed Heat"
    ctx = Context(question=q, query_vec=index.encode([q])[0], kg=kg, index=index, topic_names=("Heat",),
                  llm=lambda: llm_client(LLMSettings(cache=None)))
    entry = SCORERS.get("loglik")
    docs = ["directed by", "directed by, directed by", "release year", "starred actors"]
    got = entry.impl(query=q, docs=docs, params=entry.params(), ctx=ctx)
    assert got.shape == (4,) and np.all(got < 0) and int(np.argmax(got)) == 0, dict(zip(docs, got))
    question = Question(question_id="q", text=q, topic_ids=kg.ids_of(["Heat"]))
    params = RetrieveParams(method="relpath", relpath={"paths": 1, "base": "scorer", "scorer": "loglik",
                                                       "llm": {"cache": None}})
    sub, _ = retrieve_one(question=question, query_vec=index.encode([q])[0], kg=kg, index=index, params=params)
    assert sub.trace["sequences"] == ["directed by"], sub.trace

    class Down:
        model_id = "down"

        def generate(self, requests):
            return [LLMReply(error="down") for _ in requests]

    failing = Context(question=q, query_vec=ctx.query_vec, kg=kg, index=index,
                      llm=lambda: LLMClient(Down(), cache=None, retries=0))
    assert np.all(entry.impl(query=q, docs=docs, params=entry.params(), ctx=failing) == -1e9)
    assert failing.take_counts() == {"llm_unparsed": 4}
    mean = entry.impl(query=q, docs=docs, params=entry.params(normalize="mean"), ctx=ctx)
    assert not np.allclose(mean, got)  # scorer_params reach the scorer
    from kgrag.retrieval.retrievers.relpath import RelPathParams

    with pytest.raises(ValueError, match="scorer_params.normalise"):
        RelPathParams(base="scorer", scorer="loglik", scorer_params={"normalise": "mean"})
    with pytest.raises(ValueError, match="valid choices"):
        RelPathParams(base="scorer", scorer="cosine")
    # the zero-shot planner (base lexical, the default) reads no scorer: setting one there is named, not ignored
    with pytest.raises(ValueError, match="scorer, scorer_params set, but base is lexical"):
        RelPathParams(scorer="loglik", scorer_params={"normalize": "mean"})
