"""Stage evaluate: per-question scores → reports/predictions.parquet, aggregates → reports/metrics.json; the
stages' run records (wall times, call-cache use) → reports/timings.json (no DVC output: kgrag.timings)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pyarrow as pa

from stages._common import params_from_argv, timed
from kgrag import io, schema as S, timings
from kgrag.evaluation.evaluate import TEXT_COLUMNS, aggregate_rows, chosen_metrics, score_rows, stage_metrics
from kgrag.kg.duckdb_io import read_tables

#: questions scored at a time: the stage holds one chunk's retrieved and generation rows (traces, contexts) and
#: every question's scores without ``TEXT_COLUMNS`` (numbers and short lists), so its memory follows the chunk
CHUNK = 2048


def upstream_stages() -> list[str]:
    """The stages before evaluate, in dvc.yaml's order (the one place the stage order is written)."""
    from kgrag.experiment import stage_order

    order = stage_order()
    return order[: order.index("evaluate")] if "evaluate" in order else order


def judge_client(jb):
    """The LLM judge (``evaluate.judge_backend``) behind the shared LLM call cache and the retry policy."""
    from kgrag.llm.clients import client_for

    return client_for(jb, cache=io.CACHE / "llm_calls.sqlite")


def plan_mode(params) -> str | None:
    """Which relation-path plan relpath ran with (``relplan.source`` as the stage resolved it): ``labelled (N
    questions, <where>)``, ``kg (N question texts labelled by the zero-shot planner, <where>)``, ``kg (<why>): the
    zero-shot planner alone``, ``none: zero-shot``, or ``zero-shot`` without a plan; None for another retriever."""
    if params.retrieve.method != "relpath":
        return None
    plan = params.retrieve.module_params().plan
    if plan is None:
        return "zero-shot"
    meta = Path(plan) / "plan.json"
    info = json.loads(meta.read_text()) if meta.exists() else {}
    source = info.get("source", "labelled" if info.get("labelled") else "none")
    note = f", {info['note']}" if info.get("note") else ""
    if source == "labelled":
        return f"labelled ({info.get('labelled', 0)} questions{note})"
    if source == "kg" and info.get("labelled"):
        return f"kg ({info['labelled']} question texts labelled by the zero-shot planner{note})"
    if source == "kg":
        return f"kg ({info.get('note') or 'no held-out question text'}): the zero-shot planner alone"
    return "none: zero-shot"


def model_mode(params) -> str:
    """Which LLM answered: ``base`` (the packaged model, or generate.llamacpp.model_path's file) or ``tuned (<the
    training data's hash>, <questions> questions)`` from the tune_answer_scorer stage's record."""
    g = params.generate
    if g.model != "tuned":
        return "base" if g.backend != "llamacpp" or g.module_params().model_path is None else \
            f"base ({g.module_params().model_path})"
    rec = io.TUNE / "tune.json"
    info = json.loads(rec.read_text()) if rec.exists() else {}
    return f"tuned (training data {info.get('training_data_hash')}, {info.get('questions')} questions, {info.get('note')})"


