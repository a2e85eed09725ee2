"""One G-Retriever run: a preset trained (or not) on one dataset and scored on its test split.

``run_preset`` reads the data (ExplaGraphs from its TSV files; MetaQA over the default pipeline's KG and
index, subgraphs retrieved here), builds the graph arrays and the model, trains with checkpoints in
``ckpt_dir`` (resuming from them), restores the best validation epoch and generates the test answers.
The caller writes the returned summary, history and predictions (what data, config and seeds determine)
and, apart from them, the run's ``timing`` (wall times, resumptions: a run record, no DVC output).
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any, Callable

from kgrag.gretriever.data import TextEmbedder, graph_arrays
from kgrag.gretriever.datasets import explagraphs_examples, index_vectors, metaqa_examples, scores
from kgrag.gretriever.presets import get_preset, model_config
from kgrag.gretriever.train import TrainConfig, predict, train
from kgrag.gretriever.model import load_best, resolve_dtype
from kgrag.gretriever.params import GRetrieverParams

def _explagraphs_splits(*, params: Any, retrieval: str, db_path: str | Path, index_dir: str | Path):
    e = params.gretriever.explagraphs
    splits = explagraphs_examples(path=e.path, ratios=e.ratios, seed=e.split_seed)
    for split, cap in (("train", e.train_rows), ("val", e.val_rows)):
        if cap:
            splits[split] = splits[split][:cap]
    return splits, TextEmbedder(params.index.model), {"source": e.path, "split_seed": e.split_seed,
                                                      "ratios": list(e.ratios), "train_rows": e.train_rows,
                                                      "val_rows": e.val_rows}


def _metaqa_splits(*, params: Any, retrieval: str, db_path: str | Path, index_dir: str | Path):
    from kgrag.index.embed import EmbeddingIndex
    from kgrag.kg.store import KGStore

    if params.data.dataset != "metaqa":
        raise ValueError(f"the MetaQA run reads the default pipeline's KG, but data.dataset is "
                         f"{params.data.dataset!r}; set it to metaqa and run `dvc repro index`")
    kg = KGStore(db_path)  # the DAG's validated KG (data/validated) and its index (data/index)
    index = EmbeddingIndex.load(index_dir, params.index.model, kg)
    m = params.gretriever.metaqa
    lp = params.data.loader_params()  # MetaQA's path and hops (data.path, data.hops)
    splits = metaqa_examples(kg=kg, index=index, retrieve=params.retrieve, path=lp.path,
                             hops=lp.hops, train=m.train_questions, val=m.val_questions,
                             test=m.test_questions, seed=m.seed, mode=retrieval)
    cache = getattr(index.entity_vectors, "cache", None)  # a lazy index: names through its vector cache
    emb = TextEmbedder(params.index.model, preset=index_vectors(kg=kg, index=index),
                       encode=None if cache is None else cache.get)
    return splits, emb, {"source": lp.path, "hops": lp.hops, "seed": m.seed, "retrieval": retrieval}


#: dataset -> how its train / val / test examples are read (ExplaGraphs through the explagraphs loader, its
#: whole per-row graphs; MetaQA over the default DAG's KG and index, subgraphs by the retrieve params)
SPLITS: dict[str, Callable[..., tuple[dict[str, list], TextEmbedder, dict[str, Any]]]] = {
    "explagraphs": _explagraphs_splits,
    "metaqa": _metaqa_splits,
}
DATASETS = tuple(SPLITS)


def load_splits(*, dataset: str, params: Any, retrieval: str, db_path: str | Path = "data/validated/kg.duckdb",
                index_dir: str | Path = "data/index") -> tuple[dict[str, list], TextEmbedder, dict[str, Any]]:
    """(train / val / test examples, the text embedder for graph features, what was read)."""
    if dataset not in SPLITS:
        raise ValueError(f"unknown dataset {dataset!r}; valid choices: {', '.join(DATASETS)}")
    return SPLITS[dataset](params=params, retrieval=retrieval, db_path=db_path, index_dir=index_dir)


def run_key(*parts: Any) -> str:
    """Hash identifying a run (config, data, settings): a checkpoint of another key is not resumed."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def run_preset(*, dataset: str, preset: str, params: Any, ckpt_dir: str | Path, log: Callable[[str], None] = print,
               stop_after_steps: int | None = None, limit: dict[str, int] | None = None,
               timing_dir: str | Path | None = None, **paths: Any) -> dict[str, Any]:
    """Train (unless an inference-only preset) and test ``preset`` on ``dataset``.

    ``limit`` caps the rows of each split (``{"train": 8}``), for smoke runs. Returns ``summary`` (test
    metrics, sizes, seeds), ``history`` (per epoch) and ``predictions`` (test rows), which hold no wall time,
    and ``timing``: ``run_seconds`` (setup, train, test, total, process_cpu), ``resumed``, ``epoch_seconds``
    and ``test_ms_per_row``. ``timing_dir`` keeps the training's run record (``progress.json``, read back
    when a run resumes: ``train(record=...)``); the train_gretriever stage's is under ``data/timings/``.
    """
    import torch

    from kgrag.gretriever.module import build_model

    p = get_preset(preset)
    g: GRetrieverParams = params.gretriever
    torch.set_num_threads(g.train.threads)
    t0 = time.perf_counter()
    c0 = time.process_time()
    splits, embedder, data_info = load_splits(dataset=dataset, params=params, retrieval=p.retrieval, **paths)
    if limit:
        splits = {k: v[: limit[k]] if k in limit else v for k, v in splits.items()}
    log(f"{dataset}: " + ", ".join(f"{k} {len(v)}" for k, v in splits.items()))
    graphs = None
    if p.graph_token:
        graphs = {e.example_id: graph_arrays(e.triples, embedder) for rows in splits.values() for e in rows}
    node_dim = embedder.dim
    cfg = model_config(p, g, embed_model=params.index.model, node_dim=node_dim)
    model = build_model(cfg)
    t_setup = time.perf_counter() - t0
    tc = TrainConfig(lr=g.train.lr, min_lr=g.train.min_lr, weight_decay=g.train.weight_decay,
                     batch_size=g.train.batch_size, grad_steps=g.train.grad_steps, epochs=g.train.epochs,
                     warmup_epochs=g.train.warmup_epochs, patience=g.train.patience, grad_clip=g.train.grad_clip,
                     early_stop=g.train.early_stop, val_loss=g.train.val_loss, val_generate=g.train.val_generate,
                     val_generate_rows=g.train.val_generate_rows,
                     eval_batch_size=g.train.eval_batch_size, checkpoint_every=g.train.checkpoint_every,
                     seed=g.train.seed)
    key = run_key(cfg.to_dict(), tc, dataset, data_info, [e.example_id for e in splits["train"]],
                  [e.example_id for e in splits["val"]])
    state, best = None, None
    score = lambda ex, preds: scores(ex, preds)["score"]  # noqa: E731
    if p.train and cfg.trains:
        state = train(model=model, train_rows=splits["train"], val_rows=splits["val"], graphs=graphs, cfg=tc,
                      out_dir=ckpt_dir, score=score, run_key=key, log=log, stop_after_steps=stop_after_steps,
                      record=Path(timing_dir) / "progress.json" if timing_dir is not None else None)
        if stop_after_steps is not None and not state["done"]:
            return {"summary": None, "history": state["history"], "predictions": [], "state": state, "timing": None}
        best = load_best(model, ckpt_dir)
    # written for every run (an inference-only one has no weights but still a DVC output folder)
    Path(ckpt_dir).mkdir(parents=True, exist_ok=True)
    Path(ckpt_dir, "config.json").write_text(json.dumps(
        {"model": cfg.to_dict(), "preset": preset, "dataset": dataset, "run_key": key,
         "trained": best is not None}, indent=2) + "\n")
    t_test = time.perf_counter()
    preds = predict(model, splits["test"], graphs, batch_size=g.train.eval_batch_size,
                    log=lambda m: log(f"test {m}"))
    test_s = time.perf_counter() - t_test
    test = scores(splits["test"], preds)
    by_id = {e.example_id: e for e in splits["test"]}
    for r in preds:
        r["gold"] = list(by_id[r["id"]].answers)
    summary = {
        "dataset": dataset, "preset": preset, "paper_row": p.row, "table": p.table, "test": test,
        "sizes": {k: len(v) for k, v in splits.items()}, "data": data_info, "model": cfg.to_dict(),
        "train_config": tc.__dict__, "trainable_parameters": int(sum(x.numel() for x in model.parameters()
                                                                     if x.requires_grad)),
        "seeds": {"train": g.train.seed, "data": data_info.get("split_seed", data_info.get("seed"))},
        "best_epoch": best.get("epoch") if best else None, "val_at_best": (
            {"loss": best.get("val_loss"), "score": best.get("val_score")} if best else None),
        "epochs_run": len(state["history"]) if state else 0, "threads": g.train.threads, "run_key": key,
        "dtype": resolve_dtype(g.train.dtype),  # what `auto` chose on this machine
    }
    timing = {
        "run_seconds": {"setup": round(t_setup, 1), "train": round(state["seconds"], 1) if state else 0.0,
                        "test": round(test_s, 1), "total": round(time.perf_counter() - t0, 1),
                        "process_cpu": round(time.process_time() - c0, 1)},
        "resumed": state["resumed"] if state else 0, "epoch_seconds": state["epoch_seconds"] if state else [],
        "test_ms_per_row": round(1000 * test_s / len(preds), 1) if preds else None,
    }
    return {"summary": summary, "history": state["history"] if state else [], "predictions": preds, "state": state,
            "timing": timing}
