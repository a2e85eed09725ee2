"""Benchmark: relpath's answer recall and work with hub sampling on and off, on SYNTHETIC KGs (``kgrag.kg.synth``).

For each size: a synthetic KG (Zipf degrees, typed relations, hubs) and 1-3-hop questions whose answers are known
(the question names its topic and its relation chain in words) are generated with one seed, held in a ``KGStore``
(in memory, as the retrieve stage holds the KG), and the zero-shot ``relpath`` (``plan: null``, ``paths: 1``, no
fallback; the index's encoder without entity vectors, as ``bench/relplan_scale.py``) retrieves every question once
per ``hub_edges`` setting (``off`` = null, the default). Per setting and hop count: answer recall of the returned
subgraph's nodes (``retrieval_recall``) and of the chosen sequence's ends (the ``rank`` reasoner's candidates),
the share of questions with every answer in the subgraph, the edges the steps kept (summed over a question's steps:
the work, counted), the hub groups sampled, and wall ms per question (mean, p50, p95: take them from an idle machine,
see ``load_warning``). Each question is first retrieved once untimed (its phrases encoded into relpath's cache), then
under every setting in an order rotated per question, so load drift and warm caches hit them alike. Writes
``reports/bench/relpath_hubs.json`` (sizes already in the file are kept unless run again).

    python -m bench.relpath_hubs --sizes 1M 10M                    # the issue's run (10M off: ~4 s a question)
    python -m bench.relpath_hubs --sizes 200k --questions 60 --out /tmp/relpath_hubs.json   # a smoke run
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.common import machine, write_result

ROOT = Path(__file__).resolve().parents[1]

SYNTH = dict(entities_per_triple=0.25, n_relations=24, n_types=8, skew=1.0, relation_skew=1.0)
MODEL = "all-MiniLM-L6-v2"


def triples_of(size: str) -> int:
    """``"1M"`` → 1_000_000, ``"200k"`` → 200_000."""
    return int(float(size[:-1]) * {"k": 1_000, "M": 1_000_000}[size[-1]])


def build(n: int, questions: int, hops: tuple[int, ...], max_answers: int, seed: int, work: Path):
    """The synthetic KG as a store and its questions (ids resolved): (store, [Question], [hops], info)."""
    from kgrag.kg.duckdb_io import write_duckdb
    from kgrag.kg.store import KGStore
    from kgrag.kg.synth import generate_kg, generate_questions
    from kgrag.types import Question

    t0 = time.perf_counter()
    kg = generate_kg(n_triples=n, seed=seed, **SYNTH)
    qs = generate_questions(kg=kg, n_questions=questions, hops=hops, max_answers=max_answers, seed=seed,
                            graph_extra=0)
    deg = np.bincount(np.concatenate([kg.heads, kg.tails]), minlength=kg.n_entities)
    info = {"triples": int(n), "entities": int((deg > 0).sum()), "max_degree": int(deg.max()),
            "max_out_one_relation": int(max(int(d.max()) for d in kg.spec.out_degree))}
    write_duckdb(work / "kg.duckdb", kg.tables())
    del kg
    gc.collect()
    store = KGStore(work / "kg.duckdb")
    ids = store.ids_of
    questions = [Question(question_id=q["id"], text=q["question"], topic_ids=ids(q["topic_entities"]),
                          answer_ids=ids(q["answers"])) for q in qs]
    info["build_s"] = round(time.perf_counter() - t0, 1)
    return store, questions, [q["hops"] for q in qs], info


class FetchOnly:
    """A store without the DuckDB store's edge groups (``edge_groups``): relpath's hub step then fetches every edge of
    the frontier and samples afterwards (what it did on the DuckDB store before 2026-12-03); the in-memory store is
    unchanged."""

    def __init__(self, store) -> None:
        self._store = store

    def __getattr__(self, name: str):
        if name == "edge_groups":
            raise AttributeError(name)
        return getattr(self._store, name)


def summarize(rows: list[dict]) -> dict:
    """Means over questions of one setting (and hop count)."""
    ms = np.asarray([r["ms"] for r in rows])
    return {"questions": len(rows),
            "answer_recall": round(float(np.mean([r["recall"] for r in rows])), 4),
            "ends_recall": round(float(np.mean([r["ends_recall"] for r in rows])), 4),
            "all_answers": round(float(np.mean([r["recall"] == 1.0 for r in rows])), 4),
            "edges_kept_mean": round(float(np.mean([r["edges"] for r in rows])), 1),
            "edges_kept_max": int(max(r["edges"] for r in rows)),
            "hub_groups_sampled_mean": round(float(np.mean([r["sampled"] for r in rows])), 2),
            "ms_mean": round(float(ms.mean()), 1), "ms_p50": round(float(np.percentile(ms, 50)), 1),
            "ms_p95": round(float(np.percentile(ms, 95)), 1)}


def _setting(s: str) -> dict:
    """A --hub-edges setting as relpath params: 'off', '<n>', '<n>-fetch', '<n>b<budget>' (hub_budget; without
    it relpath's default)."""
    if s == "off":
        return {"hub_edges": None}
    n, _, budget = s.removesuffix("-fetch").partition("b")
    return {"hub_edges": int(n), **({"hub_budget": int(budget)} if budget else {})}


def run_size(size: str, args) -> dict:
    """One size: every question under every hub_edges setting."""
    from kgrag.index.embed import encode
    from kgrag.retrieval.retrievers import relpath
    from kgrag.retrieval.retrievers.relpath import RelPathParams, retrieve_relpath
    from kgrag.types import retrieval_recall

    with tempfile.TemporaryDirectory(prefix="kgrag-relpath-hubs-") as work:
        store, questions, hops, info = build(triples_of(size), args.questions, tuple(args.hops), args.max_answers,
                                             args.seed, Path(work))

        class NoVectors:  # the index's encoder, no entity vectors (the answer-type feature off, as relplan_scale)
            model = MODEL
            encode = staticmethod(lambda t: encode(t, model=MODEL))
            entity_vectors = np.zeros((0, 384), dtype=np.float32)

        if args.store == "duckdb":  # the same KG through the DuckDB store (no triple loaded; hub steps from its
            # memory-mapped edge groups, written on first use: groups_build_s)
            from kgrag.kg.store_duckdb import DuckKGStore

            del store
            gc.collect()
            t0 = time.perf_counter()
            store = DuckKGStore(Path(work) / "kg.duckdb", cache_dir=Path(work) / "duck")
            info["duckstore_index_s"] = round(time.perf_counter() - t0, 1)
        index = NoVectors()
        vecs = index.encode([q.text for q in questions])
        settings = {s: RelPathParams(plan=None, paths=1, fallback=None, max_hops=args.max_hops,
                                     hub_seed=args.seed, **_setting(s))
                    for s in args.hub_edges}
        fetch_only = FetchOnly(store)  # "<n>-fetch": the DuckDB store's step before 2026-12-03 (fetch, then sample)
        t0 = time.perf_counter()
        relpath._groups_of(store, None)  # the edge groups, built once per store (DuckDB: written to disk)
        info["groups_build_s"] = round(time.perf_counter() - t0, 1)
        kept: list[int] = [0]
        real = relpath._step

        def counted(*a, **k):  # the edges every step keeps, whatever the setting (the work, counted)
            out = real(*a, **k)
            kept[0] += sum(len(e) for e, _, _ in out.values())
            return out

        relpath._step = counted
        rows: dict[str, list[dict]] = {s: [] for s in settings}
        try:
            names = list(settings)
            cheap = min(names, key=lambda s: settings[s].hub_edges or float("inf"))
            for i, (q, v) in enumerate(zip(questions, vecs)):
                # untimed first: the question's words and relation phrases get encoded (a per-process cache) here,
                # not in whichever setting runs first; then the settings in an order rotated per question
                retrieve_relpath(question=q, query_vec=v, kg=store, index=index, params=settings[cheap], hops=0,
                                 max_edges=0)
                for s in names[i % len(names):] + names[:i % len(names)]:
                    p = settings[s]
                    kept[:] = [0]
                    t0 = time.perf_counter()
                    sub = retrieve_relpath(question=q, query_vec=v, kg=fetch_only if s.endswith("-fetch") else store,
                                           index=index, params=p, hops=0, max_edges=0)
                    ms = (time.perf_counter() - t0) * 1000
                    ends = sub.trace.get("ends", [])
                    rows[s].append({"hops": hops[i], "ms": ms, "edges": kept[0],
                                    "recall": retrieval_recall(answer_ids=q.answer_ids,
                                                               node_ids=sub.node_ids.tolist()) or 0.0,
                                    "ends_recall": retrieval_recall(answer_ids=q.answer_ids, node_ids=ends) or 0.0,
                                    "sampled": sub.trace.get("hub_groups_sampled", 0)})
                if (i + 1) % 25 == 0:
                    print(f"[relpath_hubs] {size}: {i + 1}/{len(questions)} questions", file=sys.stderr, flush=True)
        finally:
            relpath._step = real
        info["settings"] = {s: {**summarize(r), "by_hops": {str(h): summarize([x for x in r if x["hops"] == h])
                                                             for h in sorted(set(hops))}}
                            for s, r in rows.items()}
        del store
        gc.collect()
    return info


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", nargs="+", default=["1M", "10M"], help="KG sizes: 200k, 1M, 10M, ...")
    ap.add_argument("--questions", type=int, default=150, help="questions per size, split evenly over --hops")
    ap.add_argument("--hops", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--hub-edges", nargs="+", default=["off", "10000", "1000", "100"],
                    help="hub_edges settings: off (null), a number, or <n>b<budget> for a hub_budget other "
                         "than relpath's default (100b0: every group over 100 sampled, the default before 2026-12-04)")
    ap.add_argument("--store", choices=["memory", "duckdb"], default="memory",
                    help="the KG as arrays (KGStore) or through the DuckDB store; with duckdb, a setting '<n>-fetch' "
                         "times the step that fetches a hub's edges before sampling (the one before 2026-12-03)")
    ap.add_argument("--max-hops", type=int, default=3, help="relpath.max_hops")
    ap.add_argument("--max-answers", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0, help="seed of the KG, the questions and the hub sample")
    ap.add_argument("--out", default=str(ROOT / "reports" / "bench" / "relpath_hubs.json"))
    args = ap.parse_args()
    out = Path(args.out)
    old = json.loads(out.read_text()) if out.exists() else {}
    # the kept sizes' stamps go with them (bench._machine.finish moves the file's run into earlier_runs)
    result = {**{k: old[k] for k in ("run", "earlier_runs") if k in old},
              "machine": machine(), "synthetic": True, "synth_params": SYNTH, "sizes": old.get("sizes", {}),
              "setup": {"questions": args.questions, "hops": args.hops, "max_answers": args.max_answers,
                        "seed": args.seed, "hub_edges": args.hub_edges, "max_hops": args.max_hops,
                        "relpath": "zero-shot (plan null), paths 1, fallback null, no entity vectors"},
              "note": "SYNTHETIC KGs (kgrag.kg.synth); per hub_edges setting: answer_recall (the subgraph's nodes), "
                      "ends_recall (the chosen sequence's ends), all_answers (share with recall 1), edges_kept "
                      "(edges the beam's steps kept per question: the work, counted), hub_groups_sampled, ms per "
                      "question (wall; compare only on an idle run: load_warning null)"}
    for size in args.sizes:
        result["sizes"][size] = run_size(size, args)
        print(f"[relpath_hubs] {size}: " + json.dumps({s: {k: v for k, v in x.items() if k != "by_hops"}
                                                         for s, x in result["sizes"][size]["settings"].items()}),
              file=sys.stderr, flush=True)
        write_result(str(out), dict(result))


if __name__ == "__main__":
    main()
