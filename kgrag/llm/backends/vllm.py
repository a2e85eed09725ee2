"""``vllm``: vLLM's in-process offline engine (GPU extra: ``pip install kgrag[gpu]``).

vLLM wheels are CUDA builds; this backend is not exercised on CPU-only machines (see README).
"""

from __future__ import annotations

import time
from typing import Any, Sequence

from pydantic import Field

from kgrag.config.base import Strict
from kgrag.llm.calls import LLMReply, LLMRequest, score_reply_text
from kgrag.registry import BACKENDS


class VLLMParams(Strict):
    """Params of the ``vllm`` backend."""

    model: str = Field("HuggingFaceTB/SmolLM2-135M-Instruct", description="local model folder or name")
    gpu_memory_utilization: float = Field(0.8, gt=0.0, le=1.0)
    max_model_len: int = Field(4096, ge=256)


def structured_kwargs(req: LLMRequest) -> dict[str, Any]:
    """``SamplingParams`` keyword arguments enforcing ``req``'s output constraint (``{}`` when it has none):
    ``structured_outputs=StructuredOutputsParams(...)`` on vLLM >= 0.10.2, else
    ``guided_decoding=GuidedDecodingParams(...)``; ``choice`` for a choice list, ``grammar`` (GBNF) otherwise.
    """
    if not req.constrained:
        return {}
    spec: dict[str, Any] = {"grammar": req.grammar} if req.grammar is not None else {"choice": list(req.choices)}
    try:
        from vllm.sampling_params import StructuredOutputsParams

        return {"structured_outputs": StructuredOutputsParams(**spec)}
    except ImportError:
        from vllm.sampling_params import GuidedDecodingParams

        return {"guided_decoding": GuidedDecodingParams(**spec)}


def prompt_logprob_sums(prompt_logprobs, prompt_len: int, cont: Sequence[int]) -> tuple[float, int]:
    """(sum of log-probs, tokens) of the continuation ``cont`` that follows ``prompt_len`` prompt tokens, read
    from vLLM's ``RequestOutput.prompt_logprobs`` (one ``{token_id: Logprob}`` dict per prompt position, the
    first None; with ``prompt_logprobs=0`` each dict holds the actual token)."""
    total = 0.0
    for t, tok in enumerate(cont):
        entry = prompt_logprobs[prompt_len + t]
        lp = entry[tok]
        total += float(getattr(lp, "logprob", lp))
    return total, len(cont)


@BACKENDS.register("vllm", params=VLLMParams, version="2")
class VLLMBackend:
    """One batched ``LLM.chat`` call per batch."""

    def __init__(self, params: VLLMParams, *, timeout_s: float = 120.0) -> None:
        try:
            from vllm import LLM
        except ImportError as e:
            raise ImportError("the vllm backend needs the GPU extra: pip install 'kgrag[gpu]' on a CUDA machine") from e
        self.params = params
        self.model_id = f"vllm:{params.model}"
        self._llm = LLM(model=params.model, gpu_memory_utilization=params.gpu_memory_utilization,
                        max_model_len=params.max_model_len)

    def score(self, requests: Sequence[LLMRequest]) -> list[LLMReply]:
        """Scoring requests: every (prompt, continuation) pair as one prompt of ``max_tokens=1`` with
        ``prompt_logprobs=0``, all in one ``LLM.generate`` batch; vLLM's automatic prefix caching shares the
        prompt's KV blocks between the continuations of a request. UNTESTED here (no CUDA machine)."""
        from vllm import SamplingParams

        t0 = time.perf_counter()
        tok = self._llm.get_tokenizer()
        prompts, index = [], []
        for i, r in enumerate(requests):
            # return_dict=False: transformers 5 returns a BatchEncoding by default, whose list() is its keys
            p = list(tok.apply_chat_template(r.as_messages(), add_generation_prompt=True, tokenize=True,
                                             return_dict=False))
            for c in r.continuations:
                ct = list(tok.encode(c, add_special_tokens=False))
                prompts.append({"prompt_token_ids": p + ct})
                index.append((i, len(p), ct))
        try:
            outs = self._llm.generate(prompts, SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0),
                                      use_tqdm=False)
            sums: list[list[tuple[float, int]]] = [[] for _ in requests]
            for (i, plen, ct), o in zip(index, outs):
                sums[i].append(prompt_logprob_sums(o.prompt_logprobs, plen, ct))
        except Exception as e:
            return [LLMReply(error=f"{type(e).__name__}: {e}") for _ in requests]
        ms = (time.perf_counter() - t0) * 1000 / max(len(requests), 1)
        return [LLMReply(text=score_reply_text(s), tokens_in=sum(len(p["prompt_token_ids"]) for (j, _, _), p in
                                                                zip(index, prompts) if j == i),
                         latency_ms=ms) for i, s in enumerate(sums)]

    def generate(self, requests: Sequence[LLMRequest]) -> list[LLMReply]:
        """Batched generation (scoring requests of the batch go to ``score``, in one batch of their own)."""
        from vllm import SamplingParams

        if any(r.scoring for r in requests):
            pos_s = [i for i, r in enumerate(requests) if r.scoring]
            pos_g = [i for i, r in enumerate(requests) if not r.scoring]
            out: list[LLMReply | None] = [None] * len(requests)
            for i, rep in zip(pos_s, self.score([requests[i] for i in pos_s])):
                out[i] = rep
            if pos_g:
                for i, rep in zip(pos_g, self.generate([requests[i] for i in pos_g])):
                    out[i] = rep
            return [r for r in out if r is not None]
        t0 = time.perf_counter()
        sps = [SamplingParams(temperature=r.temperature, top_p=r.top_p, max_tokens=r.max_tokens, seed=r.seed,
                              stop=list(r.stop) or None, **structured_kwargs(r)) for r in requests]
        try:
            outs = self._llm.chat([r.as_messages() for r in requests], sps, use_tqdm=False)
        except Exception as e:
            return [LLMReply(error=f"{type(e).__name__}: {e}") for _ in requests]
        ms = (time.perf_counter() - t0) * 1000 / max(len(requests), 1)
        return [LLMReply(text=o.outputs[0].text, tokens_in=len(o.prompt_token_ids), tokens_out=len(o.outputs[0].token_ids),
                         latency_ms=ms) for o in outs]
