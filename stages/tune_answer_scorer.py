"""Stage tune_answer_scorer: LoRA on the embedded LLM as the rank reasoner's answer scorer, from held-out labelled
questions.

With ``tune.enabled: false`` (default) the stage writes only ``data/tune/tune.json`` saying so. Enabled, it
takes the held-out labelled questions the relation-path plan learns from (``relplan.file`` or the loader's
held-out part; leak-guarded against the evaluated questions by id and text), retrieves each with
``tune.paths`` sequences (distractor candidates), trains adapters on the top layers of the packaged SmolLM2
(converted to a Hugging Face model once, into the stage's cache) to score the gold candidate above the others, and
writes ``data/tune/model.gguf``: the packaged GGUF with the adapted tensors merged, served by llama.cpp as the base
model is (``generate.model: tuned``). ``data/tune/tune.json`` records the training data's hash, the rows, the loss
per epoch and the seconds; a checkpoint in ``.kgrag_cache/tune/`` lets an interrupted run resume.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys

from stages._common import params_from_argv, timed
from kgrag import io, timings
from kgrag.experiment import Experiment, Files, own_graphs_experiment
from kgrag.kg.heldout import held_out_split
from kgrag.kg.overlap import LeakError

STAGE = "tune_answer_scorer"  # the dvc.yaml stage, its run-record folder (data/timings/STAGE) and log prefix


def rows_hash(rows: list[dict]) -> str:
    """sha256 (first 16 hex) of the training rows' content: what the tuned weights were trained on."""
    h = hashlib.sha256()
    for r in rows:
        h.update(json.dumps([r["question_id"], r["prompt"], r["candidates"], r["gold"]]).encode())
    return h.hexdigest()[:16]


def main(argv: list[str] | None = None) -> None:
    """Run the stage."""
    params = params_from_argv(__doc__, argv)
    p = params.tune
    out = io.TUNE
    with timed(STAGE, timings.stage_dir(STAGE), outputs=[out / "tune.json"]) as info:
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True, exist_ok=True)
        if not p.enabled:
            io.write_json(out / "tune.json", {"trained": False, "note": "tune.enabled is false: the base model answers"})
            print(f"[{STAGE}] not trained (tune.enabled: false)", file=sys.stderr)
            return
        import numpy as np
        import torch
        from llama_cpp import Llama
        from tqdm import tqdm

        from kgrag.gretriever.convert import convert_gguf
        from kgrag.llm.backends.llamacpp import packaged_gguf
        from kgrag.tune.gguf import write_merged
        from kgrag.tune.lora import LoraSpec, add_lora, adapter_state, deltas
        from kgrag.tune.rows import build_rows
        from kgrag.tune.train import train, usable_rows

        exp = Experiment(params, Files.of())
        log = lambda s: print(f"[{STAGE}] {s}", file=sys.stderr)  # noqa: E731
        evaluated = io.VALIDATED / "questions.parquet"
        try:
            # own: the tables of held-out questions that bring their own graphs (ExplaGraphs' train file, a RoG file)
            own, qs, note = held_out_split(params, exp.kg, evaluated=evaluated, what="tune", split=p.split)
            if own is not None:  # those graphs are not in the evaluated KG: rows come from a store of the split's own
                exp = own_graphs_experiment(exp, own, io.CACHE / "tune", log=log)
                log(f"{note}: the questions' own graphs ({exp.kg.num_triples} triples) stored for retrieval")
        except (LeakError, ValueError) as e:
            raise SystemExit(f"{STAGE}: {e}") from None
        qs = [q for q in qs if q.answer_ids or q.choices]
        if not qs:
            raise SystemExit(f"{STAGE}: no labelled held-out question to train on ({note}); give relplan.file or set "
                             "tune.enabled: false")
        pick = np.sort(np.random.default_rng(p.seed).choice(len(qs), size=min(p.questions, len(qs)), replace=False))
        qs = [qs[i] for i in pick]
        base = packaged_gguf()
        tokenizer = Llama(model_path=str(base), vocab_only=True, verbose=False)
        rows = build_rows(exp=exp, questions=qs, tokenizer=tokenizer, paths=p.paths,
                          max_candidates=p.max_candidates, log=log)
        if not usable_rows(rows):  # training would leave the base model as it is, under the tuned model's name
            raise SystemExit(f"{STAGE}: none of the {len(rows)} training questions gave a row to learn from (the gold "
                             f"answer among at least two candidates, with tune.paths: {p.paths}); give more "
                             "labelled questions or set tune.enabled: false")
        data_hash = rows_hash(rows)
        hf = io.CACHE / "tune" / f"hf-{hashlib.sha256(str(base).encode()).hexdigest()[:12]}"
        if not (hf / "model.safetensors").exists():
            convert_gguf(gguf=base, out_dir=hf)
        torch.set_num_threads(p.threads)
        torch.manual_seed(p.seed)
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(hf, dtype=torch.float32)
        spec = LoraSpec(layers=p.layers, targets=tuple(p.targets), r=p.r, alpha=p.alpha)
        adapters = add_lora(model, spec, p.seed)
        bar = tqdm(total=p.epochs * len(usable_rows(rows)),
                   desc=f"[{STAGE}] training", unit="q", file=sys.stderr)

        def progress(i, n, loss):
            bar.n = i
            bar.set_postfix(loss=f"{loss:.3f}")
            bar.refresh()
        ckpt = io.CACHE / "tune" / f"checkpoint-{data_hash}.pt"
        history = train(model=model, adapters=adapters, rows=rows, epochs=p.epochs, lr=p.lr, negatives=p.negatives,
                        seed=p.seed, max_prompt=p.max_prompt, checkpoint=ckpt, checkpoint_every=p.checkpoint_every,
                        progress=progress)
        bar.close()
        torch.save(adapter_state(adapters), out / "adapters.pt")
        merged = write_merged(base=base, out=out / "model.gguf", deltas=deltas(adapters),
                              name=f"SmolLM2-135M-Instruct tuned {data_hash}")
        record = {"trained": True, "note": note, "questions": len(qs), "training_data_hash": data_hash,
                  "base": base.name, "lora": {"layers": p.layers, "targets": list(p.targets), "r": p.r,
                                              "alpha": p.alpha},
                  "loss_per_epoch": history["loss_per_epoch"], "trained_rows": history["trained_rows"],
                  "rows": history["rows"], **merged}
        io.write_json(out / "tune.json", record)
        info.update({**record, "train_seconds": history["seconds"]})
        log(f"trained on {history['trained_rows']} rows, loss per epoch {history['loss_per_epoch']}")


if __name__ == "__main__":
    main()
