"""Benchmark: the default experiment on MetaQA questions the way a user asks them: 1-, 2- and 3-hop questions
mixed, no hop count given to any module, the no-LLM baselines beside every number.

It reads the KG and index a pipeline run built (``data/validated/kg.duckdb``, ``data/index``, the relation-path
plan ``data/relplan``), draws ``--per-hop`` questions of each hop count's ``--split`` file (seeded), and runs
the experiment of ``params.yaml`` (with ``-S key=value`` overrides, as ``dvc exp run -S``) on them through the
same parts and functions as the retrieve and generate flows (one ``kgrag.experiment.Experiment`` per
configuration; ``kgrag.retrieval.run.retrieve_with``, ``kgrag.reasoning.generate.reason_rows``) and scores them with every
registered metric (``kgrag.evaluation.evaluate.evaluate_rows``).
Questions are loaded with ``declared_hops`` off unless ``retrieve.oracle_hops`` is set, so no module can read
their hop count.

**Select on dev, report on test.** On ``--split dev`` the questions the relplan stage trained on (its
``relplan.questions`` per hop count, ``relplan.seed``) are left out, so that dev numbers are of questions no
choice was fitted to; the test split is for the single, final measurement of the chosen configuration.

Writes ``--out`` (default ``reports/bench/generalize.json``): per configuration (``--config NAME=OVERRIDES``,
repeatable; overrides ``;``-separated), per hop count and overall: questions, Hit@1 with its bootstrap 95%
interval, F1 of the answer list and of the first answer (``f1_top1``), answers per question, retrieval recall,
``baseline_first``, ``baseline_random``, ``llm_lift``, seconds. ``--link``: the questions without brackets,
their topic entities linked from the text (``kgrag.kg.linking``).

Example (the default, then the oracle, on 100 dev questions per hop count)::

    python -m bench.generalize --split dev --per-hop 100 --config default= \\
        --config oracle='retrieve.oracle_hops=true' --out reports/bench/generalize_dev.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from bench.common import machine, write_result

from kgrag import schema as S
from kgrag.reasoning.generate import contexts_for, proposals_for, reason_rows, sampling_of
from kgrag.evaluation.evaluate import evaluate_rows
from kgrag.experiment import Experiment, Files
from kgrag.evaluation.metrics import bootstrap_ci
from kgrag.params import load
from kgrag.registry import LOADERS
from kgrag.retrieval.run import retrieve_with
from kgrag.kg.store import questions_from_table


def question_rows(*, params, split: str, per_hop: int, seed: int, kg, hops=(1, 2, 3), link: bool = False
                  ) -> list[dict]:
    """``per_hop`` questions of each MetaQA ``split`` file (seeded), ids mapped to the validated KG by name;
    on the relplan stage's split, the questions it trained on are left out first. ``link``: the brackets
    removed and the topic entities linked from the text (``kgrag.kg.linking``, as ``data.link_entities``)."""
    d, rp = params.data, params.relplan
    lp = d.loader_params()
    load_qa = LOADERS.get("metaqa").impl
    out: list[dict] = []
    for k in hops:
        tabs = load_qa(**{**lp.model_dump(), "hops": k, "split": split, "sample": 0, "seed": 0})
        rows = tabs.questions.to_pylist()
        if split == rp.split and k in rp.hops:
            trained = set(load_qa(**{**lp.model_dump(), "hops": k, "split": split, "sample": rp.questions,
                                     "seed": rp.seed}).questions[S.QUESTION_ID].to_pylist())
            rows = [r for r in rows if r[S.QUESTION_ID] not in trained]
        pick = np.sort(np.random.default_rng(seed).choice(len(rows), size=min(per_hop, len(rows)), replace=False))
        names = dict(zip(tabs.entities[S.ENTITY_ID].to_pylist(), tabs.entities[S.NAME].to_pylist()))
        for i in pick.tolist():
            r = dict(rows[i])
            r[S.TOPIC_IDS] = kg.ids_of([names[x] for x in r[S.TOPIC_IDS] if x is not None])
            if link:
                r[S.TEXT] = r[S.TEXT].replace("[", "").replace("]", "")
                r[S.TOPIC_IDS] = kg.find_entities(r[S.TEXT])
            r[S.ANSWER_IDS] = kg.ids_of([names[x] for x in r[S.ANSWER_IDS] if x is not None])
            r[S.ANSWERABLE] = bool(r[S.ANSWER_IDS])
            out.append(r)
    return out


def run_config(*, exp: Experiment, qrows: list[dict], shard: int = 25) -> dict:
    """The experiment ``exp`` (its params, KG store, index and LLM client) on ``qrows``: metrics overall and per
    hop count."""
    params, kg, index = exp.params, exp.kg, exp.index
    table = pa.Table.from_pylist([{k: r.get(k) for k in S.QUESTIONS.names} for r in qrows], schema=S.QUESTIONS)
    qs = questions_from_table(table, declared_hops=params.retrieve.oracle_hops)
    t0 = time.perf_counter()
    retrieved = []
    for s in range(0, len(qs), params.retrieve.shard_size):
        retrieved += retrieve_with(exp, qs[s: s + params.retrieve.shard_size])
    t_ret = time.perf_counter() - t0
    g = params.generate
    client = exp.client  # built before the generate phase is timed (the call cache .kgrag_cache/llm_calls.sqlite)
    sampling = sampling_of(params)
    gen_q = questions_from_table(table)  # the generate flow never hands a hop count on
    contexts = contexts_for(retrieved, kg=kg, params=g)
    proposed = proposals_for(retrieved, kg=kg)
    t0 = time.perf_counter()
    gens = []
    for s in range(0, len(qs), shard):
        gens += reason_rows(questions=gen_q[s: s + shard], contexts=contexts[s: s + shard], client=client,
                            reason=params.reason, sampling=sampling, kg=kg, index=index, proposed=proposed[s: s + shard])
        print(f"  {min(s + shard, len(qs))}/{len(qs)} answered", file=sys.stderr)
    t_gen = time.perf_counter() - t0
    rows, metrics = evaluate_rows(questions=qrows, retrieved=retrieved, generations=gens,
                                  max_context_triples=g.max_context_triples)

    cost = {g[S.QUESTION_ID]: g for g in gens}
    per_q_s = t_gen / max(len(gens), 1)

    def block(sub: list[dict]) -> dict:
        n = len(sub)
        mine = [cost[x[S.QUESTION_ID]] for x in sub if x[S.QUESTION_ID] in cost]
        hit = [x["hit_at_1"] for x in sub]
        low, high = bootstrap_ci(hit, resamples=1000, seed=0)
        mean = lambda k: round(sum(x[k] or 0 for x in sub) / max(n, 1), 4)  # noqa: E731
        rec = [x["retrieval_recall"] for x in sub if x.get("retrieval_recall") is not None]
        first, rand = mean("hit_baseline_first"), mean("hit_baseline_random")
        return {"questions": n, "hit_at_1": mean("hit_at_1"), "hit_at_1_ci95": [low, high], "f1": mean("f1"),
                "f1_top1": mean("f1_top1"), "answers_per_question": round(
                    sum(len(x.get(S.PREDICTED_ANSWERS) or []) for x in sub) / max(n, 1), 2),
                "hit_any": mean("hit_any"), "retrieval_recall": round(sum(rec) / len(rec), 4) if rec else None,
                "baseline_first": first, "baseline_random": rand,
                "llm_lift": round(mean("hit_at_1") - max(first, rand), 4),
                # the reasoner's LLM calls and tokens per question (generations.parquet's requests, tokens_in +
                # tokens_out); seconds: the whole generate phase over all questions, per question (cached calls
                # cost nothing: run on a cold call cache to time it)
                "calls_per_question": round(sum(g[S.REQUESTS] for g in mine) / max(len(mine), 1), 2),
                "tokens_per_question": round(sum(g[S.TOKENS_IN] + g[S.TOKENS_OUT] for g in mine)
                                             / max(len(mine), 1), 1),
                "seconds_per_question": round(per_q_s, 2),
                "answers_from_cache": sum(g[S.CACHED] for g in mine)}

    out = {"all": block(rows), "by_hops": {}}
    # the LLM's Hit@1 minus the first candidate's, paired per question, with its bootstrap interval (metrics.json's)
    out["all"]["llm_lift_paired"] = metrics.get("llm_lift_paired")
    for k in sorted({r[S.HOPS] for r in rows}):
        out["by_hops"][str(k)] = block([r for r in rows if r[S.HOPS] == k])
    out["seconds"] = {"retrieve": round(t_ret, 1), "generate": round(t_gen, 1)}
    out["llm_calls"] = sum(len(json.loads(x[S.TRACE] or "{}").get("calls", [])) for x in gens)
    asked = {q[S.QUESTION_ID]: q for q in qrows}
    out["_rows"] = [{"question": asked[r[S.QUESTION_ID]][S.TEXT], S.HOPS: r.get(S.HOPS),
                     "gold": asked[r[S.QUESTION_ID]].get(S.ANSWERS),
                     S.PREDICTED_ANSWERS: r.get(S.PREDICTED_ANSWERS), "hit_at_1": r.get("hit_at_1"),
                     S.TRACE: cost[r[S.QUESTION_ID]][S.TRACE] if r[S.QUESTION_ID] in cost else None,
                     S.QUESTION_ID: r[S.QUESTION_ID]} for r in rows]
    return out


def main() -> None:
    """Run the benchmark."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--split", choices=["dev", "test"], required=True)
    ap.add_argument("--per-hop", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0, help="seed of the question draw")
    ap.add_argument("--config", action="append", default=[], metavar="NAME=OVERRIDES",
                    help="a configuration: params.yaml with these ';'-separated -S overrides (repeatable)")
    ap.add_argument("--link", action="store_true", help="questions without brackets, topics linked from the text")
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--out", default="reports/bench/generalize.json")
    ap.add_argument("--rows", default=None, metavar="FOLDER",
                    help="also write each configuration's per-question rows (question, gold, answers, Hit@1, the "
                         "reasoner's trace) to FOLDER/NAME.jsonl, to read its misses")
    args = ap.parse_args()
    configs = [c.split("=", 1) for c in (args.config or ["default="])]
    base = load(args.params)
    files = Files.of()  # the pipeline run's KG, index and LLM call cache in the working directory
    kg = Experiment(base, files).kg
    qrows = question_rows(params=base, split=args.split, per_hop=args.per_hop, seed=args.seed, kg=kg, link=args.link)
    result: dict = {"machine": machine(), "split": args.split, "per_hop": args.per_hop, "seed": args.seed,
                    "linked": args.link,
                    "questions": len(qrows), "configs": {},
                    "note": "MetaQA 1/2/3-hop questions mixed; no module sees a hop count unless "
                            "retrieve.oracle_hops; on dev the relplan stage's training questions are left out"}
    for name, overrides in configs:
        ov = [o for o in overrides.split(";") if o.strip()]
        params = load(args.params, ov)
        print(f"[generalize] {name}: {ov}", file=sys.stderr)
        # the configuration's own experiment: its store and index are the process-wide ones of open_store /
        # open_index (opened once for all configurations that share them), its client that of its generate section
        res = run_config(exp=Experiment(params, files), qrows=qrows)
        per_q = res.pop("_rows")
        if args.rows:
            Path(args.rows).mkdir(parents=True, exist_ok=True)
            with open(Path(args.rows) / f"{name}.jsonl", "w") as fh:
                fh.writelines(json.dumps(r, default=str) + "\n" for r in per_q)
        result["configs"][name] = {"overrides": ov, **res}
        a = res["all"]
        print(f"[generalize] {name}: Hit@1 {a['hit_at_1']} {a['hit_at_1_ci95']} lift {a['llm_lift']} "
              f"by hops {[(k, v['hit_at_1'], v['retrieval_recall']) for k, v in res['by_hops'].items()]}",
              file=sys.stderr)
        write_result(args.out, dict(result))  # after every configuration: a cut-off run keeps what it made


if __name__ == "__main__":
    main()
