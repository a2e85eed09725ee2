"""End-to-end: the real DVC pipeline (real DuckDB, MiniLM, SmolLM2) on a small real MetaQA sample.

Runs in a copy of the repository: `dvc repro` from scratch, then again (nothing runs), then a
generation-only param change (retrieve is not recomputed, and its output is byte-identical).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import unicodedata
from pathlib import Path
from urllib.parse import unquote

import pytest
import yaml

from kgrag import schema as S
from tests.conftest import E2E_SAMPLE as SAMPLE, run as _run

pytestmark = pytest.mark.e2e


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _norm(s: str) -> str:
    """kgrag's answer normalization (``kgrag.evaluation.evaluate.normalize``), written out here: %XX decoded, accents folded,
    lower case, dotted acronyms joined, & read as and, apostrophes deleted, any other non-alphanumeric a space,
    the articles dropped, white space folded."""
    s = "".join(c for c in unicodedata.normalize("NFKD", unquote(s)) if not unicodedata.combining(c)).lower()
    s = re.sub(r"\b(?:[^\W\d_]\.){2,}", lambda m: m.group(0).replace(".", ""), s)  # L.A. -> la
    s = re.sub("['\u2018\u2019\u02bc`\u00b4]", "", s.replace("&", " and "))
    s = "".join(c if c.isalnum() else " " for c in s)
    return " ".join(w for w in s.split() if w not in ("a", "an", "the"))


def _rescore(rows: list[dict]) -> dict:
    """Hit@1, Hit and F1 over predictions.parquet's rows by their plain definitions (an unanswerable question is a
    miss): the first parsed answer is a gold answer; a gold answer occurs in the prediction as whole words; F1 of
    the parsed answer set against the gold set, 2 tp / (|predicted| + |gold|)."""
    hit1 = hit = f1 = 0.0
    for r in rows:
        if r.get(S.ANSWERABLE) is False:
            continue
        gold = {_norm(g) for g in r["gold"] if g} - {""}
        pred = [p for p in map(_norm, r[S.PREDICTED_ANSWERS] or []) if p]
        text = f" {_norm(r[S.PREDICTION] or '')} "
        tp = len(set(pred) & gold)
        hit1 += bool(pred) and pred[0] in gold
        hit += any(f" {g} " in text for g in gold)
        f1 += 2 * tp / (len(set(pred)) + len(gold)) if tp else 0.0
    return {"hit_at_1": hit1 / len(rows), "hit_any": hit / len(rows), "f1": f1 / len(rows)}


@pytest.fixture
def project(shared_project: Path) -> Path:
    """The session's e2e project, put back after each test (conftest ``shared_project``)."""
    return shared_project


@pytest.fixture(scope="module")
def first_run(e2e_first_run: str) -> str:
    return e2e_first_run


def test_metrics_fields_and_ranges(project, first_run):
    m = json.loads((project / "reports" / "metrics.json").read_text())
    assert m["questions"] == SAMPLE
    for k in ("hit_at_1", "hit_any", "em", "precision", "recall", "f1", "retrieval_recall"):
        assert 0.0 <= m[k] <= 1.0, k
    assert m["retrieval_recall"] > 0.3  # relpath's learnt sequence on 2-hop questions holds many answers
    assert m["context_triples_mean"] > 0 and m["context_tokens_mean"] > 50
    assert m["failed"] == 0
    # what the run took is a run record beside the metrics (no DVC output), in the report too
    t = json.loads((project / "reports" / "timings.json").read_text())
    assert not {"stage_seconds", "llm_calls_per_question", "retrieve_ms_median", "generate_ms_median"} & set(m)
    assert t["llm_calls_per_question"] > 0 and t["retrieve_ms_median"] > 0 and t["generate_ms_median"] > 0
    assert set(t["stage_seconds"]) == {"ingest", "validate", "index", "relplan", "tune_answer_scorer", "retrieve",
                                       "generate"}
    assert t["questions_timed"] == {"retrieve": SAMPLE, "generate": SAMPLE}
    report = (project / "reports" / "report.md").read_text()
    assert "Hit@1" in report and "figures/recall_vs_context.png" in report
    assert "| retrieve | " in report and "(`generate_ms_median`)" in report
    assert "generate ms" in (project / "reports" / "report.html").read_text()
    png = project / "reports" / "figures" / "recall_vs_context.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    import pyarrow.parquet as pq

    preds = pq.read_table(project / "reports" / "predictions.parquet").to_pylist()
    assert len(preds) == SAMPLE and all(p["prediction"] for p in preds)
    assert {"question", "gold", "prediction", "retrieved_triples", "hit_at_1", "f1"} <= set(preds[0])
    assert not {"retrieve_ms", "generate_ms", "cached", "llm_calls"} & set(preds[0])
    # rank calls the LLM once for a question with a choice to make, never for one candidate (a fresh cache)
    choice = [json.loads(p["trace"])["candidates"] >= 2 for p in preds]
    assert t["llm_calls_per_question"] == pytest.approx(sum(choice) / SAMPLE)
    # the metrics are the per-question predictions scored by their rules (metrics.json holds the unrounded means)
    assert _rescore(preds) == {k: pytest.approx(m[k], abs=1e-9) for k in ("hit_at_1", "hit_any", "f1")}, m


