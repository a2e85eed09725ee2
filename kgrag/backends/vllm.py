"""``vllm``: vLLM's in-process offline engine (GPU extra: ``pip install kgrag[gpu]``).

vLLM wheels are CUDA builds; this backend is not exercised on CPU-only machines (see README).
"""

from __future__ import annotations

import time
from typing import Any, Sequence

from pydantic import BaseModel, ConfigDict, Field

from kgrag.llm import LLMReply, LLMRequest
from kgrag.registry import BACKENDS


class VLLMParams(BaseModel):
    """Params of the ``vllm`` backend."""

    model_config = ConfigDict(extra="forbid", frozen=True)
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


@BACKENDS.register("vllm", params=VLLMParams)
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

    def generate(self, requests: Sequence[LLMRequest]) -> list[LLMReply]:
        """Batched generation."""
        from vllm import SamplingParams

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
