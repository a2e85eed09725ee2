"""bench/question_graphs.py copies its test rows without an LLM into transfer.json (issue 44: one file holds every
transfer row), in the shape of transfer.json's own rows; dev rows and rows with an LLM stay out."""

from __future__ import annotations

import json

from bench.question_graphs import sync_transfer


def _row(hit: float) -> dict:
    return {"first_candidate_hit_at_1": hit, "first_candidate_hit_at_1_ci95": [round(hit - 0.05, 2), round(hit + 0.05, 2)],
            "questions": 300, "answer_in_graph": 0.9, "overrides": ["data.dataset=rog"], "seconds": 1.0,
            "where_the_graph_holds_an_answer": {"questions": 270, "retrieved_recall": 1.0}}


def test_test_rows_without_an_llm_reach_transfer_json_in_its_shape(tmp_path):
    path = tmp_path / "transfer.json"
    kept = {"all": {"first_end_hit_at_1": 0.5, "questions": 10}}
    path.write_text(json.dumps({"note": "n", "sets": {"pql-2h/kg/retrieval": kept}}))
    result = {"sets": {"pql-2h/test/retrieval": _row(0.7), "pql-2h/test/labelled/retrieval": _row(0.8),
                       "pql-2h/dev/labelled/retrieval": _row(0.1), "pql-2h/test/all": {"hit_at_1": 0.2}}}
    sync_transfer(result, path)
    written = json.loads(path.read_text())
    sets = written["sets"]
    assert written["note"] == "n" and "question_graphs.json" in written["note_qgraphs"]
    assert set(sets) == {"pql-2h/kg/retrieval", "pql-2h-qgraphs/kg/retrieval", "pql-2h-qgraphs/labelled/retrieval"}
    assert sets["pql-2h/kg/retrieval"] == kept
    zero, lab = sets["pql-2h-qgraphs/kg/retrieval"], sets["pql-2h-qgraphs/labelled/retrieval"]
    assert zero["all"] == {"first_end_hit_at_1": 0.7, "first_end_hit_at_1_ci95": [0.65, 0.75], "questions": 300}
    assert lab["all"]["first_end_hit_at_1"] == 0.8 and lab["plan_source"] == "labelled" and zero["plan_source"] == "kg"
    assert lab["source"] == "reports/bench/question_graphs.json sets/pql-2h/test/labelled/retrieval"
    assert lab["where_the_graph_holds_an_answer"]["questions"] == 270


def test_no_transfer_json_no_write(tmp_path):
    sync_transfer({"sets": {"x/test/retrieval": _row(0.5)}}, tmp_path / "transfer.json")
    assert not (tmp_path / "transfer.json").exists()


def test_tune_needs_the_labelled_file_it_trains_on(tmp_path):
    """--tune trains the scorer on the labelled file: without --labelled there is none, and with --retrieval-only
    or --tuned it would train for nothing; each is refused before any work copy is made."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    for extra in ([], ["--labelled", "--retrieval-only"], ["--labelled", "--tuned", str(tmp_path)]):
        p = subprocess.run([sys.executable, "-m", "bench.question_graphs", "--tune", "--split", "dev", "--workdir",
                            str(tmp_path / "w"), "--out", str(tmp_path / "o.json"), *extra], cwd=root,
                           capture_output=True, text=True)
        assert p.returncode == 2 and "--tune needs --labelled" in p.stderr, (extra, p.stderr[-500:])
    assert not (tmp_path / "w").exists() and not (tmp_path / "o.json").exists()


def test_tuned_metaqa_trains_once_per_clean_commit_and_params(tmp_path, monkeypatch):
    """``--tuned metaqa`` trains the default project's scorer in a work copy and reuses it only for the same clean
    commit and params.yaml (control flow: the stages are replaced by a recorder that writes what the tune stage
    writes; the real stage is tests/test_tune.py's)."""
    import bench.question_graphs as qg

    ran, made = [], {"commit": "a" * 40, "dirty": False, "params_sha256": "p1"}

    def stage(work, name, sets):
        ran.append(name)
        assert sets == ["tune.enabled=true"]
        if name == "tune_answer_scorer":
            (work / "data" / "tune").mkdir(parents=True, exist_ok=True)
            (work / "data" / "tune" / "tune.json").write_text(json.dumps({"trained": True}))
        return {"seconds": 0.0, "peak_rss_mib": 0.0}

    def workcopy(dst):
        dst.mkdir(parents=True, exist_ok=True)
        return dst

    monkeypatch.setattr(qg, "run_stage", stage)
    monkeypatch.setattr(qg, "workcopy", workcopy)
    monkeypatch.setattr(qg, "provenance", lambda: {**made, "command": "python -m bench.question_graphs"})
    out = qg.default_scorer(tmp_path)
    assert out == tmp_path / "tune-metaqa" / "data" / "tune" and ran[-1] == "tune_answer_scorer"
    assert ran[:4] == ["ingest", "validate", "index", "relplan"]
    assert qg.default_scorer(tmp_path) == out and len(ran) == 5  # same commit and params: reused
    made["params_sha256"] = "p2"
    qg.default_scorer(tmp_path)
    assert len(ran) == 10  # other params: trained again
    made["dirty"] = True
    qg.default_scorer(tmp_path)
    assert len(ran) == 15  # uncommitted changes: never reused