def test_default_repro_runs_only_what_the_experiment_reads(project, first_run):
    """The default experiment (relpath with the learnt plan) reads no fine-tuned scorer: `dvc repro` ran the
    default DAG only, not finetune/dvc.yaml, gretriever/dvc.yaml nor synth/dvc.yaml; its relplan stage labelled
    the held-out dev questions (40 a hop count here) and retrieval found the answers of the 2-hop questions. The
    tune_answer_scorer stage is in the DAG (``generate.model: tuned`` reads its GGUF) but, disabled by default,
    trains nothing."""
    ran = {line.split("'")[1] for line in first_run.splitlines() if line.startswith("Running stage '")}
    assert ran == {"ingest", "validate", "index", "relplan", "tune_answer_scorer", "retrieve", "generate", "evaluate",
                   "report"}, ran
    tune = json.loads((project / "data" / "tune" / "tune.json").read_text())
    assert tune["trained"] is False and sorted(p.name for p in (project / "data" / "tune").iterdir()) == ["tune.json"]
    plan = json.loads((project / "data" / "relplan" / "plan.json").read_text())
    assert plan["labelled"] >= 100 and plan["label_answer_recall"] > 0.99 and plan["split"] == "dev", plan
    m = json.loads((project / "reports" / "metrics.json").read_text())
    assert m["setup"]["retrieve"] == "relpath" and m["retrieval_recall"] >= 0.8, m


def test_repro_again_runs_nothing(project, first_run):
    out = _run(["dvc", "repro"], project)
    assert "Running stage" not in out, out


def test_rerun_with_no_cache_keeps_outputs_and_lock(project, first_run):
    """Retrieve and generate re-run from scratch (no shard cache, no LLM call cache, as on a fresh clone): their
    outputs are the same bytes, so dvc.lock is unchanged and nothing after them runs; only the run records
    (data/timings/) are new."""
    lock = (project / "dvc.lock").read_text()
    outs = {p: _sha(project / p) for p in ("data/retrieve/retrieved.parquet", "data/generate/generations.parquet")}
    record = project / "data" / "timings" / "retrieve" / "timing.json"
    before = json.loads(record.read_text())
    shutil.rmtree(project / ".kgrag_cache" / "shards", ignore_errors=True)
    for f in (project / ".kgrag_cache").glob("llm_calls.sqlite*"):
        f.unlink()
    out = _run(["dvc", "repro", "-f", "-s", "retrieve"], project) + _run(["dvc", "repro", "-f", "-s", "generate"], project)
    out += _run(["dvc", "repro"], project)
    assert "Running stage 'retrieve'" in out and "Running stage 'generate'" in out
    assert "Running stage 'evaluate'" not in out and "Running stage 'report'" not in out, out
    assert {p: _sha(project / p) for p in outs} == outs
    assert (project / "dvc.lock").read_text() == lock
    after = json.loads(record.read_text())
    assert after["seconds"] != before["seconds"] and after["outputs"] == before["outputs"]


