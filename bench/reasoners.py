"""Benchmark: batched reasoning (``run_batched``: every question's prompts of a step sent together) against
one question at a time (``run_one``), through a real local OpenAI-compatible server.

The server is llama-cpp-python's (``python -m llama_cpp.server``) serving the packaged SmolLM2-135M GGUF on
loopback. llama-cpp-python 0.3.36's server has no parallel slots (no ``--n_parallel``; its settings have
none, and ``llama_cpp/server/app.py`` serves every request under one global lock around the single
``Llama`` object), so concurrent requests to ONE server process run one after another. Two deployments are
measured:

- ``single_server``: one process, ``--n_threads`` = all cores; concurrent requests queue in it.
- ``multi_server``: ``--servers`` processes (default 2) with ``--n_threads`` = cores / servers each, the
  batch's requests spread round-robin over them: each process is one parallel slot.

For each deployment the ``cot`` reasoner (chain of thought, up to 160 output tokens) runs on the same N real
MetaQA questions (a seeded sample of the pipeline's ``data/validated/kg.duckdb`` questions), same seeds,
greedy decoding, no LLM call cache: batched (all N together, client concurrency >= N) and sequential
(``run_one`` per question). Writes ``reports/bench/reasoners.json``: questions per minute of both and their
ratio; the headline ``batched_qpm`` / ``sequential_qpm`` / ``speedup`` are the multi-server deployment's
(the one where batching can help), with ``speedup_vs_best_sequential`` against the faster sequential one.

Needs ``data/validated/kg.duckdb`` (``dvc repro validate``).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from bench.common import machine, write_result

from kgrag import io
from kgrag.llm.backends import llamacpp_server
from kgrag.llm.backends.openai import OpenAIBackend, OpenAIParams
from kgrag.kg.duckdb_io import read_tables
from kgrag.llm.calls import LLMClient, LLMReply, LLMRequest
from kgrag.reasoning.reasoners import REASONERS, ReasonInput, Sampling, run_batched, run_one
from kgrag.kg.store import questions_from_table


def start_server(*, n_threads: int, n_ctx: int, log_dir: Path) -> tuple[subprocess.Popen, str, list[str]]:
    """A llama-cpp-python server on loopback with ``n_threads`` threads for prompt and generation."""
    port_log = log_dir / f"server-{len(list(log_dir.glob('server-*.log')))}.log"
    return llamacpp_server.start_server(log_path=port_log, n_ctx=n_ctx, n_threads=n_threads, extra=(
        "--n_threads_batch", str(n_threads), "--n_batch", "512", "--verbose", "false"))


class RoundRobin:
    """Several OpenAI-compatible servers as one backend: request i of a batch goes to server i mod K, all
    sent at once (each server process is one parallel slot)."""

    def __init__(self, backends: Sequence[OpenAIBackend]) -> None:
        self.backends = list(backends)
        self.model_id = self.backends[0].model_id

    def generate(self, requests: Sequence[LLMRequest], on_reply: Callable[[int, LLMReply], None] | None = None
                 ) -> list[LLMReply]:
        """Send the whole batch concurrently, spread over the servers; replies keep request order."""
        out: list[LLMReply | None] = [None] * len(requests)
        with ThreadPoolExecutor(max_workers=max(1, len(requests))) as pool:
            futs = {pool.submit(self.backends[i % len(self.backends)]._one, r): i for i, r in enumerate(requests)}
            for fut in as_completed(futs):
                out[futs[fut]] = fut.result()
                if on_reply is not None:
                    on_reply(futs[fut], out[futs[fut]])
        return [r for r in out if r is not None]


def run_modes(*, client: LLMClient, questions, reasoner: str, sampling: Sampling) -> dict:
    """Batched then sequential over the same questions; questions per minute of each."""
    entry = REASONERS.get(reasoner)
    params = entry.params()

    def jobs():
        return [entry.impl(inp=ReasonInput(question=q, context="", sampling=sampling), params=params)
                for q in questions]

    t0 = time.perf_counter()
    batched = run_batched(jobs=jobs(), client=client)
    tb = time.perf_counter() - t0
    t0 = time.perf_counter()
    seq = [run_one(j, client) for j in jobs()]
    ts = time.perf_counter() - t0
    n = len(questions)
    same = sum(a.answer == b.answer for (a, _), (b, _) in zip(batched, seq))
    calls = lambda res: sum(len(c) for _, c in res)  # noqa: E731
    return {
        "batched_seconds": tb, "sequential_seconds": ts,
        "batched_qpm": n / tb * 60, "sequential_qpm": n / ts * 60, "speedup": ts / tb,
        "llm_calls": calls(batched), "failed_calls": sum(c.failed for _, cs in batched + seq for c in cs),
        "tokens_out": sum(c.reply.tokens_out for _, cs in batched for c in cs),
        "same_answers": same,
    }


def main() -> None:
    """Run the benchmark."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--questions", type=int, default=16)
    ap.add_argument("--reasoner", default="cot")
    ap.add_argument("--servers", type=int, default=2, help="server processes of the multi_server deployment")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 2, help="CPU threads in all")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="reports/bench/reasoners.json")
    args = ap.parse_args()
    table = read_tables(io.VALIDATED / "kg.duckdb", ("questions",))["questions"]
    qs = questions_from_table(table)
    rng = np.random.default_rng(args.seed)
    questions = [qs[i] for i in sorted(rng.choice(len(qs), size=min(args.questions, len(qs)), replace=False))]
    sampling = Sampling(temperature=0.0, top_p=1.0, max_tokens=48, seed=0, few_shot=True)
    result: dict = {"machine": machine(), "questions": len(questions), "reasoner": args.reasoner, "seed": args.seed,
                    "settings": {"server": "llama-cpp-python OpenAI-compatible server (python -m llama_cpp.server)",
                                 "parallel_slots_per_server": 1, "cache": None, "temperature": 0.0,
                                 "client_concurrency": len(questions), "threads_total": args.threads}}
    deployments = (("single_server", 1), ("multi_server", max(1, args.servers)))
    with tempfile.TemporaryDirectory() as tmp:
        for name, k in deployments:
            threads = max(1, args.threads // k)
            procs = []
            try:
                for _ in range(k):
                    procs.append(start_server(n_threads=threads, n_ctx=2048, log_dir=Path(tmp)))
                backends = [OpenAIBackend(OpenAIParams(base_url=url, model="smollm2", concurrency=len(questions)),
                                          timeout_s=600) for _, url, _ in procs]
                backend = backends[0] if k == 1 else RoundRobin(backends)
                client = LLMClient(backend, cache=None, retries=1)
                client.generate([LLMRequest(messages=(("user", "hi"),), max_tokens=2)] * k)  # warm-up
                got = run_modes(client=client, questions=questions, reasoner=args.reasoner, sampling=sampling)
                result[name] = {"servers": k, "n_threads_per_server": threads, "server_args": procs[0][2], **got}
                print(f"{name}: {got}", file=sys.stderr)
            finally:
                for p, _, _ in procs:
                    p.terminate()
                for p, _, _ in procs:
                    try:
                        p.wait(timeout=30)
                    except subprocess.TimeoutExpired:
                        p.kill()
    head = result["multi_server"]
    result["batched_qpm"] = head["batched_qpm"]
    result["sequential_qpm"] = head["sequential_qpm"]
    result["speedup"] = head["speedup"]
    best_seq = max(result["single_server"]["sequential_qpm"], head["sequential_qpm"])
    result["speedup_vs_best_sequential"] = head["batched_qpm"] / best_seq
    write_result(args.out, result)


if __name__ == "__main__":
    main()
