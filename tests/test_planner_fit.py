"""bench/planner_dev.py's weight fits (issue 54's dev protocol): a leave-one-KG-out fit reads no set of the held-out
KG's family and starts from no weights a KG chose; the smooth fit is deterministic and finds the feature that
picks the best sequence."""

from __future__ import annotations

import numpy as np

from bench import planner_dev as P
from kgrag.index import zeroshot as Z

NAMES = ["metaqa", "wc2014-p2", "pql-2h", "pql-3h"]


def test_leave_one_kg_out_holds_out_the_whole_kg_family():
    assert P.others(NAMES, "pql-2h") == ["metaqa", "wc2014-p2"]
    assert P.others(NAMES, "pql-3h") == ["metaqa", "wc2014-p2"]
    assert P.others(NAMES, "metaqa") == ["wc2014-p2", "pql-2h", "pql-3h"]
    share = P.set_weights(["metaqa", "pql-2h", "pql-3h"])  # families weigh equally
    assert share == {"metaqa": 0.5, "pql-2h": 0.25, "pql-3h": 0.25}


def _rows(rng, good: int, n: int = 40):
    """Questions of 3 candidate sequences whose feature ``good`` marks the one with answers; the others noise."""
    rows = []
    for _ in range(n):
        f = rng.normal(0, 1, (3, len(Z.FEATURES)))
        f[:, good] = [0.0, 0.0, 0.0]
        best = int(rng.integers(3))
        f[best, good] = 1.0
        p = np.zeros(3)
        p[best] = 1.0
        rows.append(({"hops": 1}, [(0,), (1,), (2,)], f, p))
    return rows


def test_the_search_starts_from_weights_no_kg_chose():
    rows = {"a": _rows(np.random.default_rng(0), good=2)}
    assert np.array_equal(P.search(rows, ["a"], iters=0), np.ones(len(Z.FEATURES)))
    assert not np.array_equal(P.search(rows, ["a"], iters=0), Z.Weights().vector())


def test_the_smooth_fit_is_deterministic_and_finds_the_deciding_feature():
    rng = np.random.default_rng(1)
    feats = {"a": _rows(rng, good=3), "b": _rows(rng, good=3)}
    w1, w2 = P.fit_smooth(feats, ["a", "b"]), P.fit_smooth(feats, ["a", "b"])
    assert np.array_equal(w1, w2)
    assert int(np.argmax(np.abs(w1))) == 3 and w1[3] > 0
    held = _rows(np.random.default_rng(2), good=3)
    assert P.score(held, P.linear(w1))["all"] == 1.0
    assert P.score(held, P.linear(-w1))["all"] == 0.0  # the score can fail: the reversed weights pick a wrong one


def test_transfer_json_carries_the_dev_protocol_rows_of_planner_dev(tmp_path):
    """bench/transfer.py writes planner_dev's leave-one-KG-out and paraphrase figures beside its test rows: every
    dev KG's in-sample, leave-one-KG-out (smooth fit, search seed 0, the seeds' mean) figures, and where they
    came from; no planner_dev result, no section."""
    import json

    from bench.transfer import PIPELINE_LOKO, dev_protocol

    row = {"all": 0.8, "paraphrase": 0.5, "paraphrase_questions": 4, "questions": 10}
    pd = {"run": {"commit": "a" * 40, "command": "python bench/planner_dev.py"}, "metric": "m",
          "configs": {"lexical": {"k1": row, "k2": {**row, "all": 0.9}},
                      "lexical (leave-one-KG-out, smooth fit)": {"k1": {**row, "all": 0.7, "weights": [1.0]}},
                      "lexical (leave-one-KG-out weights)": {"k1": {**row, "all": 0.6}}},
          "loko_seeds": {"lexical": {"k1": {"seeds": 3, "all_mean": 0.55, "paraphrase_mean": 0.4}}}}
    path = tmp_path / "planner_dev.json"
    path.write_text(json.dumps(pd))
    got = dev_protocol(path)
    assert got["made_by"] == pd["run"] and got["source"].endswith("planner_dev.json")
    k1 = got["kgs"]["k1"]
    assert [v["all"] for v in k1.values()] == [0.8, 0.7, 0.6, 0.55]
    assert "leave-one-KG-out, coordinate search, mean of 3 seeds" in k1 and not any("weights" in v for v in k1.values())
    assert list(got["kgs"]["k2"].values())[0]["all"] == 0.9
    assert got["pipeline"] is None  # no pipeline leave-one-KG-out run beside it
    part = {"first_end_hit_at_1": 0.7, "first_end_hit_at_1_ci95": [0.6, 0.8], "retrieval_recall": 0.75,
            "questions": 20}
    (tmp_path / PIPELINE_LOKO.name).write_text(json.dumps({
        "run": {"commit": "b" * 40, "command": "python -m bench.transfer --loko x"},
        "sets": {"k1/kg/dev/retrieval/loko": {"all": part, "paraphrase": {**part, "questions": 5}},
                 "k1/kg/dev/retrieval": {"all": {**part, "first_end_hit_at_1": 0.9}}}}))
    pipe = dev_protocol(path)["pipeline"]
    assert pipe["made_by"]["commit"] == "b" * 40 and list(pipe["sets"]) == ["k1"]
    assert pipe["sets"]["k1"]["all"]["first_end_hit_at_1"] == 0.7 and pipe["sets"]["k1"]["paraphrase"]["questions"] == 5
    assert dev_protocol(tmp_path / "absent.json") is None


