"""Benchmark: seconds per G-Retriever training step, per validation / test row, and the full-run time they imply.

A preset's model (``params.yaml`` ``gretriever`` sizes, the converted SmolLM2 of stage convert_llm) on the real
data of a dataset: ``--steps`` optimizer steps on the first batches of epoch 1's row order, then the target loss
and greedy generation of ``--eval-rows`` validation rows. Wall and process CPU seconds are both recorded, with
the load average, because the machine may be shared: on a loaded machine the CPU seconds of a 1-thread run
bound what a dedicated core needs. The extrapolation is setup + epochs × (train steps + validation) + test,
with the configured epochs (early stopping can only shorten it). Writes ``reports/bench/gretriever.json``
(one entry per dataset / preset / threads, merged into the file).

Needs ``dvc repro gretriever/dvc.yaml:convert_llm`` (and for MetaQA the default pipeline's index).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np

from bench.common import machine, write_result

from kgrag.env import setup
from kgrag.params import load

OUT = "reports/bench/gretriever.json"


def main() -> None:
    """Run the benchmark."""
    setup()
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dataset", default="explagraphs", choices=["explagraphs", "metaqa"])
    ap.add_argument("--preset", default="g_retriever")
    ap.add_argument("--steps", type=int, default=8, help="optimizer steps timed (after one warm-up step)")
    ap.add_argument("--eval-rows", type=int, default=16, help="validation rows scored and generated")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: gretriever.train.threads)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a param")
    args = ap.parse_args()

    import torch

    from kgrag.gretriever.data import graph_arrays
    from kgrag.gretriever.module import build_model
    from kgrag.gretriever.presets import get_preset, model_config
    from kgrag.gretriever.run import load_splits
    from kgrag.gretriever.train import batches, epoch_order, mean_loss, optimizer_step, predict

    params = load("params.yaml", args.set)
    g = params.gretriever
    threads = args.threads or g.train.threads
    torch.set_num_threads(threads)
    p = get_preset(args.preset)
    load0 = os.getloadavg()
    t0 = time.perf_counter()
    splits, embedder, _ = load_splits(dataset=args.dataset, params=params, retrieval=p.retrieval)
    graphs = None
    if p.graph_token:
        graphs = {e.example_id: graph_arrays(e.triples, embedder) for rows in splits.values() for e in rows}
    model = build_model(model_config(p, g, embed_model=params.index.model, node_dim=embedder.dim))
    setup_s = time.perf_counter() - t0
    params_t = [x for x in model.parameters() if x.requires_grad]
    opt = torch.optim.AdamW(params_t, lr=g.train.lr, weight_decay=g.train.weight_decay)
    train = splits["train"]
    chunks = batches(epoch_order(len(train), seed=g.train.seed, epoch=0), g.train.batch_size)
    walls, cpus, tokens = [], [], []
    model.train()
    for k, c in enumerate(chunks[: args.steps + 1]):
        ex = [train[j] for j in c]
        gr = [graphs[e.example_id] for e in ex] if graphs is not None else None
        w, cp = time.perf_counter(), time.process_time()
        optimizer_step(model=model, opt=opt, params=params_t, groups=[(ex, gr)], lr=g.train.lr,
                       grad_clip=g.train.grad_clip)
        if k:  # the first step warms allocators and caches
            walls.append(time.perf_counter() - w)
            cpus.append(time.process_time() - cp)
            tokens.append(int(model.assemble(ex, gr, with_labels=True)[1].sum()))
        print(f"step {k}: {time.perf_counter() - w:.1f}s wall", file=sys.stderr, flush=True)
    val = splits["val"][: args.eval_rows]
    w, cp = time.perf_counter(), time.process_time()
    mean_loss(model, val, graphs, batch_size=g.train.eval_batch_size)
    loss_row = ((time.perf_counter() - w) / len(val), (time.process_time() - cp) / len(val))
    w, cp = time.perf_counter(), time.process_time()
    predict(model, val, graphs, batch_size=g.train.eval_batch_size)
    gen_row = ((time.perf_counter() - w) / len(val), (time.process_time() - cp) / len(val))
    load1 = os.getloadavg()

    steps_per_epoch = math.ceil(math.ceil(len(train) / g.train.batch_size) / g.train.grad_steps)

    def full(step_s: float, loss_s: float, gen_s: float) -> dict:
        val_s = len(splits["val"]) * ((loss_s if g.train.val_loss else 0.0) + (gen_s if g.train.val_generate else 0.0))
        epoch = steps_per_epoch * step_s + val_s
        return {"epoch_minutes": round(epoch / 60, 1), "val_minutes_per_epoch": round(val_s / 60, 1),
                "test_minutes": round(len(splits["test"]) * gen_s / 60, 1),
                "full_run_minutes": round((setup_s + g.train.epochs * epoch + len(splits["test"]) * gen_s) / 60, 1)}

    key = f"{args.dataset}-{args.preset}-threads{threads}-{g.train.dtype}-{g.train.attention}"
    entry = {
        "dataset": args.dataset, "preset": args.preset, "threads": threads, "dtype": g.train.dtype, "attention": g.train.attention,
        "batch_size": g.train.batch_size, "epochs": g.train.epochs, "steps_timed": len(walls),
        "tokens_per_step": float(np.mean(tokens)), "sizes": {k: len(v) for k, v in splits.items()},
        "steps_per_epoch": steps_per_epoch, "setup_seconds": round(setup_s, 1),
        "step_seconds_wall": round(float(np.mean(walls)), 2), "step_seconds_cpu": round(float(np.mean(cpus)), 2),
        "val_loss_seconds_per_row": {"wall": round(loss_row[0], 3), "cpu": round(loss_row[1], 3)},
        "generate_seconds_per_row": {"wall": round(gen_row[0], 3), "cpu": round(gen_row[1], 3)},
        "extrapolated_wall": full(float(np.mean(walls)), loss_row[0], gen_row[0]),
        # CPU seconds of the process: at threads=1 this is what one dedicated core needs
        "extrapolated_cpu": full(float(np.mean(cpus)), loss_row[1], gen_row[1]),
        "load_average": {"start": [round(x, 2) for x in load0], "end": [round(x, 2) for x in load1]},
        "machine": machine(), "date": time.strftime("%Y-%m-%d %H:%M"),
    }
    old = json.loads(Path(OUT).read_text()) if Path(OUT).exists() else {}
    old[key] = entry
    write_result(OUT, old)
    print(json.dumps(entry, indent=2))


if __name__ == "__main__":
    main()
