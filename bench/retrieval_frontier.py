"""Benchmark: the retrieval frontier, answer recall against retrieved triples, for every retriever preset on
MetaQA 1-, 2- and 3-hop test questions.

For each preset and hop count: questions, mean retrieval answer recall (share of gold answer entities among
the retrieved nodes), median triples, median ms per question (retriever call only; question vectors are
computed beforehand in one batch, graph vectors come from the index). Presets: ``pcst`` (G-Retriever),
``pcst-gretriever-exact``, ``khop``, ``relpath`` (zero-shot, 5 sequences), ``relpath-plan`` (the default
experiment's retriever: the learnt plan ``data/relplan``, 1 sequence) and ``relpath-plan-2`` (2 sequences;
both skipped when the plan is missing), LEGO ``lego-00`` ... ``lego-20`` without LLM stages, and
LEGO without the relation-priority neighbourhood cut (``-norelprio``). Presets that need the fine-tuned ST
(``data/finetune/st_model``, ``dvc repro finetune/dvc.yaml``) are skipped with the reason when it is missing.
Writes ``reports/bench/retrieval_frontier.json`` and ``reports/figures/retrieval_frontier.png``.

Recall and triples do not depend on machine load; ms do (the JSON records the load, ``bench/_machine.py``).
Needs the ``index`` stage outputs (``dvc repro index``); ``--encode-needed`` instead encodes only the names
the questions' neighbourhoods need (for a quick smoke run without the index).

    python -m bench.retrieval_frontier --questions 50
    # the slow st / reranker presets on fewer questions, kept beside the others:
    python -m bench.retrieval_frontier --questions 10 --merge --presets lego-03 lego-04 lego-10 lego-11 lego-16 lego-17
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from bench.common import write_result

from kgrag.index.embed import EmbeddingIndex, encode
from kgrag.index.entity_vectors import EntityVectors, VectorCache
from kgrag.evaluation.evaluate import retrieval_recall
from kgrag.io import RELPLAN, ST_MODEL
from kgrag.retrieval.lego.presets import PRESETS as LEGO_PRESETS
from kgrag.kg.loaders.metaqa import load_metaqa
from kgrag.registry import RETRIEVERS
from kgrag.kg.store import KGStore, questions_from_table

LLM_STAGES = ("llm",)


def _uses(preset: dict, what: str) -> bool:
    return what in json.dumps(preset)


def presets() -> dict[str, tuple[str, dict]]:
    """Preset name -> (retriever, params)."""
    out: dict[str, tuple[str, dict]] = {
        "pcst": ("pcst", {}),
        "pcst-gretriever-exact": ("pcst", {"preset": "gretriever-exact"}),
        "khop": ("khop", {}),
        "relpath": ("relpath", {}),
        # the learnt relation-path plan (kgrag.index.relplan; stage relplan): 1 sequence (the default), 2 sequences
        "relpath-plan": ("relpath", {"plan": str(RELPLAN), "paths": 1}),
        "relpath-plan-2": ("relpath", {"plan": str(RELPLAN), "paths": 2}),
    }
    for name, p in LEGO_PRESETS.items():
        if _uses(p, '"llm"'):
            continue  # LLM stages: not part of the frontier (SmolLM2 on CPU; their own bench)
        out[name] = ("lego", {"preset": name})
    for name in ("lego-00", "lego-16"):
        out[f"{name}-norelprio"] = ("lego", {"preset": name, "relation_priority": False})
    return out


def plot(result: dict, path: str) -> None:
    """Recall against median triples, one panel per hop count, one labelled point per preset."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    hops = sorted({int(h) for p in result["presets"].values() for h in p if h.isdigit()})
    fig, axes = plt.subplots(1, len(hops), figsize=(6 * len(hops), 5), squeeze=False)
    for ax, h in zip(axes[0], hops):
        for name, per in result["presets"].items():
            r = per.get(str(h))
            if not r or r.get("recall") is None:
                continue
            ax.scatter(r["median_triples"], r["recall"], s=25)
            label = name if r.get("questions") == result["questions"] else f"{name} ({r.get('questions')} q)"
            ax.annotate(label, (r["median_triples"], r["recall"]), fontsize=7, xytext=(3, 2),
                        textcoords="offset points")
        ax.set_xscale("symlog", linthresh=10)
        ax.set_xlabel("median retrieved triples per question")
        ax.set_ylabel("answer recall")
        ax.set_ylim(-0.02, 1.02)
        ax.axhline(0.9, color="grey", lw=0.5, ls="--")
        ax.axvline(100, color="grey", lw=0.5, ls="--")
        ax.set_title(f"MetaQA {h}-hop ({result['questions']} questions unless marked)")
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")


