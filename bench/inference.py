"""Benchmark: questions per minute of the embedded-LLM path today (``answer`` reasoner, generation through
``Llama.create_chat_completion``, one question at a time, the packaged Q4_1 weights as is) against the new
default path (``rank`` reasoner: one scoring call per question on the multi-sequence llama.cpp context,
candidates batched on the prompt's KV state; weights converted as ``generate.llamacpp.weights`` says, Q8_0 by
default, so llama.cpp's tiled CPU kernels run), same questions, same run, same machine, no LLM call cache.
``levers`` holds the two changes apart (rank on the packaged weights, answer on the converted ones), and the
rank path with ``exact_scores: false`` (``exact_scores_cost``: the default's seconds over that one's), and the
``answer`` reasoner as it runs now (``answer_now``: converted weights, tokens generated on ``decode_threads``;
the paths before generate on ``n_threads``).
``speedup`` compares the two paths on the same contexts (the default experiment's retrieval);
``previous_default`` runs today's path on the retrieval the default experiment had before (``pcst``, computed
here for the same questions) and ``speedup_vs_previous_default`` is the new default experiment's questions
per minute over that one: it mixes the inference change with the shorter contexts of the new retrieval.

Questions: the first ``--questions`` (default 48) of the default experiment (``data/validated/kg.duckdb`` and
``data/retrieve/retrieved.parquet``, contexts as the generate stage builds them). Writes
``reports/bench/inference.json``: ``sequential_qpm`` (today), ``batched_qpm`` (new), ``speedup``, prefill and
decode tokens/s of each (llama.cpp's own perf counters), ``same_answers`` (how many predictions are identical,
with the reason they may differ), Hit@1 of each on these questions, load average before and after, and ``load_warning`` when the machine was
busy before the run or other processes used its cores during it (``bench/_machine.py``: the load average
after includes this bench's own llama.cpp threads).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import time

from bench.common import machine, write_result

from kgrag import io
from kgrag import schema as S
from kgrag.kg.duckdb_io import read_tables
from kgrag.evaluation.evaluate import answer_scores
from kgrag.experiment import Experiment, Files
from kgrag.llm.calls import LLMClient
from kgrag.params import ReasonParams, load
from kgrag.registry import BACKENDS
from kgrag.reasoning.generate import contexts_for, reason_rows, sampling_of
from kgrag.retrieval.run import retrieve_with
from kgrag.kg.store import questions_from_table


def perf(ctx) -> dict:
    """llama.cpp's perf counters of a context: prompt (prefill) and generated (decode) tokens and ms."""
    import llama_cpp

    d = llama_cpp.llama_perf_context(ctx)
    return {"prefill_tokens": int(d.n_p_eval), "prefill_ms": float(d.t_p_eval_ms), "decode_tokens": int(d.n_eval),
            "decode_ms": float(d.t_eval_ms)}


def rates(p: dict) -> dict:
    """Tokens per second from perf counters."""
    return {**p, "prefill_tok_s": p["prefill_tokens"] / (p["prefill_ms"] / 1000) if p["prefill_ms"] else None,
            "decode_tok_s": p["decode_tokens"] / (p["decode_ms"] / 1000) if p["decode_ms"] else None}


