"""Benchmark: per-question PCST retrieval on MetaQA 2-hop and 3-hop test questions.

Times kgrag's ``pcst`` retriever (neighbourhood extraction + prizes + vectorized PCST instance + solve)
and, in the same run on the same questions, a simple reference that builds the PCST instance with a
per-edge Python loop as G-Retriever's released code does. Question embeddings are computed in one batch
beforehand (graph embeddings are precomputed by the index stage), as in the reference measurement.
Writes ``reports/bench/retrieve.json``.

Needs the ``index`` stage outputs: ``dvc repro index`` (``make bench`` does it).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

from bench.common import machine, write_result

from kgrag.evaluation.evaluate import retrieval_recall
from kgrag.experiment import Experiment, Files
from kgrag.kg.loaders.metaqa import load_metaqa
from kgrag.params import RetrieveParams, load
from kgrag.retrieval.retrievers.pcst import edge_prizes, node_prizes
from kgrag.retrieval.retrievers.pcst_reference import pcst_select_reference
from kgrag.retrieval.run import retrieve_one
from kgrag.kg.store import questions_from_table


def reference_retrieve(q, qvec, kg, index, params, hops, max_edges) -> tuple[set[int], float]:
    """Same neighbourhood and prizes, PCST instance built edge by edge (the reference)."""
    t0 = time.perf_counter()
    nb = kg.neighbourhood(list(q.topic_ids), hops, max_edges, relation_priority=index.relation_vectors @ qvec)
    nodes = np.sort(nb.nodes)
    h, r, t = kg.heads[nb.edges], kg.relations[nb.edges], kg.tails[nb.edges]
    local = np.stack([np.searchsorted(nodes, h), np.searchsorted(nodes, t)], axis=1)
    n_pr = node_prizes(index.entity_vectors[nodes] @ qvec, params.topk)
    e_pr = edge_prizes(index.relation_vectors[r] @ qvec, params.topk_e, params.tie_decay)
    root = int(np.searchsorted(nodes, q.topic_ids[0])) if params.root_topic else -1
    sel, _ = pcst_select_reference(edges=local, n_prizes=n_pr, e_prizes=e_pr, cost_e=params.cost_e,
                                   c=params.tie_decay, root=root, pruning=params.pruning)
    ms = (time.perf_counter() - t0) * 1000
    return {int(nodes[i]) for i in sel}, ms


def main() -> None:
    """Run the benchmark."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--questions", type=int, default=300, help="questions per hop count (seeded sample)")
    ap.add_argument("--reference-questions", type=int, default=60, help="questions timed with the reference")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="reports/bench/retrieve.json")
    ap.add_argument("--set", action="append", default=[], help="params override, e.g. retrieve.pcst.topk=5")
    args = ap.parse_args()
    params = load("params.yaml", args.set)
    exp = Experiment(params, Files.of())  # the index stage's KG and index (no LLM here)
    kg, index = exp.kg, exp.index
    if index is None:
        raise SystemExit(f"no embedding index in {exp.files.index}: run `dvc repro index` first")
    pcst = params.retrieve.module_params("pcst")
    result: dict = {"machine": machine(), "params": pcst.model_dump(), "method": "pcst",
                    "note": "median/p90 over per-question wall time of kgrag's pcst retriever; reference_* "
                            "is the per-edge-loop instance builder on the first reference_questions questions"}
    for hops in (2, 3):
        t = load_metaqa(path=params.data.path, hops=hops, split="test", sample=args.questions, seed=args.seed)
        qs = questions_from_table(t.questions)
        vecs = index.encode([q.text for q in qs])
        rp = RetrieveParams(**{**params.retrieve.model_dump(), "method": "pcst", "hops": hops})
        for q, v in zip(qs[:5], vecs[:5]):  # warm-up
            retrieve_one(question=q, query_vec=v, kg=kg, index=index, params=rp)
        times, recalls, sizes, ref_times, agree = [], [], [], [], []
        for i, (q, v) in enumerate(zip(qs, vecs)):
            sub, ms = retrieve_one(question=q, query_vec=v, kg=kg, index=index, params=rp)
            times.append(ms)
            sizes.append(len(sub))
            rec = retrieval_recall(answer_ids=q.answer_ids, node_ids=sub.node_ids.tolist())
            if rec is not None:
                recalls.append(rec)
            if i < args.reference_questions:
                ref_nodes, ref_ms = reference_retrieve(q, v, kg, index, pcst, hops, rp.max_neighbourhood_edges)
                ref_times.append(ref_ms)
                agree.append(ref_nodes == set(sub.node_ids.tolist()))
        fast_same = np.array(times[: len(ref_times)])
        result[str(hops)] = {
            "questions": len(qs),
            "median_ms": float(np.median(times)),
            "p90_ms": float(np.percentile(times, 90)),
            "answer_recall": float(np.mean(recalls)),
            "median_triples": float(np.median(sizes)),
            "reference_questions": len(ref_times),
            "reference_median_ms": float(np.median(ref_times)),
            "reference_p90_ms": float(np.percentile(ref_times, 90)),
            "speedup_median": float(np.median(ref_times) / max(np.median(fast_same), 1e-9)),
            "reference_agreement": float(np.mean(agree)),
        }
        print(f"{hops}-hop: {json.dumps(result[str(hops)])}", file=sys.stderr)
    write_result(args.out, result)


if __name__ == "__main__":
    main()