def main(argv: list[str] | None = None) -> None:
    """Run the stage."""
    params = params_from_argv(__doc__, argv)
    with timed("evaluate", timings.stage_dir("evaluate"), outputs=[io.REPORTS / "metrics.json"]):
        qtable = read_tables(io.VALIDATED / "kg.duckdb", ("questions",))["questions"]
        ev = params.evaluate
        judge = judge_client(ev.judge_backend) if ev.judge else None  # off: no model is loaded
        chosen = chosen_metrics(judge=judge, judge_max_tokens=ev.judge_backend.max_tokens,
                                judge_seed=ev.judge_backend.seed)
        cap = params.generate.max_context_triples
        ret = io.RowsById(io.RETRIEVE / "retrieved.parquet", S.QUESTION_ID)
        gen = io.RowsById(io.GENERATE / "generations.parquet", S.QUESTION_ID)
        kept: list[dict] = []  # every question's row without its text columns: what the aggregates read
        plots = io.REPORTS / "plots"
        plots.mkdir(parents=True, exist_ok=True)
        with open(plots / "recall_vs_context.csv", "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["question_id", "context_triples", "retrieval_recall", "hit_any", "context_triples_uncapped",
                        "retrieval_recall_uncapped"])

            def chunks():
                for start in range(0, max(qtable.num_rows, 1), CHUNK):
                    qs = qtable.slice(start, CHUNK).to_pylist()
                    ids = [q[S.QUESTION_ID] for q in qs]
                    rows = score_rows(questions=qs, retrieved=ret.take(ids), generations=gen.take(ids),
                                      metrics=chosen, max_context_triples=cap)
                    for r in rows:
                        w.writerow([r["question_id"], r["context_triples"], r["retrieval_recall"], r["hit_any"],
                                    r["context_triples_uncapped"], r["retrieval_recall_uncapped"]])
                        kept.append({k: v for k, v in r.items() if k not in TEXT_COLUMNS})
                    yield pa.Table.from_pylist(rows)

            io.stream_tables(io.REPORTS / "predictions.parquet", chunks())
        metrics = aggregate_rows(kept, chosen, max_context_triples=cap)
        # what this run took: only records of the outputs evaluated here (a stale record is left out)
        retrieve_runs = timings.read_questions("retrieve")
        # multi-stage retrievers (LEGO): per-module metrics here, their times (run records) in timings.json;
        # retrieved.parquet's traces streamed a batch at a time
        traces = (r for b in io.iter_batches(io.RETRIEVE / "retrieved.parquet", [S.QUESTION_ID, S.TRACE])
                  for r in b.to_pylist())
        modules, modules_ms = timings.split_module_times(stage_metrics(
            questions=qtable.select([S.QUESTION_ID, S.ANSWER_IDS]).to_pylist(), retrieved=traces,
            stage_ms={q: r.get(S.STAGE_MS) for q, r in retrieve_runs.items()}))
        run = timings.summary(question_ids=qtable.column(S.QUESTION_ID).to_pylist(),
                              stage_seconds=timings.stage_seconds(upstream_stages()), retrieve=retrieve_runs,
                              generate=timings.read_questions("generate"), retrieval_modules_ms=modules_ms)
        if modules:
            metrics["retrieval_modules"] = modules
        lp = params.data.loader_params()  # hops / split of the selected loader (MetaQA's: data.hops, data.split)
        metrics["setup"] = {"reasoner": params.reason.method, "dataset": params.data.dataset, "task": metrics["task"],
                            "hops": getattr(lp, "hops", None), "split": getattr(lp, "split", None),
                            "retrieve": params.retrieve.method, "backend": params.generate.backend,
                            "context": params.generate.context, "seed": params.data.seed,
                            "constrain_answer": params.reason.constrain_answer,
                            "judge": judge.model_id if judge else None,
                            "oracle_hops": params.retrieve.oracle_hops, "plan": plan_mode(params),
                            "link_entities": params.data.link_entities, "model": model_mode(params)}
        io.write_json(io.REPORTS / "metrics.json", metrics)
        io.write_json(io.REPORTS / "timings.json", run)
    if "accuracy" in metrics:
        print(f"[evaluate] {metrics['task']} task: accuracy={metrics['accuracy']} "
              f"accuracy_gretriever={metrics['accuracy_gretriever']} "
              f"label_unparseable={metrics['label_unparseable']} labels={metrics['label_counts']}")
    print(f"[evaluate] no-LLM baselines: first={metrics.get('baseline_first')} random={metrics.get('baseline_random')}"
          f" llm_lift={metrics.get('llm_lift')}; setup: oracle_hops={metrics['setup']['oracle_hops']} "
          f"plan={metrics['setup']['plan']}")
    print(f"[evaluate] hit_at_1={metrics['hit_at_1']} hit_any={metrics['hit_any']} f1={metrics['f1']} "
          f"rouge_l={metrics['rouge_l']} retrieval_recall={metrics['retrieval_recall']} failed={metrics['failed']} "
          f"(papers' rules: hit_gretriever={metrics['hit_gretriever']} em_tog={metrics['em_tog']})"
          + (f" judge={metrics['judge']} judge_unparseable={metrics['judge_unparseable']}" if judge else ""))


if __name__ == "__main__":
    main()