def test_generation_change_keeps_retrieval(project, first_run):
    """A reasoner or generation param change re-runs generate onward, never retrieve (its output byte-identical).
    `reason.rank.top_k` changes the answer, not the scoring call, so every call comes from the LLM call cache and
    the answer is the first run's best-first list cut to one name (top_k: auto there); a new sampling param makes
    new calls."""
    retrieved = project / "data" / "retrieve" / "retrieved.parquet"
    before = _sha(retrieved)
    gen_before = json.loads((project / "data" / "timings" / "generate" / "timing.json").read_text())
    m1 = json.loads((project / "reports" / "metrics.json").read_text())
    params = yaml.safe_load((project / "params.yaml").read_text())
    assert m1["setup"]["reasoner"] == "rank" and params["reason"]["rank"]["top_k"] == "auto"
    params["reason"]["rank"]["top_k"] = 1
    (project / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    out = _run(["dvc", "repro"], project)
    assert "Running stage 'generate'" in out and "Running stage 'retrieve'" not in out
    m2 = json.loads((project / "reports" / "metrics.json").read_text())
    assert m2["hit_at_1"] == m1["hit_at_1"] and m2["hit_any"] <= m1["hit_any"]  # fewer names can only lose hits
    # every scoring call came from the cache (a run record: reports/timings.json)
    assert json.loads((project / "reports" / "timings.json").read_text())["llm_calls_per_question"] == 0
    params["generate"]["max_tokens"] = 16
    (project / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    out = _run(["dvc", "repro"], project)
    assert "Running stage 'generate'" in out and "Running stage 'evaluate'" in out
    for stage in ("ingest", "validate", "index", "retrieve"):
        assert f"Running stage '{stage}'" not in out, stage
    assert _sha(retrieved) == before
    gen_after = json.loads((project / "data" / "timings" / "generate" / "timing.json").read_text())
    assert gen_after["cached"] == 0 and gen_before["cached"] == 0  # new sampling params: new calls


def test_ask_answers_from_the_graph(project, first_run):
    out = _run(["kgrag", "ask", "who directed the movies starred by [Al Pacino]", "--show", "5"], project)
    assert "topic entities (named in the question): Al Pacino" in out
    # relpath lists the answers' hop first: the learnt sequence's last relation
    assert "with relpath" in out and "directed_by" in out
    assert "LLM calls:" in out and "tokens_in=" in out
    assert "\nanswer: " in out


def _finetuned(project: Path) -> None:
    """The finetune pipeline (finetune/dvc.yaml) run in the project and committed, by whichever test needs it
    first (each of the two tests below works in either order)."""
    _run(["dvc", "repro", "finetune/dvc.yaml"], project)
    assert (project / "data" / "finetune" / "st_model" / "modules.json").exists()
    _run(["git", "add", "-A"], project)
    _run(["git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "finetuned scorer", "--allow-empty"],
         project)


def test_lego_presets_through_dvc_experiments(project, first_run):
    """A LEGO-GraphRAG preset as a `dvc exp run -S` experiment: per-module metrics reach the report. lego-18
    scores with the fine-tuned ST, built first by its own pipeline (finetune/dvc.yaml). (Each preset's retrieval
    on real questions is tested in process: tests/test_lego_e2e.py; a second preset through DVC cost ~2 min of
    the suite and exercised the same path.)"""
    _finetuned(project)
    for preset in ("lego-18",):  # scores with the fine-tuned ST
        # a short prompt: the subject is retrieval through DVC; lego-18's 60-triple prompts made generate the
        # experiment's longest stage (87 of its ~170 s, every scoring call new)
        # and a smaller PPR extraction (200 entities, not Table 7's 2000): the fine-tuned ST encoded every path of
        # 2000 entities, 33 of retrieve's 48 s on 12 questions
        out = _run(["dvc", "exp", "run", "-S", "retrieve.method=lego", "-S", f"retrieve.lego.preset={preset}",
                    "-S", "generate.max_context_triples=10",
                    "-S", "+retrieve.lego.extract={name: ppr, params: {max_ent: 200}}"], project)
        assert "Running stage 'retrieve'" in out
        m = json.loads((project / "reports" / "metrics.json").read_text())
        assert m["setup"]["retrieve"] == "lego" and m["questions"] == SAMPLE and m["failed"] == 0
        stages = [x["stage"] for x in m["retrieval_modules"]]
        assert stages[0] == "neighbourhood" and stages[-2:] == ["filter", "refine"], stages
        for x in m["retrieval_modules"]:
            assert 0.0 <= x["recall"] <= 1.0 and not {"ms_mean", "ms_median"} & set(x)  # times: run records
        t = json.loads((project / "reports" / "timings.json").read_text())
        assert [(x["stage"], x["module"]) for x in t["retrieval_modules_ms"]] == \
            [(x["stage"], x["module"]) for x in m["retrieval_modules"]]
        assert all(x["ms_mean"] >= 0.0 for x in t["retrieval_modules_ms"])
        import pyarrow.parquet as pq

        retrieved = pq.read_table(project / "data" / "retrieve" / "retrieved.parquet").column("trace").to_pylist()
        assert not any("ms" in st for tr in retrieved for st in json.loads(tr)["stages"])
        assert "## Retrieval modules" in (project / "reports" / "report.md").read_text()
    shown = _run(["dvc", "exp", "show", "--json"], project)
    assert "lego-18" in shown  # the workspace row holds the last experiment's params


def test_finetune_stage_and_lego_table(project, first_run):
    """The finetune pipeline improved its held-out pairs; `kgrag lego-table` runs presets (one on the fine-tuned
    ST) on the experiment's questions and writes both tables."""
    _finetuned(project)
    ft = json.loads((project / "reports" / "finetune.json").read_text())
    assert ft["train_triplets"] > 0 and ft["val_triplets"] > 0
    assert ft["val_gap_after"] > ft["val_gap_before"]
    assert (project / "data" / "finetune" / "st_model" / "modules.json").exists()
    _run(["kgrag", "lego-table", "--presets", "lego-00,lego-05", "--questions", "4"], project)
    table = json.loads((project / "reports" / "lego_instances.json").read_text())
    assert [r["preset"] for r in table["rows"]] == ["lego-00", "lego-05"]
    assert all(r["questions"] == 4 and 0.0 <= r["recall"] <= 1.0 for r in table["rows"])
    md = (project / "reports" / "lego_instances.md").read_text()
    assert "| lego-05 | ppr | st-ft | shortest | random | 4 |" in md
    again = _run(["kgrag", "lego-table", "--presets", "lego-00,lego-05", "--questions", "4"], project)
    assert again.count("unchanged, kept") == 2