def main() -> None:
    """Run the benchmark."""
    import llama_cpp

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--questions", type=int, default=48)
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--previous-retriever", default="pcst",
                    help="the retriever of the default experiment before this issue (PCST): its contexts feed a "
                         "second run of today's path, the previous default experiment end to end")
    ap.add_argument("--out", default="reports/bench/inference.json")
    args = ap.parse_args()
    params = load(args.params)
    g = params.generate
    if g.backend != "llamacpp":
        raise SystemExit("bench/inference.py measures the embedded llamacpp backend (generate.backend: llamacpp)")
    # the default experiment's KG and index; no LLM call cache: the clients below are the bench's own
    # (LLMClient on backends built with other llamacpp params, cache None), every call is made and timed
    exp = Experiment(params, dataclasses.replace(Files.of(), cache=None))
    questions = questions_from_table(read_tables(exp.files.db, ("questions",))["questions"])
    retrieved = {r[S.QUESTION_ID]: r for r in io.read_parquet(io.RETRIEVE / "retrieved.parquet").to_pylist()}
    questions = [q for q in questions if q.question_id in retrieved][: args.questions]
    kg = exp.kg
    contexts = contexts_for([retrieved[q.question_id] for q in questions], kg=kg, params=g)
    # the previous default experiment's retrieval (PCST), same questions, computed here
    if exp.index is None:
        raise SystemExit(f"no embedding index in {exp.files.index}: run `dvc repro index` first")
    prev_params = params.retrieve.model_copy(update={"method": args.previous_retriever})
    prev_rows = retrieve_with(exp.with_retrieve(prev_params), questions)
    prev_contexts = contexts_for(prev_rows, kg=kg, params=g)
    sampling = sampling_of(params)
    new_params = g.module_params()
    # today's path: the packaged GGUF as is, tokens generated on n_threads (before decode_threads existed)
    today_params = new_params.model_copy(update={"weights": "as-is", "decode_threads": new_params.n_threads})
    result: dict = {"machine": machine(), "questions": len(questions), "llamacpp": new_params.model_dump(),
                    "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY")}

    def answer_path(backend, contexts=contexts) -> tuple[list[dict], float, dict]:
        """The answer reasoner, one question at a time (what `run_one` does), generation."""
        client = LLMClient(backend, cache=None, retries=0)
        backend.llm.create_chat_completion(messages=[{"role": "user", "content": "hi"}], max_tokens=1)  # warm-up
        llama_cpp.llama_perf_context_reset(backend.llm._ctx.ctx)
        t0 = time.perf_counter()
        rows = []
        for q, c in zip(questions, contexts):
            rows += reason_rows(questions=[q], contexts=[c], client=client, reason=ReasonParams(method="answer"),
                                sampling=sampling, kg=kg)
        return rows, time.perf_counter() - t0, rates(perf(backend.llm._ctx.ctx))

    def rank_path(backend) -> tuple[list[dict], float, dict]:
        """The rank reasoner, the whole batch advanced together; scoring on the multi-sequence context."""
        client = LLMClient(backend, cache=None, retries=0)
        eng = backend.engine
        eng.score([1, 2, 3], [[4]])  # warm-up
        llama_cpp.llama_perf_context_reset(eng.ctx.ctx)
        ev0, re0 = eng.evaluated, eng.reused
        t0 = time.perf_counter()
        rows = reason_rows(questions=questions, contexts=contexts, client=client, reason=ReasonParams(method="rank"),
                           sampling=sampling, kg=kg)
        return rows, time.perf_counter() - t0, {**rates(perf(eng.ctx.ctx)), "prompt_tokens_evaluated":
                                                eng.evaluated - ev0, "prompt_tokens_reused": eng.reused - re0}

    n = len(questions)
    hit = lambda rows: sum(answer_scores(prediction=r[S.PREDICTION], predicted=r[S.PREDICTED_ANSWERS],  # noqa: E731
                                         gold=q.answers)["hit_at_1"] for r, q in zip(rows, questions)) / max(n, 1)
    same = lambda a, b: sum(x[S.PREDICTION].strip() == y[S.PREDICTION].strip() for x, y in zip(a, b))  # noqa: E731
    summary = lambda rows, secs, prf, path, model: {  # noqa: E731
        "path": path, "model": model, "seconds": secs, "qpm": n / secs * 60, **prf,
        "failed": sum(r[S.FAILED] for r in rows), "hit_at_1": hit(rows)}

    # one backend (one loaded model) at a time: today's weights, then the converted ones
    today = BACKENDS.get("llamacpp").impl(today_params, timeout_s=g.timeout_s)
    seq, ts, seq_perf = answer_path(today)
    prev, tp, prev_perf = answer_path(today, prev_contexts)
    rank_today, trt, rank_today_perf = rank_path(today)
    weights_backend = BACKENDS.get("llamacpp").impl(
        new_params.model_copy(update={"decode_threads": new_params.n_threads}), timeout_s=g.timeout_s)
    ans_new, tan, ans_new_perf = answer_path(weights_backend)  # the converted weights alone
    new_backend = BACKENDS.get("llamacpp").impl(new_params, timeout_s=g.timeout_s)
    ans_now, tnow, ans_now_perf = answer_path(new_backend)  # answer as it runs now (decode_threads too)
    new, tb, new_perf = rank_path(new_backend)
    # the cost of exact scores: the same rank path in the shared-KV layout (scores can depend on the neighbours)
    shared_backend = BACKENDS.get("llamacpp").impl(new_params.model_copy(update={"exact_scores": False}),
                                                   timeout_s=g.timeout_s)
    rank_shared, tsh, rank_shared_perf = rank_path(shared_backend)
    seq_perf["prompt_tokens"] = sum(r[S.TOKENS_IN] for r in seq)
    result.update({
        "model": new_backend.model_id,
        "sequential_seconds": ts, "batched_seconds": tb,
        "sequential_qpm": n / ts * 60, "batched_qpm": n / tb * 60, "speedup": ts / tb,
        # today's default path: answer reasoner on the packaged weights; prompt_tokens of the requests vs
        # prefill_tokens evaluated: the difference is the common prefix Llama.generate kept in the KV cache
        "sequential": summary(seq, ts, seq_perf, "answer reasoner, create_chat_completion, one question at a "
                              "time", today.model_id),
        # the new default path: rank reasoner on the converted weights
        "batched": summary(new, tb, new_perf, "rank reasoner, one scoring call per question, candidates batched "
                           "on the prompt's KV state (llamacpp_engine.ScoreEngine)", new_backend.model_id),
        # the previous default experiment end to end: today's path on its own (PCST) retrieval; the new default
        # path's retrieval (relpath with the learnt plan) gives shorter contexts, so this ratio mixes both changes
        "previous_default": {**summary(prev, tp, prev_perf, f"answer reasoner on {args.previous_retriever} "
                                       "retrieval (the default experiment before issues 14/15)", today.model_id),
                             "retriever": args.previous_retriever,
                             "context_triples_mean": sum(len(r[S.TRIPLE_HEADS]) for r in prev_rows) / max(n, 1)},
        "speedup_vs_previous_default": tp / tb,
        # the two levers apart, same questions, same run
        "levers": {
            "rank_packaged_weights": summary(rank_today, trt, rank_today_perf, "rank reasoner", today.model_id),
            "answer_converted_weights": summary(ans_new, tan, ans_new_perf, "answer reasoner", new_backend.model_id),
            "rank_kv_shared": summary(rank_shared, tsh, rank_shared_perf, "rank reasoner, exact_scores: false (one "
                                      "shared KV cache)", new_backend.model_id),
            "exact_scores_cost": tb / tsh, "same_ranks_kv_shared": same(new, rank_shared),
            "answer_now": summary(ans_now, tnow, ans_now_perf, f"answer reasoner, tokens generated on "
                                  f"decode_threads={new_params.decode_threads} (prompts on n_threads="
                                  f"{new_params.n_threads})", new_backend.model_id),
            "speedup_decode_threads": tan / tnow, "same_answers_decode_threads": same(ans_new, ans_now),
            "speedup_answer_now": ts / tnow,
            "speedup_reasoner_only": ts / trt, "speedup_weights_only": ts / tan,
            "same_answers_weights": same(seq, ans_new), "same_ranks_weights": same(rank_today, new),
            "same_reason": "same reasoner, packaged vs converted weights: differences are the weights' rounding "
                           "(the Q4_1 values re-rounded to Q8_0) and the kernels' activation types (Q4_1 x Q8_1 dot "
                           "products vs Q8_0 x Q8_0 tiles), which can flip a greedy token or a close ranking",
        },
        # where the time goes: today's path spends prefill_ms of its wall time evaluating prompt tokens
        "sequential_prefill_share": seq_perf["prefill_ms"] / 1000 / ts,
        "speedup_bound_same_prompts": ts / (seq_perf["prefill_ms"] / 1000),
        "same_answers": same(seq, new),
        "same_answers_reason": "the paths answer differently by design: rank outputs the best-scored context "
                               "entity, answer generates free text; equal only where the generated answer is "
                               "exactly that entity",
    })
    # the load warning (load before the run, other processes' CPU use during it): bench/_machine.py
    write_result(args.out, result)


if __name__ == "__main__":
    main()
