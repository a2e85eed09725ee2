"""Probe: does a llama.cpp sequence's output depend on the other sequences in the same context?

The ``rank`` scorer (``kgrag.llm.backends.llamacpp_engine.ScoreEngine``) puts a prompt in sequence 0 and the
candidates in sequences 1..m of one unified KV cache; batched greedy decoding (issue 14 item 4, not adopted)
would put one request per sequence. Both assume that a sequence's logits do not depend on its neighbours. This
probe measures that on the packaged SmolLM2 (the backend's default weights), and writes
``reports/bench/multiseq.json``:

- ``prompt_rest``: a shared head (the common token prefix of the probe prompts) in sequence 0, copied
  (``llama_memory_seq_cp``) to sequences 1, 2, 3; the same prompt's remaining tokens evaluated in each, in turn,
  with the earlier sequences' cells still present (``kept``) or removed first (``removed``): max absolute
  difference of the last token's logits against the prompt evaluated in one batch of a fresh context.
- ``rank_scores``: per probe prompt, ``ScoreEngine.score`` of 5 candidate names together (one batch, sequences
  1..5) and each alone, in the shared-cache layout (``exact=False``): per candidate, the difference of the
  summed log-probs (nats).
- ``layouts``: both layouts (``kv_shared``: ``exact=False``; ``kv_streams``: ``exact=True``, the default) on 31
  names after each probe prompt: together, each alone, and each alone in a fresh engine; how many of the
  (prompt, name) scores differ, by how much, and the seconds the together calls took (same run).

Expected: 0 everywhere. Measured here (docs/inference.md): ``removed`` 0, ``kept`` up to 0.72 logits; in the
shared layout 5 of 25 rank candidates off, by up to 0.28 nats; the streams layout: 0. Upstream:
ggml-org/llama.cpp#24962 ("Identical multi-sequence branches produce different logits", CPU, ``kv_unified = true``).

    python -m bench.multiseq
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from bench.common import machine, write_result

QUESTIONS = ("who directed the movies starred by [Al Pacino]", "who starred in [Heat]",
             "what films did [Michael Mann] direct", "when was [Heat] released", "which genre is [Heat]")
CONTEXT = ("(Heat, directed_by, Michael Mann)\n(Heat, starred_actors, Al Pacino)\n"
           "(Heat, starred_actors, Robert De Niro)\n(The Irishman, starred_actors, Al Pacino)\n"
           "(The Irishman, directed_by, Martin Scorsese)\n(Heat, release_year, 1995)\n(Heat, has_genre, Crime)")
NAMES = ("Michael Mann", "The Irishman Returns Again", "Robert De Niro Junior", "Example Director One",
         "Al Pacino and friends")
#: the layouts probe: NAMES and 26 more (1 to 5 tokens each)
MORE = ("Scarface", "The Godfather", "Serpico", "Dog Day Afternoon", "Insomnia", "The Insider", "Collateral", "Ali",
        "Thief", "Manhunter", "Public Enemies", "Blackhat", "Taxi Driver", "Raging Bull", "Goodfellas", "Casino",
        "1972", "Drama", "Heat", "Al Pacino", "Robert De Niro", "Martin Scorsese", "The Irishman", "1995", "Crime",
        "Michael")


def main() -> None:
    """Run the probe."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="reports/bench/multiseq.json")
    args = ap.parse_args()

    import llama_cpp as lc
    import numpy as np

    from kgrag.llm.backends.llamacpp import LlamaCppBackend, LlamaCppParams
    from kgrag.llm.backends.llamacpp_engine import ScoreEngine, chat_tokens, continuation_tokens
    from kgrag.llm.prompts import build_request

    backend = LlamaCppBackend(LlamaCppParams(n_ctx=2048))
    llm = backend.llm
    reqs = [build_request(question=q, context=CONTEXT, temperature=0.0, top_p=1.0, max_tokens=16, seed=0)
            for q in QUESTIONS]
    prompts = [chat_tokens(llm, r.as_messages()) for r in reqs]
    head = len(os.path.commonprefix(prompts))  # the token prefix every probe prompt shares

    def fresh(exact: bool = False) -> ScoreEngine:
        return ScoreEngine(llm, n_ctx=2048, n_batch=512, n_threads=backend.params.n_threads, exact=exact)

    result: dict = {"machine": machine(), "model": backend.model_id, "head_tokens": head, "prompt_rest": {},
                    "upstream": "https://github.com/ggml-org/llama.cpp/issues/24962"}
    for i, p in enumerate(prompts):
        rest = p[head:]
        e = fresh()
        e._decode([(t, k, 0, k == len(p) - 1) for k, t in enumerate(p)])
        ref = e._logits(len(p) - 1).astype(np.float64)
        e.close()
        row = {"rest_tokens": len(rest)}
        for mode in ("kept", "removed"):
            e = fresh()
            e.prefill(p[:head])
            diffs = []
            for seq in (1, 2, 3):
                lc.llama_memory_seq_cp(e.ctx.memory, 0, seq, -1, -1)
                e._decode([(t, head + k, seq, k == len(rest) - 1) for k, t in enumerate(rest)])
                diffs.append(round(float(np.abs(e._logits(len(rest) - 1) - ref).max()), 4))
                if mode == "removed":
                    lc.llama_memory_seq_rm(e.ctx.memory, seq, -1, -1)
            e.close()
            row[mode] = dict(zip(("seq1", "seq2", "seq3"), diffs))
        result["prompt_rest"][f"prompt{i}"] = row
    e = fresh()
    conts = [continuation_tokens(llm, n) for n in NAMES]  # the shared layout's scores, 5 names
    result["rank_scores"] = {}
    for i, p in enumerate(prompts):
        together = e.score(p, conts)
        alone = [e.score(p, [c])[0] for c in conts]
        result["rank_scores"][f"prompt{i}"] = {
            n: {"tokens": len(c), "together": round(t[0], 5), "alone": round(a[0], 5),
                "difference": round(t[0] - a[0], 5)} for n, c, t, a in zip(NAMES, conts, together, alone)}
    e.close()
    names = NAMES + MORE
    conts = [continuation_tokens(llm, n) for n in names]
    result["layouts"] = {}
    for label, exact in (("kv_shared", False), ("kv_streams", True)):
        e, ref = fresh(exact), fresh(exact)
        secs, diffs = 0.0, []
        for p in prompts:
            t0 = time.perf_counter()
            together = e.score(p, conts)
            secs += time.perf_counter() - t0
            alone = [e.score(p, [c])[0] for c in conts]
            scratch = [ref.score(p, [c])[0] for c in conts]
            diffs += [max(abs(t[0] - a[0]), abs(t[0] - f[0])) for t, a, f in zip(together, alone, scratch)]
        e.close()
        ref.close()
        result["layouts"][label] = {"exact": exact, "scores": len(diffs), "differing": sum(d > 0 for d in diffs),
                                    "max_difference": round(max(diffs), 5), "together_seconds": round(secs, 3)}
    result["layouts"]["streams_over_shared_seconds"] = round(
        result["layouts"]["kv_streams"]["together_seconds"] / result["layouts"]["kv_shared"]["together_seconds"], 2)
    kept = [v for r in result["prompt_rest"].values() for v in r["kept"].values()]
    removed = [v for r in result["prompt_rest"].values() for v in r["removed"].values()]
    result["max_logit_difference"] = {"kept": max(kept), "removed": max(removed)}
    result["max_rank_score_difference"] = max(abs(v["difference"]) for r in result["rank_scores"].values()
                                              for v in r.values())
    print(f"max logit difference: neighbours kept {max(kept)}, removed {max(removed)}; rank score difference "
          f"{result['max_rank_score_difference']} nats; layouts {result['layouts']}", file=sys.stderr)
    write_result(args.out, result)


if __name__ == "__main__":
    main()
