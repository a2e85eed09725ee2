"""Stage train_gretriever (gretriever/dvc.yaml): train a G-Retriever preset on one dataset, test it, write its reports.

``python -m stages.train_gretriever --dataset explagraphs --preset g_retriever``. Checkpoints go to
``data/gretriever/{dataset}-{preset}/`` (resumed after an interruption), reports (summary, per-epoch history
with seeds, test predictions, learning-curve PNG) to ``reports/gretriever/{dataset}-{preset}/``; with
``--tag T`` both go one level down, in a ``T/`` folder (runs outside the DVC outputs, e.g. budgeted comparisons).
Neither holds a wall time: what the run took (seconds of setup / training / test, per epoch, resumptions) is
its run record, ``data/timings/gretriever/[T/]{dataset}-{preset}/timing.json`` (``kgrag.timings``; no DVC
output), which ``stages.gretriever_table`` reads for the minutes column.
"""

from __future__ import annotations

import argparse
import sys

from stages._common import args_and_params, timed
from kgrag import io
from kgrag.gretriever.presets import PRESETS
from kgrag.gretriever.report import plot_history
from kgrag.gretriever.run import DATASETS, run_preset

STAGE = "train_gretriever"  # the stage of gretriever/dvc.yaml (train_gretriever-DATASET@PRESET), its log prefix


def main(argv: list[str] | None = None) -> None:
    """Run the stage."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--dataset", required=True, choices=DATASETS)
    ap.add_argument("--preset", required=True, choices=list(PRESETS))
    ap.add_argument("--limit", default="", help="smoke runs only: cap rows per split, e.g. train=8,val=4,test=4")
    ap.add_argument("--tag", default="", help="run outside the DVC outputs, in data/gretriever/TAG/ and "
                    "reports/gretriever/TAG/ (e.g. a budgeted comparison with -S gretriever.train.epochs=1)")
    args, params = args_and_params(ap, argv)
    name = f"{args.dataset}-{args.preset}"
    sub = [args.tag] if args.tag else []
    ckpt, rep = io.DATA.joinpath("gretriever", *sub, name), io.REPORTS.joinpath("gretriever", *sub, name)
    record = io.TIMINGS.joinpath("gretriever", *sub, name)
    log = lambda m: print(f"[{STAGE} {name}] {m}", file=sys.stderr, flush=True)  # noqa: E731
    files = [rep / "summary.json", rep / "history.json", rep / "predictions.json", ckpt / "config.json"]
    with timed(STAGE, record, {"dataset": args.dataset, "preset": args.preset}, outputs=files) as info:
        limit = {k: int(v) for k, v in (x.split("=") for x in args.limit.split(",") if x)}
        out = run_preset(dataset=args.dataset, preset=args.preset, params=params, ckpt_dir=ckpt, log=log,
                         limit=limit or None, timing_dir=record)
        s = out["summary"]
        io.write_json(rep / "summary.json", s)
        io.write_json(rep / "history.json", {"seeds": s["seeds"], "epochs": out["history"],
                                             "best_epoch": s["best_epoch"], "train_config": s["train_config"]})
        io.write_json(rep / "predictions.json", out["predictions"])
        if out["history"]:
            plot_history(out["history"], rep / "curve.png", title=f"G-Retriever {args.preset} on {args.dataset}")
        info.update(test=s["test"], epochs_run=s["epochs_run"], **out["timing"])
        log(f"test {s['test']} in {out['timing']['run_seconds']} s")


if __name__ == "__main__":
    main()
