"""bench/tuned_speed.py's parts: the summary of its timed runs, and its refusal where no tuned model was trained."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from bench.tuned_speed import summary

ROOT = Path(__file__).resolve().parents[1]


def run(model: str, qpm: float, evaluated: float, reused: float) -> dict:
    return {"model": model, "questions_per_minute": qpm, "evaluated_per_call": evaluated, "reused_per_call": reused}


def test_summary_averages_each_models_runs_before_the_ratio():
    runs = [run("base", 60.0, 200.0, 140.0), run("tuned", 90.0, 200.0, 50.0), run("tuned", 110.0, 210.0, 40.0),
            run("base", 40.0, 210.0, 150.0)]
    s = summary(runs)
    assert s["questions_per_minute"] == {"base": 50.0, "tuned": 100.0}
    assert s["ratio"] == 2.0
    assert s["why"]["tuned"] == {"evaluated_per_call": 205.0, "reused_per_call": 45.0}
    assert s["why"]["base"]["reused_per_call"] == 145.0


def test_refuses_without_a_tuned_model(tmp_path):
    # --here measures the current directory (here one with no tuned model); the bench module comes from ROOT
    p = subprocess.run([sys.executable, "-m", "bench.tuned_speed", "--here", "--out", str(tmp_path / "out.json")],
                       cwd=tmp_path, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert p.returncode != 0
    assert "model.gguf" in p.stderr and "tune_answer_scorer stage" in p.stderr
    assert not (tmp_path / "out.json").exists()