def main() -> None:
    """Run the benchmark."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--questions", type=int, default=50, help="questions per hop count (seeded sample)")
    ap.add_argument("--hops", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--presets", nargs="*", default=None, help="preset names (default: all)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--kg", default="data/validated/kg.duckdb")
    ap.add_argument("--index", default="data/index")
    ap.add_argument("--model", default="all-MiniLM-L6-v2")
    ap.add_argument("--metaqa", default="../shared/data/metaqa")
    ap.add_argument("--max-edges", type=int, default=5000, help="neighbourhood edge cap (params' default)")
    ap.add_argument("--encode-needed", action="store_true", help="no index: encode names on first use")
    ap.add_argument("--out", default="reports/bench/retrieval_frontier.json")
    ap.add_argument("--merge", action="store_true",
                    help="keep the presets of an existing --out file that this run does not measure (each preset's "
                         "hop entries name their own question count; e.g. the slow st / reranker presets on fewer "
                         "questions)")
    ap.add_argument("--figure", default="reports/figures/retrieval_frontier.png")
    args = ap.parse_args()

    kg = KGStore(args.kg)
    if args.encode_needed:
        rel = encode([str(r).replace("_", " ") for r in kg.relation_names], model=args.model)
        index = EmbeddingIndex(model=args.model, entity_vectors=EntityVectors(kg, VectorCache(args.model)),
                               relation_vectors=rel)
    else:
        index = EmbeddingIndex.load(args.index, args.model, kg)
    chosen = presets()
    if args.presets:
        unknown = sorted(set(args.presets) - set(chosen))
        if unknown:
            raise SystemExit(f"unknown presets {unknown}; valid: {', '.join(chosen)}")
        chosen = {k: v for k, v in chosen.items() if k in args.presets}
    result: dict = {"questions": args.questions, "seed": args.seed, "max_edges": args.max_edges,
                    "index": "encoded on demand" if args.encode_needed else args.index, "presets": {},
                    "note": "recall = mean share of gold answer entities among the retrieved nodes; triples and ms "
                            "are per-question medians; ms = retriever call only (question vectors precomputed)"}
    if args.merge and Path(args.out).exists():
        old = json.loads(Path(args.out).read_text())
        result["presets"] = {k: v for k, v in old.get("presets", {}).items() if k not in chosen}
        result["merged_from"] = {"questions": old.get("questions"), "load": old.get("load"),
                                 "presets": sorted(result["presets"])}
        # the headline count stays the kept presets'; this run's presets name theirs per hop count
        result["questions"], result["questions_this_run"] = old.get("questions", args.questions), args.questions
    qsets = {}
    for h in args.hops:
        t = load_metaqa(path=args.metaqa, hops=h, split="test", sample=args.questions, seed=args.seed)
        qs = [q for q in questions_from_table(t.questions) if q.topic_ids]
        qsets[h] = (qs, index.encode([q.text for q in qs]))
    for name, (method, extra) in chosen.items():
        entry = RETRIEVERS.get(method)
        per: dict = {}
        if extra.get("plan") and not (Path(extra["plan"]) / "plan.parquet").exists():
            result["presets"][name] = {"skipped": f"needs {extra['plan']} (dvc repro relplan)"}
            print(f"[frontier] {name}: skipped (no {extra['plan']})", file=sys.stderr)
            continue
        if _uses(extra, "st-ft") or (method == "lego" and str(ST_MODEL) in json.dumps(LEGO_PRESETS.get(
                extra.get("preset", ""), {}))):
            if not Path(ST_MODEL).exists():
                result["presets"][name] = {"skipped": f"needs {ST_MODEL} (dvc repro finetune/dvc.yaml)"}
                print(f"[frontier] {name}: skipped (no {ST_MODEL})", file=sys.stderr)
                continue
        params = entry.params(**extra)
        for h, (qs, vecs) in qsets.items():
            rec, tri, ms = [], [], []
            for q, v in zip(qs, vecs):
                t0 = time.perf_counter()
                sub = entry.impl(question=q, query_vec=v, kg=kg, index=index, params=params, hops=h,
                                 max_edges=args.max_edges)
                ms.append((time.perf_counter() - t0) * 1000)
                tri.append(len(sub))
                rec.append(retrieval_recall(answer_ids=q.answer_ids, node_ids=sub.node_ids.tolist()))
            ok = [x for x in rec if x is not None]
            per[str(h)] = {"questions": len(qs), "recall": round(float(np.mean(ok)), 4) if ok else None,
                           "median_triples": float(np.median(tri)), "median_ms": round(float(np.median(ms)), 2)}
            print(f"[frontier] {name} {h}-hop: {json.dumps(per[str(h)])}", file=sys.stderr)
        result["presets"][name] = {"retriever": method, "params": extra, **per}
        write_result(args.out, result)  # after each preset: a long run keeps what it measured
    plot(result, args.figure)


if __name__ == "__main__":
    main()
