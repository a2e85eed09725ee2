"""Training the adapters: a listwise objective over each question's candidates, seeded and resumable.

A candidate's score is what ``rank`` computes: the sum of its tokens' log-probabilities after the prompt. For a
row with a gold and a wrong candidate, one gold and up to ``negatives`` wrong candidates (seeded draw) are scored
and the loss is the cross-entropy of the gold one under the softmax of the scores (ListNet top-1, Cao et al.
2007). The prompt is run once and its key / value cache shared by the candidates (batched), as llama.cpp
scores them. AdamW on the adapters only; the row order is a seeded permutation per epoch; a checkpoint (the
adapters, the optimizer, the position) is written every ``checkpoint_every`` rows and a run resumes from it.

References
----------
Cao et al., "Learning to Rank: From Pairwise Approach to Listwise Approach", ICML 2007. Hu et al., LoRA (2022).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable, Sequence


def candidate_scores(model: Any, prompt: Sequence[int], candidates: Sequence[Sequence[int]]):
    """Sum of each candidate's token log-probabilities after ``prompt`` (a 1-d tensor, differentiable)."""
    import torch

    out = model(input_ids=torch.tensor([list(prompt)]), use_cache=True)
    last = torch.log_softmax(out.logits[0, -1].float(), -1)
    first = torch.stack([last[c[0]] for c in candidates])
    longest = max(len(c) for c in candidates)
    if longest == 1:
        return first
    cache = out.past_key_values
    cache.batch_repeat_interleave(len(candidates))
    p = len(prompt)
    ids = torch.tensor([list(c[:-1]) + [c[-1]] * (longest - len(c)) for c in candidates])[:, : longest - 1]
    pos = torch.arange(p, p + longest - 1).unsqueeze(0).expand(len(candidates), -1)
    mask = torch.ones(len(candidates), p + longest - 1, dtype=torch.long)
    logp = torch.log_softmax(model(input_ids=ids, past_key_values=cache, attention_mask=mask, position_ids=pos,
                                   use_cache=False).logits.float(), -1)
    tot = []
    for k, c in enumerate(candidates):
        s = first[k]
        for j in range(1, len(c)):
            s = s + logp[k, j - 1, c[j]]
        tot.append(s)
    return torch.stack(tot)


def usable_rows(rows: Sequence[dict]) -> list[dict]:
    """The rows training learns from: a gold answer among the candidates and a wrong one beside it (a row whose
    candidates are all gold, or none, has nothing to tell apart)."""
    return [r for r in rows if any(r["gold"]) and not all(r["gold"])]


def load_checkpoint(path: Path) -> dict:
    """A training checkpoint (adapters, optimizer, position: tensors and plain data), read with
    ``weights_only=True``: a file holding any other object is refused (unpickling it could run code), not run."""
    import pickle

    import torch

    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        raise ValueError(f"{path}: not a tune checkpoint (it holds objects other than tensors and plain data: "
                         f"{str(e).splitlines()[0][:160]}); delete it to train from the start") from None


def train(*, model: Any, adapters: dict[str, Any], rows: Sequence[dict], epochs: int, lr: float, negatives: int,
          seed: int, max_prompt: int, checkpoint: Path, checkpoint_every: int,
          progress: Callable[[int, int, float], None] = lambda i, n, loss: None) -> dict:
    """Train the adapters on ``rows`` (:func:`kgrag.tune.rows.build_rows`); resume from ``checkpoint`` when it
    holds a run of the same rows and settings (:func:`load_checkpoint`: tensors and plain data only). Returns the
    history: rows trained, mean loss per epoch, seconds."""
    import numpy as np
    import torch

    from kgrag.tune.lora import adapter_state, load_adapter_state

    usable = usable_rows(rows)
    params = [p for m in adapters.values() for p in (m.A, m.B)]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    key = {"rows": len(usable), "epochs": epochs, "lr": lr, "negatives": negatives, "seed": seed}
    state = {"epoch": 0, "position": 0, "losses": [], "seconds": 0.0}
    if checkpoint.exists():
        saved = load_checkpoint(checkpoint)
        if saved.get("key") == key:
            load_adapter_state(adapters, saved["adapters"])
            opt.load_state_dict(saved["optimizer"])
            state = saved["state"]
    total = epochs * len(usable)
    model.train()
    for epoch in range(state["epoch"], epochs):
        order = np.random.default_rng(seed + epoch).permutation(len(usable))
        rng = np.random.default_rng([seed, epoch])
        draws = [(rng.integers(1 << 30), rng.integers(1 << 30)) for _ in order]  # per row, fixed whatever resumes
        t0 = time.time()
        for pos in range(state["position"], len(usable)):
            r = usable[order[pos]]
            a, b = draws[pos]
            gold = [j for j, g in enumerate(r["gold"]) if g]
            wrong = [j for j, g in enumerate(r["gold"]) if not g]
            pick = [gold[a % len(gold)]]
            pick += list(np.random.default_rng(b).choice(wrong, min(negatives, len(wrong)), replace=False))
            scores = candidate_scores(model, r["prompt"][-max_prompt:], [r["candidates"][j] for j in pick])
            loss = -torch.log_softmax(scores, 0)[0]
            opt.zero_grad()
            loss.backward()
            opt.step()
            state["losses"].append(round(float(loss.detach()), 4))
            state["position"] = pos + 1
            progress(epoch * len(usable) + pos + 1, total, float(np.mean(state["losses"][-50:])))
            if (pos + 1) % checkpoint_every == 0 or pos + 1 == len(usable):
                state["seconds"] += time.time() - t0
                t0 = time.time()
                checkpoint.parent.mkdir(parents=True, exist_ok=True)
                tmp = checkpoint.with_suffix(".tmp")
                torch.save({"key": key, "adapters": adapter_state(adapters), "optimizer": opt.state_dict(),
                            "state": state}, tmp)
                tmp.replace(checkpoint)
        state["epoch"], state["position"] = epoch + 1, 0
    model.eval()
    per_epoch = [round(float(np.mean(state["losses"][e * len(usable):(e + 1) * len(usable)])), 4)
                 for e in range(epochs)] if usable else []
    return {"rows": len(rows), "trained_rows": len(usable), "epochs": epochs, "loss_per_epoch": per_epoch,
            "seconds": round(state["seconds"], 1)}


def scores_of(model: Any, rows: Sequence[dict], max_prompt: int, max_candidates: int = 0) -> list[list[float]]:
    """Every candidate's score under ``model`` (no gradient), per row (evaluation and the agreement test)."""
    import torch

    out = []
    with torch.no_grad():
        for r in rows:
            cands = r["candidates"][: max_candidates or None]
            out.append(candidate_scores(model, r["prompt"][-max_prompt:], cands).tolist() if cands else [])
    return out
