"""Where a ``rank`` scoring call's time goes, on real calls: stored scoring calls replayed through the backend's
``ScoreEngine`` with each part timed.

A whole split's call cache (``bench/full_split.py``'s work copy, ``.kgrag_cache/llm_calls.sqlite``) holds every
scoring call the default experiment made: the prompt and its candidates. A seeded sample of the calls with 2 or
more candidates (``rank`` makes no call for one) is scored again, in the sampled order, by one engine with the
backend's default settings (exact per-sequence KV streams, ``n_threads`` 2 for the prompt, 1 for the
candidates' streams; kgrag/llm/backends/llamacpp_engine.py), and each part's wall time is summed:

- ``prompt``: the prompt's evaluation (``llama_decode`` of sequence 0 on ``n_threads``, after the prefix the
  previous call left in the KV cache: the instruction and worked example);
- ``candidates``: the candidates' decode in their streams (one thread);
- ``other``: the rest (stream copies and removals, logits copies, log-softmax, tokenizing is left out).

Per candidate-count bucket: calls, prompt tokens (evaluated / reused), candidate tokens, and seconds a call by
part. Every replayed score is checked against the stored one (the same engine and weights must give the same
bits). ``--pad N`` also replays each call with ``PAD_TOKENS = N`` (the candidates' padding, module docstring) and
reports whether the scores are identical and the ratio of the candidates' decode time (the second replay of a
call finds its prompt in the KV cache, so only the candidates' part compares).

    python -m bench.score_profile --cache .kgrag_cache/fullsplit/2hop/main/.kgrag_cache/llm_calls.sqlite --calls 60
    python -m bench.score_profile --cache ... --calls 40 --pad 2 --out reports/bench/score_profile_pad2.json
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import sqlite3
import time
from pathlib import Path

from bench.common import write_result
from bench.full_split import CANDIDATE_BUCKETS


def bucket(n: int) -> str:
    return next(label for label, lo, hi in CANDIDATE_BUCKETS if lo <= n <= hi)


def stored_calls(path: Path, n: int, seed: int) -> list[tuple[dict, list]]:
    """A seeded sample of ``n`` stored scoring calls with 2+ candidates: (request, stored scores)."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = con.execute("SELECT request, response FROM llm_calls ORDER BY call_key").fetchall()
    finally:
        con.close()
    calls = []
    for req, resp in rows:
        if resp and resp.startswith("[["):
            q = json.loads(req)
            if len(q.get("continuations") or []) >= 2:
                calls.append((q, json.loads(resp)))
    random.Random(seed).shuffle(calls)
    return calls[:n]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cache", required=True, help="an LLM call cache (llm_calls.sqlite) with rank's scoring calls")
    ap.add_argument("--calls", type=int, default=60)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--pad", type=int, default=0, help="also replay with PAD_TOKENS = this; 0 = no")
    ap.add_argument("--out", default="reports/bench/score_profile.json")
    args = ap.parse_args()

    from kgrag.llm.backends import llamacpp_engine as E
    from kgrag.llm.backends.llamacpp import LlamaCppBackend, LlamaCppParams

    calls = stored_calls(Path(args.cache), args.calls, args.seed)
    if not calls:
        raise SystemExit(f"no scoring calls with 2+ candidates in {args.cache}")
    b = LlamaCppBackend(LlamaCppParams())
    p = b.params
    eng = E.ScoreEngine(b.llm, n_ctx=p.n_ctx, n_batch=p.n_batch, n_threads=p.n_threads, exact=p.exact_scores)
    timer: collections.Counter = collections.Counter()
    decode = eng._decode

    def timed_decode(items, threads=None):
        t0 = time.perf_counter()
        decode(items, threads)
        timer["candidates" if threads == eng.stream_threads and threads != eng.n_threads else "prompt"] += (
            time.perf_counter() - t0)

    eng._decode = timed_decode
    default_pad = E.PAD_TOKENS
    per: dict[str, list[dict]] = collections.defaultdict(list)
    mismatched, pad_cmp = 0, {"identical": 0, "differing_scores": 0, "scores": 0, "seconds": 0.0, "seconds_pad": 0.0}
    for req, stored in calls:
        prompt = E.chat_tokens(b.llm, [{"role": r, "content": c} for r, c in req["messages"]])
        conts = [E.continuation_tokens(b.llm, c) for c in req["continuations"]]
        order = [default_pad, args.pad] if args.pad else [default_pad]  # the profile: the default's first replay
        got = {}
        for pad in order:
            E.PAD_TOKENS = pad
            timer.clear()
            ev0, re0 = eng.evaluated, eng.reused
            t0 = time.perf_counter()
            got[pad] = eng.score(prompt, conts)
            wall = time.perf_counter() - t0
            if pad == default_pad:
                per[bucket(len(conts))].append({
                    "candidates": len(conts), "prompt_tokens": len(prompt), "evaluated": eng.evaluated - ev0,
                    "reused": eng.reused - re0, "candidate_tokens": sum(E.padded_tokens(c) for c in conts if len(c) > 1),
                    "seconds": wall, "prompt_s": timer["prompt"], "candidates_s": timer["candidates"]})
                pad_cmp["seconds"] += timer["candidates"]  # the second replay finds its prompt cached: compare the
            else:  # candidates' part only, the part the padding changes
                pad_cmp["seconds_pad"] += timer["candidates"]
        E.PAD_TOKENS = default_pad
        mismatched += any(abs(s - st[0]) > 5e-6 or n != st[1] for (s, n), st in zip(got[default_pad], stored))
        if args.pad:
            diffs = [a[0] != c[0] for a, c in zip(got[default_pad], got[args.pad])]
            pad_cmp["differing_scores"] += sum(diffs)
            pad_cmp["scores"] += len(diffs)
            pad_cmp["identical"] += not any(diffs)
    eng.close()

    def mean(rows, k):
        return round(sum(r[k] for r in rows) / len(rows), 4 if k == "seconds" or k.endswith("_s") else 1)

    buckets = []
    for label, _, _ in CANDIDATE_BUCKETS:
        rows = per.get(label)
        if rows:
            buckets.append({"candidates": label, "calls": len(rows), **{k: mean(rows, k) for k in (
                "prompt_tokens", "evaluated", "reused", "candidate_tokens", "seconds", "prompt_s", "candidates_s")}})
    rows = [r for rs in per.values() for r in rs]
    total = sum(r["seconds"] for r in rows)
    result = {
        "cache": str(args.cache), "calls": len(rows), "seed": args.seed, "engine": {
            "n_threads": eng.n_threads, "stream_threads": eng.stream_threads, "n_seq_max": eng.n_seq_max,
            "n_batch": eng.n_batch, "exact": eng.exact, "pad_tokens": default_pad},
        "scores_equal_stored": len(rows) - mismatched,
        "seconds": round(total, 2),
        "share": {"prompt": round(sum(r["prompt_s"] for r in rows) / total, 3),
                  "candidates": round(sum(r["candidates_s"] for r in rows) / total, 3),
                  "other": round(1 - sum(r["prompt_s"] + r["candidates_s"] for r in rows) / total, 3)},
        "by_candidates": buckets,
    }
    if args.pad:
        result["pad"] = {"pad_tokens": args.pad, "calls_identical": pad_cmp["identical"],
                         "differing_scores": pad_cmp["differing_scores"], "scores": pad_cmp["scores"],
                         "candidates_time_ratio_pad_over_default": round(pad_cmp["seconds_pad"] / pad_cmp["seconds"], 3)}
    write_result(args.out, result)
    print(json.dumps({k: result[k] for k in ("calls", "seconds", "share", "scores_equal_stored")}))


if __name__ == "__main__":
    main()
