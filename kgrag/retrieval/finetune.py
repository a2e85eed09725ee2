"""Fine-tuned sentence-transformer for the LEGO scorers (the paper's "Fine-tuned ST", GSR / KELP instances).

Training data come from questions of a split the experiment does not evaluate (MetaQA ``dev``): for each
question, the shortest paths from its topic entity to an answer are relevant and paths of the same length to
other nodes of the neighbourhood are not; the same holds for the single edges of those paths. Texts are
rendered exactly as the LEGO stages render what they score (``path_text`` / ``edge_text``), so the model
learns the inputs it will see.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from kgrag import ranking
from kgrag.retrieval.lego.filter_shortest import enumerate_paths, shortest_path_dag
from kgrag.retrieval.lego.types import LocalGraph, edge_text, path_text
from kgrag.types import Question
from kgrag.kg.kgview import KGView


@dataclass(frozen=True)
class Triplet:
    """A question, a relevant text and an irrelevant one; ``kind`` is ``path`` or ``edge``."""

    question: str
    positive: str
    negative: str
    kind: str


def question_triplets(
    *, kg: KGView, question: Question, hops: int, max_edges: int, per_question: int, rng: np.random.Generator
) -> list[Triplet]:
    """Up to ``per_question`` path triplets and as many edge triplets for one question.

    Negatives are "hard": paths of the same length as a positive path, from the same topic, ending at a
    node that is not an answer; negative edges lie on negative paths and on no positive path.
    """
    topics = [t for t in question.topic_ids if 0 <= t < kg.num_entities]
    if not topics or not question.answer_ids or per_question <= 0:
        return []
    nb = kg.neighbourhood(topics, hops, max_edges)
    graph = LocalGraph.build(kg=kg, nodes=nb.nodes, edges=nb.edges)
    answers = set(graph.local(list(question.answer_ids)).tolist())
    pos_paths, neg_by_len = [], {}
    for s in graph.local(topics).tolist():
        dist, preds = shortest_path_dag(graph, s)
        for t in sorted(answers):
            if dist[t] > 0:
                pos_paths.extend(enumerate_paths(preds, s, t, 2))
        others = np.nonzero(dist > 0)[0]
        others = others[~np.isin(others, list(answers))]
        for t in rng.permutation(others)[: 8 * per_question].tolist():
            p = enumerate_paths(preds, s, int(t), 1)[0]
            neg_by_len.setdefault(len(p.edges), []).append(p)
    if not pos_paths or not neg_by_len:
        return []
    out: list[Triplet] = []
    pos_edges = {e for p in pos_paths for e in p.edges}
    order = rng.permutation(len(pos_paths))[:per_question]
    for i in order.tolist():
        p = pos_paths[i]
        pool = neg_by_len.get(len(p.edges)) or [q for qs in neg_by_len.values() for q in qs]
        n = pool[int(rng.integers(len(pool)))]
        out.append(Triplet(question.text, path_text(p, graph, kg), path_text(n, graph, kg), "path"))
    neg_edges = sorted({e for qs in neg_by_len.values() for q in qs for e in q.edges} - pos_edges)
    pos_list = sorted(pos_edges)
    if neg_edges:
        for _ in range(min(per_question, len(pos_list))):
            pe = pos_list[int(rng.integers(len(pos_list)))]
            ne = neg_edges[int(rng.integers(len(neg_edges)))]
            out.append(Triplet(question.text, edge_text(pe, graph, kg), edge_text(ne, graph, kg), "edge"))
    return out


def training_triplets(
    *, kg: KGView, questions: Sequence[Question], hops: int, max_edges: int, per_question: int, seed: int
) -> list[Triplet]:
    """Triplets of every question (``question_triplets``); question i draws from ``default_rng([seed, i])``."""
    out: list[Triplet] = []
    for i, q in enumerate(questions):
        out.extend(question_triplets(kg=kg, question=q, hops=hops, max_edges=max_edges,
                                     per_question=per_question, rng=np.random.default_rng([seed, i])))
    return out


def _embed(model: Any, texts: Sequence[str]):
    """Unit sentence embeddings with gradients (the model's own tokenizer and pooling)."""
    import torch

    prep = getattr(model, "preprocess", None) or model.tokenize
    feats = prep(list(texts))
    emb = model(feats)["sentence_embedding"]
    return torch.nn.functional.normalize(emb, dim=-1)


def margin_loss(model: Any, batch: Sequence[Triplet], margin: float):
    """Mean of max(0, γ − S(v_i, q) + S(v_j, q)) with S the cosine of the embeddings.

    References
    ----------
    Cao et al., LEGO-GraphRAG (2024), section 4.1 "Fine-tuned ST": L = Σ_(v_i, e_q)∈D max(0, γ − S(v_i, e_q)
    + S(v_j, e_q)), v_i relevant, v_j irrelevant, γ the margin.
    """
    import torch

    q = _embed(model, [t.question for t in batch])
    p = _embed(model, [t.positive for t in batch])
    n = _embed(model, [t.negative for t in batch])
    return torch.clamp(margin - (q * p).sum(-1) + (q * n).sum(-1), min=0.0).mean()


def pair_accuracy(model: Any, triplets: Sequence[Triplet], batch_size: int = 64) -> dict[str, float]:
    """Share of triplets whose positive scores above the negative (6 decimals), and the mean score gap (4
    decimals, ``kgrag.ranking.COSINE_DECIMALS``), no gradients."""
    import torch

    if not triplets:
        return {"pair_accuracy": float("nan"), "mean_gap": float("nan")}
    gaps = []
    model.eval()
    with torch.no_grad():
        for i in range(0, len(triplets), batch_size):
            b = triplets[i: i + batch_size]
            q, p, n = (_embed(model, [getattr(t, f) for t in b]) for f in ("question", "positive", "negative"))
            gaps.append(((q * p).sum(-1) - (q * n).sum(-1)).numpy())
    g = ranking.rounded(np.concatenate(gaps), ranking.COSINE_DECIMALS)  # a gap within float noise of 0 is 0
    # reported to a fixed precision (kgrag.ranking): CPU float noise (7th digit) does not change the report
    return {"pair_accuracy": round(float((g > 0).mean()), ranking.SCORE_DECIMALS),
            "mean_gap": round(float(g.mean()), ranking.COSINE_DECIMALS)}


def load_trainable(base_model: str) -> Any:
    """A fresh CPU SentenceTransformer from a packaged name or local folder (not the shared cached one)."""
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from sentence_transformers import SentenceTransformer

    from kgrag.index.embed import model_path

    return SentenceTransformer(model_path(base_model), device="cpu")


def finetune_st(
    *, base_model: str, train: Sequence[Triplet], val: Sequence[Triplet], margin: float, epochs: int,
    batch_size: int, lr: float, warmup: float, seed: int, log=None,
) -> tuple[Any, list[dict[str, float]], list[float]]:
    """A copy of ``base_model`` trained with the margin loss (AdamW, linear warm-up then linear decay).

    Returns (model, history, epoch_seconds): one history row per epoch (mean train loss, validation pair
    accuracy and score gap) after a row for the untrained model (epoch 0), and each epoch's wall time (a run
    record, kept out of the history, which the stage writes into its DVC output).

    References
    ----------
    Cao et al., LEGO-GraphRAG (2024), section 4.1 "Fine-tuned ST" (margin loss);
    Reimers and Gurevych, Sentence-BERT (2019) (triplet objective).
    """
    import torch

    torch.manual_seed(seed)
    model = load_trainable(base_model)
    rng = np.random.default_rng(seed)
    steps_per_epoch = math.ceil(len(train) / batch_size) if train else 0
    total = max(1, steps_per_epoch * epochs)
    warm = int(warmup * total)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: (s + 1) / max(1, warm) if s < warm else max(0.0, (total - s) / max(1, total - warm)))
    history = [{"epoch": 0, "train_loss": float("nan"), **pair_accuracy(model, val)}]
    seconds: list[float] = []
    for epoch in range(1, epochs + 1):
        t0 = time.perf_counter()
        model.train()
        losses = []
        order = rng.permutation(len(train))
        for i in range(0, len(order), batch_size):
            batch = [train[j] for j in order[i: i + batch_size]]
            loss = margin_loss(model, batch, margin)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            losses.append(float(loss.detach()))
        row = {"epoch": epoch, "train_loss": float(np.mean(losses)) if losses else float("nan"),
               **pair_accuracy(model, val)}
        seconds.append(round(time.perf_counter() - t0, 2))
        history.append(row)
        if log:
            log({**row, "seconds": seconds[-1]})
    model.eval()
    return model, history, seconds
