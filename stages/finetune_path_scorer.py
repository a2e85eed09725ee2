"""Stage finetune_path_scorer (finetune/dvc.yaml): fine-tune the sentence-transformer that scores LEGO's paths
(the paper's "Fine-tuned ST") on (question, path) triplets of a held-out split.

``data/finetune`` (model, per-epoch history) and ``reports/finetune.json`` hold what inputs and params
determine; the wall times (the stage's seconds, each epoch's) go to the run record
``data/timings/finetune_path_scorer/timing.json``, no DVC output (``kgrag.timings``)."""

from __future__ import annotations

import shutil
import sys

from stages._common import params_from_argv, timed
from kgrag import io, schema as S
from kgrag.retrieval.finetune import finetune_st, training_triplets
from kgrag.registry import LOADERS
from kgrag.kg.overlap import LeakError, guard
from kgrag.kg.store import KGStore, questions_on

STAGE = "finetune_path_scorer"  # the finetune/dvc.yaml stage, its run-record folder (data/timings/STAGE), log prefix


def main(argv: list[str] | None = None) -> None:
    """Run the stage."""
    params = params_from_argv(__doc__, argv)
    p, d = params.finetune, params.data
    outputs = [io.REPORTS / "finetune.json", io.FINETUNE / "history.json", io.ST_MODEL / "model.safetensors"]
    with timed(STAGE, io.TIMINGS / STAGE, outputs=outputs) as info:
        kg = KGStore(io.VALIDATED / "kg.duckdb")
        lp = d.loader_params()
        note = ""
        if getattr(type(lp), "SPLITS_ARE_DISJOINT", False):
            tabs = LOADERS.get(d.dataset).impl(**{**lp.model_dump(), "split": p.split, "sample": p.questions,
                                                  "seed": p.seed})
            qs = questions_on(kg, tabs)  # ids of the loader's own numbering → the validated KG's, by name
            ev = io.read_parquet(io.VALIDATED / "questions.parquet").select([S.QUESTION_ID, S.TEXT])
            try:  # the leak guard: no evaluated question (by id or by text) trains the scorer
                keep, leak = guard(train_ids=[q.question_id for q in qs], train_texts=[q.text for q in qs],
                                   eval_ids=ev[S.QUESTION_ID].to_pylist(), eval_texts=ev[S.TEXT].to_pylist(),
                                   what=f"finetune ({p.split} split)")
            except LeakError as e:
                raise SystemExit(f"{STAGE}: {e}") from None
            qs = [q for q, k in zip(qs, keep) if k]
            note = f"{leak['left_out_same_text']} with an evaluated question's text left out" if leak[
                "left_out_same_text"] else ""
        else:  # nothing held out to train on: the base model is written as is, so the DAG still runs
            qs = []
            note = f"not trained: the {d.dataset} loader has no question file apart from the evaluated one"
            print(f"[{STAGE}] {note}", file=sys.stderr)
        n_val = int(round(p.val_fraction * len(qs)))
        val_q, train_q = qs[:n_val], qs[n_val:]
        hops = getattr(lp, "hops", params.retrieve.hops)
        kw = dict(kg=kg, hops=max(hops) if isinstance(hops, list) else hops, max_edges=p.max_neighbourhood_edges,
                  per_question=p.per_question, seed=p.seed)
        train, val = training_triplets(questions=train_q, **kw), training_triplets(questions=val_q, **kw)
        print(f"[{STAGE}] {len(train)} training / {len(val)} validation triplets from {len(qs)} "
              f"{p.split} questions", file=sys.stderr)
        model, history, epoch_seconds = finetune_st(base_model=p.base_model, train=train, val=val, margin=p.margin,
                                     epochs=p.epochs, batch_size=p.batch_size, lr=p.lr, warmup=p.warmup,
                                     seed=p.seed, log=lambda row: print(f"[{STAGE}] {row}", file=sys.stderr))
        shutil.rmtree(io.ST_MODEL, ignore_errors=True)
        model.save(str(io.ST_MODEL))
        num = lambda x: None if x != x else x  # noqa: E731 (NaN, e.g. no validation pairs → null)
        summary = {"note": note, "base_model": p.base_model, "seed": p.seed, "questions": len(qs),
                   "train_triplets": len(train), "val_triplets": len(val),
                   "val_pair_accuracy_before": num(history[0]["pair_accuracy"]),
                   "val_pair_accuracy_after": num(history[-1]["pair_accuracy"]),
                   "val_gap_before": num(history[0]["mean_gap"]), "val_gap_after": num(history[-1]["mean_gap"])}
        io.write_json(io.FINETUNE / "history.json", history)
        io.write_json(io.REPORTS / "finetune.json", summary)
        info.update(summary, epoch_seconds=epoch_seconds)


if __name__ == "__main__":
    main()
