"""Benchmark: the ``rank`` reasoner (entities of the retrieved context scored by the LLM) against the ``answer``
reasoner (generation), same questions, same retrieval, same prompt, SmolLM2-135M through ``llamacpp``.

For each MetaQA hop count given (``--data HOPS=DIR``, DIR holding a pipeline's ``validated/kg.duckdb`` and
``retrieve/retrieved.parquet`` of that hop count's default 200-question sample) it computes the contexts as the
generate stage does (``generate`` params of params.yaml), runs both reasoners through the LLM call cache
``--cache`` (a copy of another run's cache may seed it: ``--seed-cache``; the original is only read), and
writes ``reports/bench/rank.json``: per hop count ``questions``, ``retrieval`` (the retrieve method and params
of the retrieved file), ``hit_at_1_rank``, ``hit_at_1_answer``, ``hit_any_rank``, ``hit_any_answer`` (and F1).
Hit@1 does not depend on machine load; the timings recorded are indicative only. ``--distance-hops`` sets
``rank.distance`` to each hop count (candidates in the answer ring), ``--variants`` adds the grid distance
0 / hops x normalize mean / sum on the same questions (``variants``: chosen on these questions, so the best
of them is an optimistic figure; see docs/inference.md).

Example (1-hop retrieval in this checkout, the 2-hop one of another checkout)::

    python -m bench.rank --data 1=data --data 2=/work/main/data
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

from bench.common import machine, write_result

from kgrag import io
from kgrag import schema as S
from kgrag.kg.duckdb_io import read_tables
from kgrag.evaluation.evaluate import answer_scores
from kgrag.experiment import Experiment, Files
from kgrag.llm.calls import CallCache, LLMClient
from kgrag.params import ReasonParams, load
from kgrag.registry import BACKENDS
from kgrag.reasoning.generate import contexts_for, reason_rows, sampling_of
from kgrag.kg.store import questions_from_table


class CacheOnlyGeneration:
    """The backend for scoring; generation requests not in the call cache fail with ``not cached`` (the
    ``answer`` rows of ``--answer-cached-only``: another run's generations reused, none made here)."""

    def __init__(self, backend) -> None:
        self.backend, self.model_id = backend, backend.model_id

    def generate(self, requests, on_reply=None):
        from kgrag.llm.calls import LLMReply

        out = [None] * len(requests)
        pos = [i for i, r in enumerate(requests) if r.scoring]
        stream = None if on_reply is None else (lambda k, rep: on_reply(pos[k], rep))  # noqa: E731
        for i, rep in zip(pos, self.backend.generate([requests[i] for i in pos], on_reply=stream) if pos else []):
            out[i] = rep
        return [o if o is not None else LLMReply(error="not cached (--answer-cached-only)") for o in out]


def run_hops(*, data_dir: Path, client: LLMClient, params, limit: int, rank_json: str, shard: int,
             variants: list[dict] = ()) -> dict:
    """Both reasoners on one hop count's questions; their Hit@1 / Hit / F1. ``variants``: further rank params
    (each a dict), scored on the same questions and listed under ``variants``."""
    db = (data_dir / "validated" / "kg.duckdb").resolve()
    qtable = read_tables(db, ("questions",))["questions"]
    questions = questions_from_table(qtable)
    retrieved = {r[S.QUESTION_ID]: r for r in io.read_parquet(data_dir / "retrieve" / "retrieved.parquet").to_pylist()}
    questions = [q for q in questions if q.question_id in retrieved][: limit or None]
    # this hop count's KG; the LLM client is the bench's own (``client``: its --cache, --answer-cached-only)
    kg = Experiment(params, Files(db=str(db))).kg
    g = params.generate
    contexts = contexts_for([retrieved[q.question_id] for q in questions], kg=kg, params=g)
    sampling = sampling_of(params)
    out: dict = {"questions": len(questions), "missing_retrieval": len(questions_from_table(qtable)) - len(retrieved)}
    rec = data_dir / "timings" / "retrieve" / "timing.json"  # the retrieve stage's run record (kgrag.timings)
    info = json.loads(rec.read_text()) if rec.exists() else {}
    method = {r[S.MODULE] for r in retrieved.values()}
    out["retrieval"] = {"method": sorted(method), "file": str(data_dir / "retrieve" / "retrieved.parquet"),
                        **{k: v for k, v in info.items() if k in ("params", "params_hash", "method")}}
    runs = [("rank", ReasonParams.model_validate({"method": "rank", "rank": json.loads(rank_json)})),
            ("answer", ReasonParams(method="answer"))]
    runs += [(f"variant{i}", ReasonParams.model_validate({"method": "rank", "rank": v})) for i, v in enumerate(variants)]
    for name, reason in runs:
        t0 = time.perf_counter()
        rows = []
        for s in range(0, len(questions), shard):  # shards as the generate flow has them
            rows += reason_rows(questions=questions[s: s + shard], contexts=contexts[s: s + shard], client=client,
                                reason=reason, sampling=sampling, kg=kg)
        secs = time.perf_counter() - t0
        scores = [answer_scores(prediction=r[S.PREDICTION], predicted=r[S.PREDICTED_ANSWERS], gold=q.answers)
                  for r, q in zip(rows, questions) if not r[S.FAILED]]
        n = max(len(scores), 1)
        out[f"questions_{name}"] = len(scores)  # answered (with --answer-cached-only: found in the cache)
        for k in ("hit_at_1", "hit_any", "f1"):
            out[f"{k}_{name}"] = round(sum(x[k] for x in scores) / n, 4)
        out[f"failed_{name}"] = sum(r[S.FAILED] for r in rows)
        out[f"seconds_{name}"] = round(secs, 1)
        out[f"cached_{name}"] = sum(r[S.CACHED] for r in rows)
        print(f"{data_dir} {name}: {({k: v for k, v in out.items() if k.endswith(name)})}", file=sys.stderr)
    if variants:
        out["variants"] = [{"rank": v, **{k: out.pop(f"{k}_variant{i}") for k in
                                          ("hit_at_1", "hit_any", "f1", "failed", "questions", "seconds", "cached")}}
                           for i, v in enumerate(variants)]
    return out


def main() -> None:
    """Run the benchmark."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", action="append", default=[], metavar="HOPS=DIR",
                    help="hop count and the data folder of a pipeline run on it (repeatable; default 2=data)")
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--rank", default="{}", help="rank params as JSON, e.g. '{\"normalize\": \"sum\"}'")
    ap.add_argument("--distance-hops", action="store_true",
                    help="rank.distance = each --data's hop count (candidates in the answer ring of a k-hop question)")
    ap.add_argument("--variants", action="store_true",
                    help="also score rank with distance 0 / the hop count x normalize mean / sum on the same "
                         "questions (normalize reuses the scoring calls: only the distance changes them)")
    ap.add_argument("--limit", type=int, default=0, help="first N questions only (0 = all)")
    ap.add_argument("--cache", default=".kgrag_cache/bench_rank_calls.sqlite")
    ap.add_argument("--seed-cache", default=None, help="copy this call cache to --cache first when it is missing")
    ap.add_argument("--answer-cached-only", action="store_true",
                    help="answer rows only from the call cache (no generation); uncached questions left out of "
                         "the answer metrics and counted in failed_answer")
    ap.add_argument("--answer-metrics", action="append", default=[], metavar="HOPS=METRICS_JSON",
                    help="answer row of a hop count from a pipeline run's reports/metrics.json (same sample, "
                         "retrieval and prompt) where it is not computed here (e.g. with --answer-cached-only)")
    ap.add_argument("--out", default="reports/bench/rank.json")
    args = ap.parse_args()
    params = load(args.params)
    if args.seed_cache and not Path(args.cache).exists():
        Path(args.cache).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(args.seed_cache, args.cache)
    g = params.generate
    # the client is built here, not as an Experiment's: the backend may be wrapped (CacheOnlyGeneration, which
    # kgrag.llm.clients.client_for cannot do), and its call cache is --cache, not the pipeline's
    backend = BACKENDS.get(g.backend).impl(g.module_params(), timeout_s=g.timeout_s)
    if args.answer_cached_only:
        backend = CacheOnlyGeneration(backend)
    client = LLMClient(backend, cache=CallCache(args.cache), retries=0 if args.answer_cached_only else g.retries,
                       backoff_s=g.backoff_s)
    result: dict = {"machine": machine(), "model": backend.model_id,
                    "rank_params": json.loads(args.rank), "targets": {"1": 0.6, "2": 0.4},
                    "answer_cached_only": args.answer_cached_only}
    for spec in args.data or ["2=data"]:
        hops, d = spec.split("=", 1)
        rank_json = args.rank
        if args.distance_hops:
            rank_json = json.dumps({**json.loads(args.rank), "distance": int(hops)})
        grid = [{"distance": dist, "normalize": norm} for dist in (0, int(hops)) for norm in ("mean", "sum")]
        result[hops] = run_hops(data_dir=Path(d), client=client, params=params, limit=args.limit,
                                rank_json=rank_json, shard=g.shard_size, variants=grid if args.variants else [])
        result[hops]["rank_params"] = json.loads(rank_json)
        result[hops]["target_met"] = result[hops]["hit_at_1_rank"] >= result["targets"].get(hops, 0.0)
    for spec in args.answer_metrics:
        hops, path = spec.split("=", 1)
        if hops in result and not result[hops].get("questions_answer"):
            m = json.loads(Path(path).read_text())
            val = lambda k: m[k]["mean"] if isinstance(m[k], dict) else m[k]  # noqa: E731
            result[hops].update(hit_at_1_answer=val("hit_at_1"), hit_any_answer=val("hit_any"), f1_answer=val("f1"),
                                answer_source=path)
    # hop counts not run now keep their entry of an earlier run (one hop count per process is fine)
    if Path(args.out).exists():
        old = json.loads(Path(args.out).read_text())
        for k, v in old.items():
            if k.isdigit() and k not in result:
                result[k] = v
    # load record and warning: bench/_machine.py (Hit@1 does not depend on load; the seconds do)
    write_result(args.out, result)


if __name__ == "__main__":
    main()
