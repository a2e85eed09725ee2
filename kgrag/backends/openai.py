"""``openai``: any OpenAI-compatible chat-completions server (vLLM's, llama-cpp-python's, ...)."""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Any, Callable, Literal, Sequence

import httpx
from pydantic import BaseModel, ConfigDict, Field

from kgrag.constrain import grammar_of
from kgrag.llm import LLMReply, LLMRequest
from kgrag.registry import BACKENDS


class OpenAIParams(BaseModel):
    """Params of the ``openai`` backend."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    base_url: str = Field("http://127.0.0.1:8000/v1", description="server URL up to /v1")
    model: str = Field("default", description="model name sent to the server")
    api_key_env: str = Field("OPENAI_API_KEY", description="environment variable holding the key (may be unset)")
    concurrency: int = Field(8, ge=1, description="requests of a batch sent at once")
    constraint: Literal["both", "llamacpp", "vllm"] = Field(
        "both", description="how a constrained request's output constraint is sent: llama-cpp-python's server "
        "`grammar` field (GBNF), vLLM's server `guided_choice` / `guided_grammar`, or both (each server ignores "
        "the other's fields)",
    )


@BACKENDS.register("openai", params=OpenAIParams)
class OpenAIBackend:
    """HTTP client; a batch is sent as concurrent requests."""

    def __init__(self, params: OpenAIParams, *, timeout_s: float = 120.0) -> None:
        self.params = params
        self.model_id = f"openai:{params.model}@{params.base_url}"
        key = os.environ.get(params.api_key_env, "none")
        self._client = httpx.Client(
            base_url=params.base_url.rstrip("/"), timeout=timeout_s, headers={"Authorization": f"Bearer {key}"}
        )

    def constraint_fields(self, req: LLMRequest) -> dict[str, Any]:
        """Request-body fields carrying ``req``'s output constraint (none when it has none).

        llama-cpp-python's server (0.3.x, ``CreateChatCompletionRequest.grammar``) takes a GBNF string in
        ``grammar``; vLLM's server takes ``guided_choice`` (a list of strings) or ``guided_grammar`` (an
        EBNF / GBNF grammar) as extra body fields. Both servers ignore fields they do not know.
        """
        gbnf = grammar_of(req)
        if gbnf is None:
            return {}
        out: dict[str, Any] = {}
        if self.params.constraint in ("both", "llamacpp"):
            out["grammar"] = gbnf
        if self.params.constraint in ("both", "vllm"):
            if req.grammar is None:
                out["guided_choice"] = list(req.choices)
            else:
                out["guided_grammar"] = req.grammar
        return out

    def _one(self, req: LLMRequest) -> LLMReply:
        t0 = time.perf_counter()
        body = {
            "model": self.params.model, "messages": req.as_messages(), "temperature": req.temperature,
            "top_p": req.top_p, "max_tokens": req.max_tokens, "seed": req.seed,
        }
        if req.stop:
            body["stop"] = list(req.stop)
        body.update(self.constraint_fields(req))
        try:
            r = self._client.post("/chat/completions", json=body)
            r.raise_for_status()
            data = r.json()
            usage = data.get("usage") or {}
            return LLMReply(
                text=data["choices"][0]["message"]["content"] or "",
                tokens_in=int(usage.get("prompt_tokens", 0)),
                tokens_out=int(usage.get("completion_tokens", 0)),
                latency_ms=(time.perf_counter() - t0) * 1000,
            )
        except Exception as e:  # HTTP errors, timeouts, malformed bodies: recorded and retried by the client
            return LLMReply(error=f"{type(e).__name__}: {e}"[:500], latency_ms=(time.perf_counter() - t0) * 1000)

    def generate(self, requests: Sequence[LLMRequest], on_reply: Callable[[int, LLMReply], None] | None = None
                 ) -> list[LLMReply]:
        """Send the batch as up to ``concurrency`` concurrent requests; replies keep request order.

        ``on_reply(position, reply)`` is called from this thread as each reply arrives.
        """
        out: list[LLMReply | None] = [None] * len(requests)
        with ThreadPoolExecutor(max_workers=max(1, min(self.params.concurrency, len(requests)))) as pool:
            futs = {pool.submit(self._one, r): i for i, r in enumerate(requests)}
            for fut in as_completed(futs):
                i = futs[fut]
                out[i] = fut.result()
                if on_reply is not None:
                    on_reply(i, out[i])
        return [r for r in out if r is not None]
