"""Benchmark: a label task (ExplaGraphs stance: support / counter) through the pipeline, per configuration, with
the no-LLM baselines beside each accuracy.

Each configuration (``--config NAME=OVERRIDES``, overrides ``;``-separated ``key=value`` as ``dvc exp run -S``) runs
the default params' stages (ingest → validate → index → relplan → tune_answer_scorer → retrieve → generate →
evaluate, each ``python -m stages.<name> --set ...``) in a work copy of the repository (``--workdir``) on
``--sample`` rows of ExplaGraphs' ``--split`` file (seeded). **Select on train, report on dev**: ExplaGraphs ships
train and dev only; G-Retriever reports dev, so choices are made on a train sample and dev is measured once for the
chosen one.

Writes ``--out`` (default ``reports/bench/labels.json``): per configuration, rows, accuracy with its bootstrap
95% interval, the majority-label baseline, ``llm_lift``, the predicted label counts, unparseable labels, failed
rows, generate seconds, and the reasoner's LLM calls, tokens and generate seconds per question.

    python -m bench.labels --split train --sample 200 --config raw= --config calibrated='reason.rank.calibrate=labels'

The tuned model (stage ``tune_answer_scorer`` on the train file, which brings each question's own graph;
``generate.model: tuned``), measured on dev::

    python -m bench.labels --split dev --sample 0 --config tuned='tune.enabled=true;tune.split=train;generate.model=tuned'

A trained configuration's row carries the training record (questions, rows, loss per epoch, seconds, peak RSS).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from bench.common import write_result
from bench.full_split import clear_caches, run_stage, workcopy

ROOT = Path(__file__).resolve().parents[1]

STAGES = ("ingest", "validate", "index", "relplan", "tune_answer_scorer", "retrieve", "generate", "evaluate")


def one(work: Path, split: str, sample: int, seed: int, overrides: list[str]) -> dict:
    """The stages on ``sample`` rows of the ``split`` file with ``overrides``; the label metrics."""
    sets = ["data.dataset=explagraphs", f"data.input={ROOT.parent / 'shared' / 'data' / 'explagraphs'}",
            f"data.explagraphs.path={ROOT.parent / 'shared' / 'data' / 'explagraphs'}",
            f"data.explagraphs.split={split}", f"data.sample={sample}", f"data.seed={seed}", *overrides]
    runs = {st: run_stage(work, st, sets) for st in STAGES}
    seconds = {st: r["seconds"] for st, r in runs.items()}
    m = json.loads((work / "reports" / "metrics.json").read_text())
    tune = json.loads((work / "data" / "tune" / "tune.json").read_text())
    if tune.get("trained"):
        tune = {k: tune.get(k) for k in ("note", "questions", "trained_rows", "loss_per_epoch", "training_data_hash")}
        tune.update(seconds=seconds["tune_answer_scorer"], peak_rss_mib=runs["tune_answer_scorer"]["peak_rss_mib"])
    return {"tune": tune, "setup_model": (m.get("setup") or {}).get("model"), "overrides": overrides, "rows": m["questions"], "accuracy": m.get("accuracy"),
            "accuracy_ci95": (m.get("ci95") or {}).get("accuracy"), "baseline_majority": m.get("baseline_majority"),
            "baseline_first": m.get("baseline_first"), "baseline_random": m.get("baseline_random"),
            "llm_lift": m.get("llm_lift"), "label_counts": m.get("label_counts"),
            "label_unparseable": m.get("label_unparseable"), "failed": m.get("failed"),
            "generate_seconds": seconds["generate"],
            "calls_per_question": m.get("reasoner_calls_per_question"),
            "tokens_per_question": m.get("tokens_per_question"),
            "seconds_per_question": round(seconds["generate"] / max(int(m["questions"] or 0), 1), 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--split", choices=["train", "dev"], required=True)
    ap.add_argument("--sample", type=int, default=200, help="rows drawn (0 = all)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--config", action="append", default=[], metavar="NAME=OVERRIDES")
    ap.add_argument("--workdir", default="/tmp/kgrag-labels/main")
    ap.add_argument("--out", default=str(ROOT / "reports" / "bench" / "labels.json"))
    args = ap.parse_args()
    work = workcopy(Path(args.workdir))
    clear_caches(work)  # nothing from an earlier run's shards or calls
    configs = {}
    for c in args.config or ["default="]:
        name, _, ov = c.partition("=")
        configs[name] = one(work, args.split, args.sample, args.seed, [o for o in ov.split(";") if o])
        print(f"[labels] {args.split} {name}: accuracy {configs[name]['accuracy']} "
              f"{configs[name]['accuracy_ci95']} majority {configs[name]['baseline_majority']} "
              f"labels {configs[name]['label_counts']}", file=sys.stderr, flush=True)
    out = Path(args.out)
    result = json.loads(out.read_text()) if out.exists() else {}
    result.pop("machine", None), result.pop("load", None), result.pop("load_warning", None)
    result.setdefault("runs", {})[f"{args.split} sample={args.sample} seed={args.seed}"] = configs
    result["note"] = ("ExplaGraphs stance through the pipeline's stages (default params + each config's "
                      "overrides); select on a train sample, report dev once; intervals: seeded bootstrap 95%")
    write_result(str(out), result)


if __name__ == "__main__":
    main()
