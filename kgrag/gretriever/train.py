"""Training loop and evaluation of a G-Retriever model.

AdamW on the trainable parameters only; the learning rate warms up linearly over ``warmup_epochs`` and then
decays along a half cycle of a cosine to ``min_lr`` (G-Retriever's schedule, stepped every optimizer step);
gradient-norm clipping; one validation pass per epoch (target loss over every validation row, and the task
score by greedy generation, optionally on the first ``val_generate_rows`` of them); early stopping when the
validation criterion (by default the loss) has not improved for ``patience`` epochs.

Checkpoints: ``last.pt`` (trainable weights, optimizer, position in the run, history) every
``checkpoint_every`` optimizer steps and at each epoch's end, ``best.pt`` (weights of the best validation
epoch and the model config) whenever validation improves. ``train`` given a folder with a ``last.pt`` of the
same run (same config digest) resumes from it: the order of an epoch's rows and the dropout noise of each
step are functions of (seed, epoch, step), so a resumed run takes the same steps as an uninterrupted one.
The checkpoints (DVC outputs of the train_gretriever stages) hold no wall time: what the run took (seconds, resumptions,
each epoch's train / validation seconds) is a run record, a JSON file of its own (``train(record=...)``).
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from kgrag.gretriever.data import Example, GraphArrays


@dataclass(frozen=True)
class TrainConfig:
    """Optimisation settings (defaults: G-Retriever, Appendix B.1)."""

    lr: float = 1e-5
    min_lr: float = 5e-6
    weight_decay: float = 0.05
    batch_size: int = 4
    grad_steps: int = 1  # batches accumulated per optimizer step
    epochs: int = 10
    warmup_epochs: float = 1.0
    patience: int = 2
    grad_clip: float = 0.1
    early_stop: str = "loss"  # loss (validation target loss) | score (validation task score)
    val_loss: bool = True  # compute the validation target loss every epoch
    val_generate: bool = True  # score validation rows by generation every epoch
    val_generate_rows: int = 0  # the first this many validation rows are generated (0 = all)
    eval_batch_size: int = 16
    checkpoint_every: int = 50  # optimizer steps between mid-epoch checkpoints (0 = epoch ends only)
    seed: int = 0


def lr_at(step: float, *, steps_per_epoch: int, cfg: TrainConfig) -> float:
    """Learning rate at optimizer step ``step``: linear warm-up, then half-cycle cosine to ``min_lr``.

    References
    ----------
    He et al., G-Retriever (2024), Appendix B.1 ("the learning rate decays with a half-cycle cosine decay
    after the warm-up period"); Loshchilov and Hutter, SGDR (2017).
    """
    epoch = step / max(steps_per_epoch, 1)
    if epoch < cfg.warmup_epochs:
        return cfg.lr * epoch / cfg.warmup_epochs
    span = max(cfg.epochs - cfg.warmup_epochs, 1e-9)
    progress = min((epoch - cfg.warmup_epochs) / span, 1.0)
    return cfg.min_lr + (cfg.lr - cfg.min_lr) * 0.5 * (1.0 + math.cos(math.pi * progress))


def epoch_order(n: int, *, seed: int, epoch: int) -> np.ndarray:
    """The order in which epoch ``epoch`` visits the ``n`` training rows."""
    return np.random.default_rng([seed, epoch]).permutation(n)


def batches(order: np.ndarray, size: int) -> list[np.ndarray]:
    """Consecutive chunks of ``order`` of at most ``size`` rows."""
    return [order[i: i + size] for i in range(0, len(order), size)]


def _save(obj: Any, path: Path) -> None:
    import torch

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def mean_loss(model: Any, examples: Sequence[Example], graphs: dict[str, GraphArrays] | None, *,
              batch_size: int) -> float:
    """Mean target loss over ``examples`` (no gradients), weighted by batch."""
    import torch

    if not examples:
        return float("nan")
    was = model.training
    model.eval()
    tot, n = 0.0, 0
    with torch.no_grad():
        for b in batches(np.arange(len(examples)), batch_size):
            ex = [examples[i] for i in b]
            gr = [graphs[e.example_id] for e in ex] if graphs is not None else None
            tot += float(model.loss(ex, gr)) * len(ex)
            n += len(ex)
    model.train(was)
    return tot / n


def predict(model: Any, examples: Sequence[Example], graphs: dict[str, GraphArrays] | None, *,
            batch_size: int, max_new_tokens: int | None = None, log: Callable[[str], None] | None = None
            ) -> list[dict[str, Any]]:
    """Greedy generations of ``examples``: one dict per example (id, prediction, token counts); no wall time
    (the caller times the call)."""
    out = []
    for k, b in enumerate(batches(np.arange(len(examples)), batch_size)):
        ex = [examples[i] for i in b]
        gr = [graphs[e.example_id] for e in ex] if graphs is not None else None
        res = model.generate(ex, gr, max_new_tokens=max_new_tokens)
        for e, (text, n_in, n_out) in zip(ex, res):
            out.append({"id": e.example_id, "prediction": text, "tokens_in": n_in, "tokens_out": n_out})
        if log:
            log(f"predict {len(out)}/{len(examples)}")
    return out


def optimizer_step(*, model: Any, opt: Any, params: Sequence[Any],
                   groups: Sequence[tuple[Sequence[Example], Sequence[GraphArrays] | None]], lr: float,
                   grad_clip: float) -> tuple[float, int]:
    """One optimizer step over the batches of ``groups`` (gradients accumulated, weighted by rows):
    backward, gradient-norm clipping at ``grad_clip`` (0 = none), AdamW step at ``lr``.
    Returns (sum of batch losses × rows, rows)."""
    import torch

    opt.zero_grad(set_to_none=True)
    n_rows = sum(len(ex) for ex, _ in groups)
    loss_sum = 0.0
    for ex, gr in groups:
        loss = model.loss(ex, gr)
        (loss * len(ex) / n_rows).backward()
        loss_sum += float(loss.detach()) * len(ex)
    for g in opt.param_groups:
        g["lr"] = lr
    if grad_clip > 0:
        torch.nn.utils.clip_grad_norm_(params, grad_clip)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss_sum, n_rows


def _resume(last: Path, best_path: Path, *, model: Any, opt: Any, state: dict[str, Any], run: dict[str, Any],
            run_key: str, record: str | Path | None, log: Callable[[str], None]) -> tuple[dict, dict]:
    """The run state and record from ``last.pt`` when it is this run's (the model and optimizer loaded from it; the
    record from ``record`` when it is this run's, else from the checkpoint's own wall times), else the fresh
    ones, and ``best.pt`` of the other run removed."""
    import torch

    ck = torch.load(last, map_location="cpu", weights_only=True)  # tensors and plain values only: no pickle code
    if ck["state"]["run_key"] != run_key:
        log(f"{last} belongs to another run (key {ck['state']['run_key']} != {run_key}): starting over")
        best_path.unlink(missing_ok=True)
        return state, run
    model.load_state_dict(ck["trainable"])
    opt.load_state_dict(ck["optimizer"])
    state = ck["state"]
    # a checkpoint written before the wall times left it: they become the record's
    run.update(seconds=state.pop("seconds", 0.0), resumed=state.pop("resumed", 0))
    run["epochs"] = [{"epoch": r["epoch"], "train_seconds": r.pop("train_seconds", None),
                      "val_seconds": r.pop("val_seconds", None)} for r in state["history"]]
    if record is not None and Path(record).is_file():
        saved = json.loads(Path(record).read_text())
        if saved.get("run_key") == run_key:
            run = saved
    run["resumed"] += 1
    log(f"resumed from {last}: epoch {state['epoch'] + 1}, batch {state['batch_in_epoch']}, step {state['step']}")
    return state, run


def _validate(model: Any, val_rows: Sequence[Example], graphs: dict[str, GraphArrays] | None, cfg: TrainConfig,
              score: Callable, train_loss: float) -> tuple[float | None, float | None, float]:
    """One epoch's validation: (val_loss, val_score, the value early stopping maximises: minus the loss with
    ``early_stop: loss``, else the score, else minus the validation or the training loss)."""
    val_loss = mean_loss(model, val_rows, graphs, batch_size=cfg.eval_batch_size) if cfg.val_loss else None
    val_score = None
    if cfg.val_generate and val_rows:
        gen_rows = val_rows[: cfg.val_generate_rows] if cfg.val_generate_rows else val_rows
        val_score = score(gen_rows, predict(model, gen_rows, graphs, batch_size=cfg.eval_batch_size))
    if cfg.early_stop == "loss" and val_loss is not None:
        return val_loss, val_score, -val_loss
    if val_score is not None:
        return val_loss, val_score, val_score
    # nothing scored on validation: the training loss decides
    return val_loss, val_score, -val_loss if val_loss is not None else -train_loss


def _end_epoch(state: dict[str, Any], run: dict[str, Any], row: dict[str, Any], value: float, *, train_s: float,
               val_s: float, model: Any, best_path: Path, run_key: str, log: Callable[[str], None]) -> None:
    """An epoch's history row (``improved`` added) and wall times recorded; ``best.pt`` written when ``value``
    beats the best so far, else one more bad epoch counted."""
    epoch = row["epoch"]
    improved = state["best_value"] is None or value > state["best_value"]
    row["improved"] = improved
    state["history"].append(row)
    run["epochs"].append({"epoch": epoch, "train_seconds": round(train_s, 2), "val_seconds": round(val_s, 2)})
    log(f"epoch {epoch}: {row} {run['epochs'][-1]}")
    if improved:
        state["best_value"], state["best_epoch"], state["bad_epochs"] = value, epoch, 0
        _save({"trainable": model.state_dict(), "epoch": epoch, "val_loss": row["val_loss"],
               "val_score": row["val_score"], "run_key": run_key}, best_path)
    else:
        state["bad_epochs"] += 1


def train(
    *, model: Any, train_rows: Sequence[Example], val_rows: Sequence[Example],
    graphs: dict[str, GraphArrays] | None, cfg: TrainConfig, out_dir: str | Path,
    score: Callable[[Sequence[Example], list[dict[str, Any]]], float], run_key: str,
    log: Callable[[str], None] = print, stop_after_steps: int | None = None, record: str | Path | None = None,
) -> dict[str, Any]:
    """Train ``model`` in place; returns the run state (history, best epoch, step, done) with what the run
    took added: ``seconds`` (training, summed over the processes of a resumed run), ``resumed`` (times resumed
    from ``last.pt``) and ``epoch_seconds`` (per epoch: ``train_seconds``, ``val_seconds``).

    ``score(examples, predictions)`` is the task metric (higher is better). ``run_key`` identifies the run
    (model config, data, settings): a ``last.pt`` with another key is not resumed but started over.
    ``stop_after_steps`` ends the call after that many optimizer steps of this call (a simulated
    interruption, for tests), leaving the mid-epoch checkpoint behind.

    The checkpoints and the history hold what the data, config and seeds determine only. The wall times are
    kept in ``record`` (JSON; the train_gretriever stage's is under ``data/timings/``, no DVC output), written with each
    checkpoint and read back on resume, so a resumed run's ``seconds`` cover its earlier processes too;
    without a record (or with another run's) they cover this call's training only.

    References
    ----------
    He et al., G-Retriever (2024), Appendix B.1 (AdamW, lr 1e-5, weight decay 0.05, warm-up + half-cycle
    cosine, batch 4, 10 epochs, early stopping with patience 2).
    """
    import torch

    out_dir = Path(out_dir)
    last, best_path = out_dir / "last.pt", out_dir / "best.pt"
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    per_epoch = math.ceil(math.ceil(len(train_rows) / cfg.batch_size) / cfg.grad_steps)
    state: dict[str, Any] = {"run_key": run_key, "epoch": 0, "batch_in_epoch": 0, "step": 0, "history": [],
                             "best_epoch": None, "best_value": None, "bad_epochs": 0, "done": False,
                             "epoch_loss_sum": 0.0, "epoch_loss_n": 0, "config": asdict(cfg)}
    # the run record: what this run took (never inside a checkpoint)
    run: dict[str, Any] = {"run_key": run_key, "seconds": 0.0, "resumed": 0, "epochs": []}
    if last.exists():
        state, run = _resume(last, best_path, model=model, opt=opt, state=state, run=run, run_key=run_key,
                             record=record, log=log)

    def checkpoint() -> None:
        _save({"state": state, "trainable": model.state_dict(), "optimizer": opt.state_dict()}, last)
        if record is not None:
            Path(record).parent.mkdir(parents=True, exist_ok=True)
            Path(record).write_text(json.dumps(run, indent=2, sort_keys=True) + "\n")

    def result() -> dict[str, Any]:
        return {**state, "seconds": run["seconds"], "resumed": run["resumed"], "epoch_seconds": list(run["epochs"])}

    steps_this_call = 0
    t_start = time.perf_counter() - run["seconds"]
    while not state["done"] and state["epoch"] < cfg.epochs:
        epoch = state["epoch"]
        model.train()
        t_epoch = time.perf_counter()
        chunks = batches(epoch_order(len(train_rows), seed=cfg.seed, epoch=epoch), cfg.batch_size)
        i = state["batch_in_epoch"]
        while i < len(chunks):
            group = chunks[i: i + cfg.grad_steps]
            lr = lr_at(state["step"] + 1, steps_per_epoch=per_epoch, cfg=cfg)
            torch.manual_seed(cfg.seed * 1_000_003 + state["step"])
            loss_sum, n = optimizer_step(model=model, opt=opt, params=params, groups=[
                ([train_rows[j] for j in c], [graphs[train_rows[j].example_id] for j in c] if graphs is not None else None)
                for c in group], lr=lr, grad_clip=cfg.grad_clip)
            state["epoch_loss_sum"] += loss_sum
            state["epoch_loss_n"] += n
            i += len(group)
            state["batch_in_epoch"] = i
            state["step"] += 1
            steps_this_call += 1
            run["seconds"] = time.perf_counter() - t_start
            if state["step"] % 10 == 0:
                log(f"epoch {epoch + 1} batch {i}/{len(chunks)} step {state['step']} lr {lr:.2e} "
                    f"loss {state['epoch_loss_sum'] / max(state['epoch_loss_n'], 1):.4f} "
                    f"({run['seconds']:.0f}s)")
            if cfg.checkpoint_every and state["step"] % cfg.checkpoint_every == 0 and i < len(chunks):
                checkpoint()
            if stop_after_steps is not None and steps_this_call >= stop_after_steps:
                checkpoint()
                return result()
        train_loss = state["epoch_loss_sum"] / max(state["epoch_loss_n"], 1)
        train_s = time.perf_counter() - t_epoch
        t_val = time.perf_counter()
        val_loss, val_score, value = _validate(model, val_rows, graphs, cfg, score, train_loss)
        row = {"epoch": epoch + 1, "train_loss": train_loss, "val_loss": val_loss, "val_score": val_score,
               "lr_end": lr_at(state["step"] + 1, steps_per_epoch=per_epoch, cfg=cfg), "steps": state["step"]}
        _end_epoch(state, run, row, value, train_s=train_s, val_s=time.perf_counter() - t_val, model=model,
                   best_path=best_path, run_key=run_key, log=log)
        state["epoch"] = epoch + 1
        state["batch_in_epoch"] = 0
        state["epoch_loss_sum"], state["epoch_loss_n"] = 0.0, 0
        if state["bad_epochs"] >= cfg.patience:
            log(f"early stop: no improvement for {cfg.patience} epochs (best epoch {state['best_epoch']})")
            state["done"] = True
        run["seconds"] = time.perf_counter() - t_start
        checkpoint()
    state["done"] = True
    checkpoint()
    return result()
