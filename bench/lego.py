"""Benchmark: LEGO ``ppr`` subgraph extraction (PPR on the topics' k-hop neighbourhood) against igraph's
``personalized_pagerank`` over the whole KG, on MetaQA 2-hop and 3-hop test questions.

Both rank entities from the question's topic entities with the same damping; the top ``max_ent`` are
kept and scored by answer recall. Timed per question, same questions, same run: ours = neighbourhood
extraction + local graph + power iteration + top-k; reference = igraph's PRPACK call on the prebuilt
whole graph + top-k (building the igraph graph once is not timed). Writes ``reports/bench/lego.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import machine, write_result  # noqa: E402

from kgrag.evaluate import retrieval_recall  # noqa: E402
from kgrag.lego import EXTRACTORS  # noqa: E402
from kgrag.lego.extract_ppr import top_nodes  # noqa: E402
from kgrag.lego.types import Context, LocalGraph  # noqa: E402
from kgrag.loaders.metaqa import load_metaqa  # noqa: E402
from kgrag.store import KGStore, questions_from_table  # noqa: E402


def main() -> None:
    """Run the benchmark."""
    import igraph

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--questions", type=int, default=100, help="questions per hop count (seeded sample)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--kg", default="data/validated/kg.duckdb")
    ap.add_argument("--metaqa", default="../shared/data/metaqa")
    ap.add_argument("--max-ent", type=int, default=2000, help="entities kept (the paper's max_ent)")
    ap.add_argument("--damping", type=float, default=0.8, help="igraph damping (the paper's restart_prob)")
    ap.add_argument("--max-edges", type=int, default=10**9, help="neighbourhood edge cap (default: none)")
    ap.add_argument("--out", default="reports/bench/lego.json")
    args = ap.parse_args()

    kg = KGStore(args.kg)
    whole = igraph.Graph(n=kg.num_entities, edges=np.stack([kg.heads, kg.tails], axis=1), directed=False)
    entry = EXTRACTORS.get("ppr")
    params = entry.params(max_ent=args.max_ent, damping=args.damping)
    ctx = Context(question="", query_vec=np.zeros(1, dtype=np.float32), kg=kg, index=None)
    result: dict = {
        "machine": machine(),
        "params": {**params.model_dump(), "max_edges": args.max_edges, "seed": args.seed},
        "note": "median per-question wall ms; ours = k-hop neighbourhood (k = question hops) + restricted power "
                "iteration + top max_ent; reference = igraph personalized_pagerank over the whole KG + top max_ent; "
                "recall = mean share of answer entities among the kept entities; top_set_overlap = "
                "mean share of our kept entities that are in the reference's top max_ent",
    }
    for hops in (2, 3):
        t = load_metaqa(path=args.metaqa, hops=hops, split="test", sample=args.questions, seed=args.seed)
        qs = [q for q in questions_from_table(t.questions) if q.topic_ids]
        ours_ms, ref_ms, ours_rec, ref_rec, overlap = [], [], [], [], []
        for q in qs:
            topics = [i for i in q.topic_ids if 0 <= i < kg.num_entities]
            t0 = time.perf_counter()
            nb = kg.neighbourhood(topics, hops, args.max_edges)
            g = LocalGraph.build(kg=kg, nodes=nb.nodes, edges=nb.edges)
            ex = entry.impl(graph=g, seeds=g.local(topics), hops=hops, params=params, ctx=ctx)
            ours = g.nodes[ex.nodes]
            ours_ms.append((time.perf_counter() - t0) * 1000)
            t0 = time.perf_counter()
            scores = np.asarray(whole.personalized_pagerank(reset_vertices=topics, damping=args.damping,
                                                            directed=False))
            ref = top_nodes(scores, np.asarray(topics), args.max_ent)
            ref_ms.append((time.perf_counter() - t0) * 1000)
            ours_rec.append(retrieval_recall(answer_ids=q.answer_ids, node_ids=ours.tolist()))
            ref_rec.append(retrieval_recall(answer_ids=q.answer_ids, node_ids=ref.tolist()))
            overlap.append(len(set(ours.tolist()) & set(ref.tolist())) / max(len(ours), 1))
        ok = [i for i, r in enumerate(ref_rec) if r is not None]
        med, ref_med = float(np.median(ours_ms)), float(np.median(ref_ms))
        result[str(hops)] = {
            "questions": len(qs),
            "reference_median_ms": ref_med,
            "median_ms": med,
            "p90_ms": float(np.percentile(ours_ms, 90)),
            "speedup": ref_med / max(med, 1e-9),
            "reference_recall": float(np.mean([ref_rec[i] for i in ok])),
            "recall": float(np.mean([ours_rec[i] for i in ok])),
            "top_set_overlap": float(np.mean(overlap)),
        }
        print(f"{hops}-hop: {json.dumps(result[str(hops)])}", file=sys.stderr)
    write_result(args.out, result)


if __name__ == "__main__":
    main()
