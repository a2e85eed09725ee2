"""`kgrag compare`: parsing `dvc exp show --json`, the side-by-side table, best marks and plots.

The end-to-end test over two real pipeline experiments is `tests/test_e2e.py::test_compare_two_experiments`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kgrag.reporting import compare as C
from kgrag.cli import main

PNG = b"\x89PNG\r\n\x1a\n"


def _exp(name: str, params: dict, metrics: dict, kind: str = "experiment") -> C.Experiment:
    return C.Experiment(name=name, rev=(name.encode().hex() + "0" * 40)[:40], baseline="main", kind=kind,
                        params=C.flatten(params), metrics=metrics)


def _row(rev: str, name: str | None, params: dict, metrics: dict | None, error=None) -> dict:
    files = {} if metrics is None else {"reports/metrics.json": {"data": metrics}}
    return {"rev": rev, "name": name, "error": error,
            "data": {"rev": rev, "params": {"params.yaml": {"data": params}}, "metrics": files}}


def _fasttog(m: int, hit: float, calls: float) -> dict:
    return {"reason": {"method": "fasttog", "fasttog": {"max_size": m, "width": 3}}, "data": {"sample": 200}}, \
        {"hit_at_1": hit, "hit_any": hit + 0.1, "f1": hit / 2, "retrieval_recall": 0.7, "failed": 0,
         "reasoner_calls_per_question": calls, "tokens_per_question": 100.0 * calls}


def test_flatten_nested_keys():
    got = C.flatten({"a": {"b": {"c": 1}, "d": [1, 2]}, "e": {}, "f": None})
    assert got == {"a.b.c": 1, "a.d": [1, 2], "e": {}, "f": None}


def test_differing_params_only_and_absent_counts():
    a = _exp("a", {"x": 1, "y": {"z": "s", "w": [1, 2]}}, {})
    b = _exp("b", {"x": 1, "y": {"z": "t", "w": [1, 2]}}, {})
    c = _exp("c", {"x": 1, "y": {"z": "s", "w": [1, 2]}, "new": 5}, {})
    assert C.differing_params([a, b]) == ["y.z"]
    assert C.differing_params([a, c]) == ["new"]  # set in one, absent in the other
    assert C.differing_params([a, a]) == []


@pytest.mark.parametrize("sign,values,want", [
    (1, [0.1, 0.3, 0.2], {1}),
    (-1, [5, 3, 3], {1, 2}),  # ties all marked
    (1, [0.2, 0.2], set()),  # all equal: nothing marked
    (0, [1.0, 2.0], set()),  # unknown direction
    (1, [None, 0.5, "x", True], set()),  # one number only
    (1, [None, 0.5, 0.4], {1}),
])
def test_best(sign, values, want):
    assert C.best(values, sign) == want


def test_render_marks_best_per_metric_and_lists_differing_params():
    exps = [_exp(f"m{m}", *_fasttog(m, hit, calls)) for m, hit, calls in ((1, 0.2, 9.0), (2, 0.35, 7.0), (4, 0.3, 8.0))]
    md = C.render(exps, metrics=list(C.KEY_METRICS), plots_dir="compare")
    lines = [x for x in md.splitlines() if x.startswith("|")]
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    assert head[:3] == ["experiment", "rev", "`reason.fasttog.max_size`"]
    assert "`reason.method`" not in head and "`reason.fasttog.width`" not in head  # equal everywhere
    rows = {r[0]: r for r in ([c.strip() for c in x.strip("|").split("|")] for x in lines[2:])}
    col = {h: i for i, h in enumerate(head)}
    assert rows["m2"][col["Hit@1 ↑"]] == "**0.350**" and rows["m1"][col["Hit@1 ↑"]] == "0.200"
    assert rows["m2"][col["LLM calls / q ↓"]] == "**7.000**" and rows["m4"][col["LLM calls / q ↓"]] == "8.000"
    assert rows["m4"][col["`reason.fasttog.max_size`"]] == "4"
    assert not any("**" in c for c in (rows["m1"][col["retrieval recall ↑"]], rows["m2"][col["failed ↓"]]))  # ties
    assert "![sweep over reason.fasttog.max_size](compare/sweep.png)" in md
    assert "![Hit@1](compare/hit_at_1.png)" in md


def test_the_plan_that_answered_is_a_column():
    """relplan.source as the stage resolved it (metrics.json setup.plan) is shown beside the params, so that a run
    with labelled questions and one without are told apart even where the params file says `auto` for both."""
    a = _exp("nolabels", {"relplan": {"source": "kg"}}, {"hit_at_1": 0.7, "setup.plan": "kg (736 question texts ...)"})
    b = _exp("labels", {"relplan": {"source": "labelled"}}, {"hit_at_1": 0.99, "setup.plan": "labelled (736 questions)"})
    md = C.render([a, b], metrics=["hit_at_1"])
    head = [c.strip() for c in md.splitlines()[4].strip("|").split("|")]
    assert head[:4] == ["experiment", "rev", "`relplan.source`", "`setup.plan`"]
    assert "| labelled (736 questions) |" in md and "| kg (736 question texts ...) |" in md


def test_sweep_param_only_for_one_numeric_param():
    a, b = _exp("a", *_fasttog(1, 0.1, 5)), _exp("b", *_fasttog(8, 0.2, 6))
    assert C.sweep_param([a, b]) == "reason.fasttog.max_size"
    c = _exp("c", {"reason": {"method": "tog", "fasttog": {"max_size": 4, "width": 3}}, "data": {"sample": 200}}, {})
    assert C.sweep_param([a, c]) is None  # two params differ
    d = _exp("d", {"p": "x"}, {}), _exp("e", {"p": "y"}, {})
    assert C.sweep_param(list(d)) is None  # not numeric
    assert C.sweep_param([a]) is None


def test_write_plots_bars_and_sweep(tmp_path):
    exps = [_exp(f"M={m}", *_fasttog(m, hit, calls)) for m, hit, calls in ((1, 0.2, 9.0), (2, 0.35, 7.0),
                                                                          (4, 0.3, 8.0), (8, 0.25, 10.0))]
    metrics = ["hit_at_1", "reasoner_calls_per_question"]
    files = C.write_plots(exps, metrics=metrics, folder=tmp_path / "compare")
    assert sorted(p.name for p in files) == ["hit_at_1.png", "reasoner_calls_per_question.png", "sweep.png"]
    for p in files:
        assert p.read_bytes()[:8] == PNG and p.stat().st_size > 2000
    no_sweep = C.write_plots(exps[:1] + [_exp("other", {"x": 1}, exps[1].metrics)], metrics=metrics,
                             folder=tmp_path / "two")
    assert sorted(p.name for p in no_sweep) == ["hit_at_1.png", "reasoner_calls_per_question.png"]


def test_parse_exp_show_rows():
    base_params = {"retrieve": {"pcst": {"topk": 3}}}
    rows = [
        _row("workspace", None, base_params, {"hit_at_1": 0.1}),
        {**_row("a" * 40, "main", base_params, {"hit_at_1": 0.1}), "experiments": [
            {"name": "done", "executor": None,
             "revs": [_row("b" * 40, "done", {"retrieve": {"pcst": {"topk": 5}}}, {"hit_at_1": 0.2})]},
            {"name": "queued-one", "executor": {"state": "queued"}, "revs": [_row("c" * 40, "queued-one", {}, None)]},
            {"name": "broke", "executor": {"state": "failed"},
             "revs": [_row("d" * 40, "broke", {}, {}, error={"msg": "Experiment run failed"})]},
            {"name": "no-metrics", "executor": {"state": "success"}, "revs": [_row("e" * 40, "no-metrics", {}, None)]},
        ]},
    ]
    done = rows[1]["experiments"][0]["revs"][0]["data"]  # another metrics file, listed first, with the same key
    done["metrics"] = {"reports/finetune.json": {"data": {"hit_at_1": 9}}, **done["metrics"]}
    exps, skipped = C.parse_exp_show(rows)
    assert [(e.name, e.kind) for e in exps] == [("workspace", "workspace"), ("main", "baseline"),
                                                ("done", "experiment")]
    assert exps[2].params["retrieve.pcst.topk"] == 5 and exps[2].baseline == "main"
    assert exps[2].metrics["hit_at_1"] == 0.2  # the primary metrics file wins over another file's same key
    assert [(s.name, s.reason) for s in skipped] == [("queued-one", "queued"), ("broke", "failed"),
                                                    ("no-metrics", "no reports/metrics.json")]
    assert [e.name for e in C.select(exps, ["done", "main"])] == ["done", "main"]
    assert C.select(exps, ["bbbb"])[0].name == "done"  # a rev prefix
    with pytest.raises(KeyError, match="unknown experiment 'nope'; known: workspace, main, done"):
        C.select(exps, ["nope"])
    with pytest.raises(KeyError, match="'queued-one' has no results \\(queued\\)"):
        C.select(exps, ["queued-one"], skipped=skipped)


@pytest.fixture(scope="module")
def toy_repo(tmp_path_factory) -> Path:
    """A real git + DVC repo with a one-stage pipeline and real experiments: two finished (m = 2, 8), one
    failed, one queued."""
    root = tmp_path_factory.mktemp("toy")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "DVC_NO_ANALYTICS": "1"}

    def sh(*cmd: str) -> str:
        p = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, f"{cmd}: {p.stdout}{p.stderr}"
        return p.stdout

    (root / "params.yaml").write_text("model:\n  m: 1\n  fail: false\nname: toy\n")
    (root / "score.py").write_text(
        "import json, sys, yaml\np = yaml.safe_load(open('params.yaml'))['model']\n"
        "sys.exit(1) if p['fail'] else None\n"
        "json.dump({'hit_at_1': 1 / p['m'], 'failed': p['m'] % 3, 'setup': {'m': p['m']}},"
        " open('metrics.json', 'w'))\n"
        "json.dump({'generate_ms_median': 10 * p['m']}, open('timings.json', 'w'))\n")  # a run record
    # timings.json: a top-level metrics file (no stage output), as kgrag's reports/timings.json
    (root / "dvc.yaml").write_text("stages:\n  score:\n    cmd: python score.py\n    deps: [score.py]\n"
                                   "    params: [model]\n    metrics:\n      - metrics.json:\n          cache: false\n"
                                   "metrics:\n  - timings.json\n")
    sh("git", "init", "-q")
    sh("dvc", "init", "-q")
    sh("dvc", "repro", "-q")
    sh("git", "add", "-A")
    sh("git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "init")
    for m in (2, 8):
        sh("dvc", "exp", "run", "-q", "-n", f"m{m}", "-S", f"model.m={m}")
    sh("dvc", "exp", "run", "--queue", "-n", "broken", "-S", "model.fail=true")
    sh("dvc", "exp", "run", "--run-all")  # the queued one fails
    sh("dvc", "exp", "run", "--queue", "-n", "later", "-S", "model.m=16")
    sh("git", "checkout", "--", "params.yaml")
    return root


@pytest.mark.e2e  # real dvc subprocesses: about a minute on an idle machine, minutes on a loaded one
def test_real_dvc_exp_show(toy_repo, tmp_path, monkeypatch, capsys):
    """`kgrag compare` on real `dvc exp show --json` output: finished experiments compared, the failed and
    the queued one skipped with a note, a sweep over the one numeric param, metric values from each run."""
    monkeypatch.chdir(toy_repo)
    out = tmp_path / "cmp.md"
    assert main(["compare", "m8", "m2", "--metrics", "hit_at_1,failed", "--metrics-file", "metrics.json",
                 "--out", str(out)]) == 0
    md = out.read_text()
    lines = [x for x in md.splitlines() if x.startswith("|")]
    assert [c.strip() for c in lines[0].strip("|").split("|")] == ["experiment", "rev", "`model.m`", "Hit@1 ↑",
                                                                  "failed ↓"]
    cells = [[c.strip() for c in x.strip("|").split("|")] for x in lines[2:]]
    assert [(r[0], r[2], r[3], r[4]) for r in cells] == [("m8", "8", "0.125", "2"), ("m2", "2", "**0.500**", "2")]
    assert sorted(p.name for p in (tmp_path / "cmp").iterdir()) == ["failed.png", "hit_at_1.png", "sweep.png"]

    assert main(["compare", "--metrics", "hit_at_1", "--metrics-file", "metrics.json", "--out", str(out)]) == 0
    md = out.read_text()
    assert "broken (failed)" in md and "later (queued)" in md
    names = [x.split("|")[1].strip() for x in md.splitlines() if x.startswith("|")][2:]
    assert sorted(names) in (["m2", "m8", "master"], ["m2", "m8", "main"])  # the baseline: git's branch name
    assert sorted(p.name for p in (tmp_path / "cmp").iterdir()) == ["hit_at_1.png", "sweep.png"]  # stale one gone
    assert "| **1.000** |" in md  # the baseline's Hit@1 (m = 1) is the best
    capsys.readouterr()
    assert main(["compare", "m2", "zzz", "--metrics-file", "metrics.json", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "unknown experiment 'zzz'; known:" in err and "m8" in err
    assert main(["compare", "broken", "--metrics-file", "metrics.json", "--out", str(out)]) == 2
    assert "has no results (failed)" in capsys.readouterr().err
    assert main(["compare", "m2", "m8", "--metrics", "nope", "--metrics-file", "metrics.json",
                 "--out", str(out)]) == 2
    assert "unknown metric(s) nope" in capsys.readouterr().err
    # default metrics: the key metrics these experiments have (no accuracy column for entity questions)
    assert main(["compare", "m2", "m8", "--metrics-file", "metrics.json", "--out", str(out)]) == 0
    head = [x for x in out.read_text().splitlines() if x.startswith("|")][0]
    assert [c.strip() for c in head.strip("|").split("|")][3:] == ["Hit@1 ↑", "failed ↓"]


@pytest.mark.e2e
def test_run_records_of_a_top_level_metrics_file_reach_compare_and_no_lock(toy_repo, tmp_path, monkeypatch):
    """A top-level ``metrics`` file of dvc.yaml (kgrag's reports/timings.json) belongs to no stage: no dvc.lock
    holds its hash, yet `dvc exp run` commits it with each experiment, so `kgrag compare` shows its keys."""
    monkeypatch.chdir(toy_repo)
    lock = (toy_repo / "dvc.lock").read_text()
    assert "metrics.json" in lock and "timings.json" not in lock
    out = tmp_path / "cmp.md"
    assert main(["compare", "m8", "m2", "--metrics", "hit_at_1,generate_ms_median", "--metrics-file",
                 "metrics.json", "--out", str(out)]) == 0
    lines = [x for x in out.read_text().splitlines() if x.startswith("|")]
    assert [c.strip() for c in lines[0].strip("|").split("|")][3:] == ["Hit@1 ↑", "generate ms / q ↓"]
    cells = [[c.strip().strip("*") for c in x.strip("|").split("|")] for x in lines[2:]]
    assert [(r[0], float(r[4])) for r in cells] == [("m8", 80.0), ("m2", 20.0)]  # each experiment's own file


def test_help_lists_options(capsys):
    with pytest.raises(SystemExit):
        main(["compare", "--help"])
    text = capsys.readouterr().out
    for opt in ("EXP", "--all", "--metrics", "--out", "reports/compare.md", "hit_at_1"):
        assert opt in text


def test_a_setup_entry_all_experiments_share_is_not_a_column():
    """Like the params, the setup entries shown are those that tell the experiments apart."""
    a = _exp("k1", {"reason": {"rank": {"top_k": 1}}}, {"hit_at_1": 0.9, "setup.plan": "labelled (6000)",
                                                         "setup.model": "base"})
    b = _exp("k2", {"reason": {"rank": {"top_k": 2}}}, {"hit_at_1": 0.9, "setup.plan": "labelled (6000)",
                                                         "setup.model": "tuned (abc)"})
    head = [c.strip() for c in C.render([a, b], metrics=["hit_at_1"]).splitlines()[4].strip("|").split("|")]
    assert "`setup.plan`" not in head and "`setup.model`" in head
