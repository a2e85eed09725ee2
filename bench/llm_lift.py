"""Benchmark: what the LLM adds, base and tuned, beside the no-LLM baselines (issue "The LLM earns its place").

In a work copy of the repository (``--workdir``), the default params' stages run up to ``tune_answer_scorer`` with
``tune.enabled=true`` (ingest → validate → index → relplan → tune: the LoRA scorer trained on relplan's held-out
dev questions, never the test split; the stage's own leak guard checks ids and texts). Then ``bench/generalize.py``
runs there on ``--per-hop`` MetaQA test questions of each hop count, mixed, no hop count given, for four
configurations: the packaged model (``base``) and the tuned one (``tuned``), each with one relation sequence
(the default) and with two (``retrieve.relpath.paths=2``: the second sequence's ends are distractors ``rank``
must reject). ``--labels``: rows of ``bench/labels.py``'s output (ExplaGraphs, base and tuned) are added.

Writes ``--out`` (default ``reports/bench/llm_lift.json``): the training record (questions, rows, loss per
epoch, seconds, peak RSS), and per configuration Hit@1 [95%], the first and random candidate, the paired lift over
the first candidate [95%] with the questions won and lost, and generate seconds per question; ``table`` holds
them as rows. Test split, measured once: the tuned model's use was chosen on dev (``reports/bench/tune_dev.json``).

    python -m bench.llm_lift --per-hop 100 --labels reports/bench/labels_tuned.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from bench.common import write_result
from bench.full_split import clear_caches, env, run_stage, workcopy

ROOT = Path(__file__).resolve().parents[1]

STAGES = ("ingest", "validate", "index", "relplan", "tune_answer_scorer")
CONFIGS = {"base": "", "tuned": "generate.model=tuned", "base, distractors": "retrieve.relpath.paths=2",
           "tuned, distractors": "retrieve.relpath.paths=2;generate.model=tuned"}


def row(name: str, data: str, r: dict) -> dict:
    """One table row of a generalize.py configuration's ``all`` block."""
    p = r.get("llm_lift_paired") or {}
    return {"set": data, "config": name, "questions": r["questions"], "hit_at_1": r["hit_at_1"],
            "hit_at_1_ci95": r["hit_at_1_ci95"], "first": r["baseline_first"], "random": r["baseline_random"],
            "lift_over_first": p.get("lift"), "lift_ci95": p.get("ci95"), "won": p.get("won"), "lost": p.get("lost"),
            "seconds_per_question": r["seconds_per_question"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--per-hop", type=int, default=100)
    ap.add_argument("--workdir", default="/tmp/kgrag-lift/main")
    ap.add_argument("--labels", default=None, help="bench/labels.py output whose dev rows join the table")
    ap.add_argument("--out", default=str(ROOT / "reports" / "bench" / "llm_lift.json"))
    ap.add_argument("--table-only", action="store_true", help="re-make the table from the work copy's finished "
                    "runs (e.g. with --labels added), training and answering nothing")
    args = ap.parse_args()
    work = Path(args.workdir)
    raw = work / "reports" / "bench" / "llm_lift_metaqa.json"
    record = work / "reports" / "bench" / "llm_lift_training.json"
    if not args.table_only:
        workcopy(work)
        clear_caches(work)
        runs = {st: run_stage(work, st, ["tune.enabled=true"]) for st in STAGES}
        tune = json.loads((work / "data" / "tune" / "tune.json").read_text())
        training = {k: tune.get(k) for k in ("note", "questions", "trained_rows", "rows", "loss_per_epoch",
                                             "training_data_hash", "lora")}
        training.update(seconds=runs["tune_answer_scorer"]["seconds"],
                        peak_rss_mib=runs["tune_answer_scorer"]["peak_rss_mib"])
        record.write_text(json.dumps(training))
        print(f"[llm_lift] trained: {training}", file=sys.stderr, flush=True)
        cmd = [sys.executable, "-m", "bench.generalize", "--split", "test", "--per-hop", str(args.per_hop), "--out",
               str(raw)]
        for name, ov in CONFIGS.items():
            cmd += ["--config", f"{name}={ov}"]
        subprocess.run(cmd, cwd=work, env=env(), check=True)
    # (a run of this bench before the record file existed left its training record in --out only)
    training = json.loads((record if record.exists() else Path(args.out)).read_text())
    training = training.get("training", training)
    got = json.loads(raw.read_text())
    configs = {name: {k: v for k, v in c.items() if k != "_rows"} for name, c in got["configs"].items()}
    table = [row(name, "MetaQA test, 1/2/3-hop mixed", c["all"]) for name, c in configs.items()]
    if args.labels:
        for name, c in json.loads(Path(args.labels).read_text())["runs"].get("dev sample=0 seed=0", {}).items():
            table.append({"set": "ExplaGraphs dev", "config": name, "questions": c["rows"], "hit_at_1": c["accuracy"],
                          "hit_at_1_ci95": [c["accuracy_ci95"]["low"], c["accuracy_ci95"]["high"]],
                          "first": c["baseline_first"], "random": c["baseline_random"],
                          "majority": c["baseline_majority"], "lift_over_first": None, "lift_ci95": None,
                          "seconds_per_question": c["seconds_per_question"], "training": c.get("tune")})
    result = {"training": training, "configs": configs, "table": table, "per_hop": args.per_hop,
              "note": "MetaQA: test split, measured once (the tuned model's use chosen on dev, tune_dev.json); "
                      "trained on relplan's held-out dev questions. ExplaGraphs: dev (its report split), the tuned "
                      "model trained on its train file. Intervals: seeded bootstrap 95%; lift_over_first paired "
                      "per question"}
    write_result(args.out, result)


if __name__ == "__main__":
    main()