def test_pseudo_questions_read_no_label_and_their_gold_is_the_walk():
    """Issue 54's pseudo-questions: worded from the relation names (a co-step as "the same"), drawn from the pool's
    topics and walks; the pool's answers and gold scores are never read (they are poisoned here), and each pseudo
    question's gold ends are those of the walk it words."""
    a, b, c, d = 0, 1, 2, 3
    seqs = {((0, True),): np.array([b, c]), ((0, True), (1, True)): np.array([d]),
            ((0, True), (0, False)): np.array([a, d])}
    pool = [{"text": "poisoned", "topics": ["Ann"], "topic_ids": [a], "hops": 9, "seqs": seqs,
             "p": {s: float("nan") for s in seqs}, "answers": "poisoned"} for _ in range(5)]

    class KG:
        relation_names = ["married_to", "countryOfBirth"]
    out = P.pseudo_questions(KG, pool, 5, seed=0)
    assert len(out) == 5 and {q["text"] for q in out} <= {
        "what is the married to of Ann?", "what is the country Of Birth of the married to of Ann?",
        "what is the others with the same married to as Ann?"}
    for q in out:
        walk = q["pseudo_of"]
        assert q["p"][walk] == 1.0 and q["hops"] == len(walk) and q["topic_ids"] == [a]
        assert all(not np.isnan(v) for v in q["p"].values())
    assert P.verbalise([(1, False)], "X", KG.relation_names) == "what is the one whose country Of Birth is X?"


def test_the_pipelines_paraphrase_subset_reads_the_gold_path_and_the_words(tmp_path):
    """bench/transfer.py's paraphrase flag on a real DuckDB store: a question that names its gold path's relation
    is out, one worded apart from it is in, and one whose answer no path of 1-3 steps reaches has no gold path."""
    from bench.transfer import paraphrase_flags
    from kgrag import schema as S
    from kgrag.kg.duckdb_io import write_duckdb
    from tests.conftest import MOVIES, tiny_tables

    folder = tmp_path / "data" / "validated"
    folder.mkdir(parents=True)
    tabs = tiny_tables(MOVIES)
    write_duckdb(folder / "kg.duckdb", tabs)
    ids = {n: i for i, n in enumerate(tabs["entities"][S.NAME].to_pylist())}

    def q(text, topic, answer):
        return {S.TEXT: text, S.TOPIC_IDS: [ids[topic]], S.ANSWER_IDS: [ids[answer]]}

    flags = paraphrase_flags(tmp_path, [q("who directed Heat", "Heat", "Michael Mann"),
                                        q("who made the film Heat", "Heat", "Michael Mann"),
                                        q("who is Heat", "Heat", "Heat")])
    assert flags == [False, True, None]
