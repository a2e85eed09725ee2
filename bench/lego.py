"""Benchmark: LEGO ``ppr`` subgraph extraction against igraph's ``personalized_pagerank`` over the whole KG,
on MetaQA 2-hop and 3-hop test questions.

Both rank entities from the question's topic entities with the same damping; the top ``max_ent`` are
kept and scored by answer recall. Timed per question, same questions, same run, each method as the ``lego``
retriever runs it: ``push`` (the default) = forward push on the whole KG's adjacency + top-k + the local
graph of the kept entities (``extract_ppr.from_kg``); ``power`` = k-hop neighbourhood + local graph + power
iteration + top-k; reference = igraph's PRPACK call on the prebuilt whole graph + top-k (building the igraph
graph once is not timed). The headline keys are the ``--method`` run's, the other method's are prefixed with
its name. Writes ``reports/bench/lego.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

from bench.common import machine, write_result

from kgrag.evaluation.evaluate import retrieval_recall
from kgrag.retrieval.lego import EXTRACTORS
from kgrag.retrieval.lego.extract_ppr import top_nodes
from kgrag.retrieval.lego.types import Context, LocalGraph
from kgrag.kg.loaders.metaqa import load_metaqa
from kgrag.kg.store import KGStore, questions_from_table


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
    ap.add_argument("--method", choices=["push", "power"], default="push", help="the headline ppr method")
    ap.add_argument("--eps", type=float, default=None, help="push residual threshold (default: the param's)")
    ap.add_argument("--out", default="reports/bench/lego.json")
    args = ap.parse_args()

    kg = KGStore(args.kg)
    whole = igraph.Graph(n=kg.num_entities, edges=np.stack([kg.heads, kg.tails], axis=1), directed=False)
    entry = EXTRACTORS.get("ppr")
    eps = {} if args.eps is None else {"eps": args.eps}
    methods = [args.method] + [m for m in ("push", "power") if m != args.method]
    params = {m: entry.params(max_ent=args.max_ent, damping=args.damping, method=m, **eps) for m in methods}
    from_kg = getattr(entry.impl, "from_kg", None)

    def extract(topics: list[int], hops: int, p) -> np.ndarray:
        """Kept entity ids, the way the lego retriever extracts: from the whole KG, else the neighbourhood."""
        got = from_kg(kg=kg, seeds=np.asarray(topics), hops=hops, params=p) if from_kg else None
        if got is None:
            nb = kg.neighbourhood(topics, hops, args.max_edges)
            g = LocalGraph.build(kg=kg, nodes=nb.nodes, edges=nb.edges)
            ex = entry.impl(graph=g, seeds=g.local(topics), hops=hops, params=p, ctx=ctx)
        else:
            g, ex = got
        return g.nodes[ex.nodes]

    ctx = Context(question="", query_vec=np.zeros(1, dtype=np.float32), kg=kg, index=None)
    result: dict = {
        "machine": machine(),
        "params": {**params[args.method].model_dump(), "max_edges": args.max_edges, "seed": args.seed},
        "note": "median per-question wall ms; ours (method push) = forward push on the whole KG's adjacency + top "
                "max_ent + local graph of the kept entities; power_* = k-hop neighbourhood (k = question hops) + "
                "restricted power iteration + top max_ent; reference = igraph personalized_pagerank over the "
                "whole KG + top max_ent; recall = mean share of answer entities among the kept entities; "
                "top_set_overlap = mean share of our kept entities that are in the reference's top max_ent",
    }
    for hops in (2, 3):
        t = load_metaqa(path=args.metaqa, hops=hops, split="test", sample=args.questions, seed=args.seed)
        qs = [q for q in questions_from_table(t.questions) if q.topic_ids]
        ms: dict[str, list[float]] = {m: [] for m in methods}
        rec: dict[str, list] = {m: [] for m in methods}
        overlap: dict[str, list[float]] = {m: [] for m in methods}
        ref_ms, ref_rec = [], []
        for q in qs:
            topics = [i for i in q.topic_ids if 0 <= i < kg.num_entities]
            t0 = time.perf_counter()
            scores = np.asarray(whole.personalized_pagerank(reset_vertices=topics, damping=args.damping,
                                                            directed=False))
            ref = top_nodes(scores, np.asarray(topics), args.max_ent)
            ref_ms.append((time.perf_counter() - t0) * 1000)
            ref_rec.append(retrieval_recall(answer_ids=q.answer_ids, node_ids=ref.tolist()))
            for m in methods:
                t0 = time.perf_counter()
                ours = extract(topics, hops, params[m])
                ms[m].append((time.perf_counter() - t0) * 1000)
                rec[m].append(retrieval_recall(answer_ids=q.answer_ids, node_ids=ours.tolist()))
                overlap[m].append(len(set(ours.tolist()) & set(ref.tolist())) / max(len(ours), 1))
        ok = [i for i, r in enumerate(ref_rec) if r is not None]
        ref_med = float(np.median(ref_ms))
        out: dict = {"questions": len(qs), "reference_median_ms": ref_med,
                     "reference_recall": float(np.mean([ref_rec[i] for i in ok]))}
        for m in methods:
            med = float(np.median(ms[m]))
            pre = "" if m == args.method else f"{m}_"
            out.update({
                f"{pre}median_ms": med,
                f"{pre}p90_ms": float(np.percentile(ms[m], 90)),
                f"{pre}speedup": ref_med / max(med, 1e-9),
                f"{pre}recall": float(np.mean([rec[m][i] for i in ok])),
                f"{pre}top_set_overlap": float(np.mean(overlap[m])),
            })
        result[str(hops)] = out
        print(f"{hops}-hop: {json.dumps(result[str(hops)])}", file=sys.stderr)
    write_result(args.out, result)


if __name__ == "__main__":
    main()
