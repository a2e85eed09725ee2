"""Benchmark (a check chosen on train): does another ``tune.lr`` let the LoRA scorer learn ExplaGraphs stance?

``bench/labels.py`` measured the tuned scorer on ExplaGraphs dev at 0.500 (every row ``support``), its training loss
per epoch above the 0.693 of even odds. This check stays on the train file (dev is the reported split): rows are
built as stage tune_answer_scorer builds them (``kgrag.tune.rows.build_rows``, the train file's own graphs, 900
seeded train questions), the adapters train on the first 600 for one epoch with the stage's other params, and the
tuned scores are measured on the other 300 (accuracy of the better-scored label, and the share answered
``support``). The base model's row comes first.

It runs in the work copy that ``bench/labels.py`` made (``--workdir``, default ``/tmp/kgrag-labels/main``: its
``data/validated`` holds ExplaGraphs dev, which the leak guard compares the train questions with), so run
``python -m bench.labels --split dev ...`` there first. Writes ``reports/bench/label_tune_check.json``.

    python -m bench.label_tune_check --lr 3e-4 3e-5
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

OUT = ROOT / "reports" / "bench" / "label_tune_check.json"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lr", type=float, nargs="+", default=[3e-4, 3e-5])
    ap.add_argument("--workdir", default="/tmp/kgrag-labels/main")
    ap.add_argument("--rows", default="/tmp/kgrag-label-tune-rows.json", help="the built rows (JSON), kept for a rerun")
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args()
    import torch

    from stages._common import params_from_argv

    os.chdir(args.workdir)
    data = ROOT.parent / "shared" / "data" / "explagraphs"
    params = params_from_argv("label_tune_check", [
        "--set", "data.dataset=explagraphs", "--set", f"data.input={data}", "--set", f"data.explagraphs.path={data}",
        "--set", "data.explagraphs.split=dev", "--set", "data.sample=0", "--set", "tune.enabled=true",
        "--set", "tune.split=train"])
    if not os.path.exists(args.rows):
        from llama_cpp import Llama

        from kgrag import io
        from kgrag.experiment import Experiment, Files, own_graphs_experiment
        from kgrag.kg.heldout import held_out_split
        from kgrag.llm.backends.llamacpp import packaged_gguf
        from kgrag.tune.rows import build_rows

        exp = Experiment(params, Files.of())
        own, qs, _ = held_out_split(params, exp.kg, evaluated=io.VALIDATED / "questions.parquet", what="tune",
                                    split="train")
        exp = own_graphs_experiment(exp, own, io.CACHE / "tune", log=print)
        qs = [q for q in qs if q.answer_ids or q.choices]
        qs = [qs[i] for i in np.random.default_rng(0).permutation(len(qs))[:900]]
        tok = Llama(model_path=str(packaged_gguf()), vocab_only=True, verbose=False)
        rows = build_rows(exp=exp, questions=qs, tokenizer=tok, paths=2, max_candidates=8, log=print)
        with open(args.rows, "w") as f:  # JSON, not a pickle: reading it back runs no code
            json.dump(rows, f, default=lambda o: o.tolist() if hasattr(o, "tolist") else int(o))
    with open(args.rows) as f:
        rows = json.load(f)
    from transformers import AutoModelForCausalLM

    from kgrag.tune.lora import LoraSpec, add_lora
    from kgrag.tune.train import scores_of, train

    train_rows, held = rows[:600], rows[600:]
    p = params.tune

    def measured(model) -> list[float]:
        """[accuracy on the held-out rows, share answered support]"""
        s = scores_of(model, held, p.max_prompt)
        hit = np.array([r["gold"][int(np.argmax(x))] for r, x in zip(held, s)], float)
        support = np.mean([r["names"][int(np.argmax(x))] == "support" for r, x in zip(held, s)])
        return [round(float(hit.mean()), 4), round(float(support), 3)]

    torch.set_num_threads(p.threads)
    hf = next(Path(".kgrag_cache/tune").glob("hf-*"))  # tune_answer_scorer's conversion of the packaged GGUF
    from bench._machine import provenance

    result: dict = {"run": provenance()}
    for lr in args.lr:
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_pretrained(hf, dtype=torch.float32)
        adapters = add_lora(model, LoraSpec(layers=p.layers, targets=tuple(p.targets), r=p.r, alpha=p.alpha), 0)
        if "base" not in result:
            model.eval()
            result["base"] = measured(model)
            print("base", result["base"], flush=True)
        t0 = time.time()
        h = train(model=model, adapters=adapters, rows=train_rows, epochs=1, lr=lr, negatives=p.negatives, seed=0,
                  max_prompt=p.max_prompt, checkpoint=Path(f"/tmp/label-tune-check-{lr}.pt"), checkpoint_every=100000)
        result[str(lr)] = {"held_out": measured(model), "loss": h["loss_per_epoch"], "seconds": round(time.time() - t0)}
        print(lr, result[str(lr)], flush=True)
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
