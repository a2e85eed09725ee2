"""``openai``: any OpenAI-compatible chat-completions server (vLLM's, llama-cpp-python's, ...)."""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Any, Callable, Literal, Sequence

import httpx
from pydantic import Field

from kgrag.config.base import Strict
from kgrag.llm.constrain import grammar_of
from kgrag.llm.calls import LLMReply, LLMRequest, is_permanent, score_reply_text
from kgrag.registry import BACKENDS


class OpenAIParams(Strict):
    """Params of the ``openai`` backend."""

    base_url: str = Field("http://127.0.0.1:8000/v1", description="server URL up to /v1: any OpenAI-compatible server "
                                                                  "(vLLM, llama-cpp-python)")
    model: str = Field("default", description="model name sent to the server")
    api_key_env: str = Field("OPENAI_API_KEY", description="environment variable holding the key (may be unset)")
    concurrency: int = Field(8, ge=1, description="requests of a batch sent at once")
    constraint: Literal["both", "llamacpp", "vllm"] = Field(
        "both", description="how a constrained request's output constraint is sent: llama-cpp-python's server "
        "`grammar` field (GBNF), vLLM's server `guided_choice` / `guided_grammar`, or both (each server ignores "
        "the other's fields)",
    )
    scoring: Literal["vllm", "none"] = Field(
        "vllm", description="how scoring requests (continuation log-likelihoods, the `rank` reasoner) are sent: "
        "vllm = vLLM's server (/tokenize with the chat template, then /v1/completions with prompt_logprobs); "
        "none = refused with a ScoringUnsupported error (llama-cpp-python's server: see docs/inference.md)",
    )


LLAMACPP_SERVER_NOTE = (
    "llama-cpp-python's server (0.3.36) cannot score: its echo+logprobs completions pair each prompt token with "
    "the distribution AFTER it when the model adds no BOS (SmolLM2), and sort the whole vocabulary per token"
)


@BACKENDS.register("openai", params=OpenAIParams, version="2")
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
            return LLMReply(error=f"{type(e).__name__}: {e}"[:500], permanent=is_permanent(e),
                            latency_ms=(time.perf_counter() - t0) * 1000)

    def _score(self, req: LLMRequest) -> LLMReply:
        """A scoring request through vLLM's OpenAI-compatible server: the chat prompt's token ids from
        ``/tokenize`` (chat template applied by the server), each continuation's from ``/tokenize`` too, then
        one ``/v1/completions`` per continuation with the token ids as prompt, ``max_tokens=1`` and
        ``prompt_logprobs=0`` (vLLM's prefix caching shares the prompt's KV blocks). UNTESTED against vLLM
        here (no CUDA machine); other servers get a ``ScoringUnsupported`` error."""
        t0 = time.perf_counter()
        if self.params.scoring == "none":
            return LLMReply(error=f"ScoringUnsupported: openai.scoring is none ({LLAMACPP_SERVER_NOTE})",
                            permanent=True)
        root = self.params.base_url.rstrip("/").removesuffix("/v1")
        try:
            r = self._client.post(f"{root}/tokenize", json={"model": self.params.model, "messages": req.as_messages(),
                                                            "add_generation_prompt": True})
            if r.status_code == 404:
                return LLMReply(error=f"ScoringUnsupported: {root}/tokenize not found: scoring needs vLLM's server "
                                      f"({LLAMACPP_SERVER_NOTE})", permanent=True,
                                      latency_ms=(time.perf_counter() - t0) * 1000)
            r.raise_for_status()
            prompt = list(r.json()["tokens"])
            scores = []
            for c in req.continuations:
                r = self._client.post(f"{root}/tokenize", json={"model": self.params.model, "prompt": c,
                                                                "add_special_tokens": False})
                r.raise_for_status()
                cont = list(r.json()["tokens"])
                r = self._client.post("/completions", json={"model": self.params.model, "prompt": prompt + cont,
                                                           "max_tokens": 1, "temperature": 0.0, "prompt_logprobs": 0})
                r.raise_for_status()
                plp = r.json()["choices"][0].get("prompt_logprobs")
                if plp is None:
                    return LLMReply(error="ScoringUnsupported: the server returned no prompt_logprobs "
                                          f"({LLAMACPP_SERVER_NOTE})", permanent=True,
                                          latency_ms=(time.perf_counter() - t0) * 1000)
                total = 0.0
                for t, tok in enumerate(cont):
                    entry = plp[len(prompt) + t]
                    total += float(entry[str(tok)]["logprob"])
                scores.append((total, len(cont)))
            return LLMReply(text=score_reply_text(scores), tokens_in=len(prompt),
                            latency_ms=(time.perf_counter() - t0) * 1000)
        except Exception as e:
            return LLMReply(error=f"{type(e).__name__}: {e}"[:500], permanent=is_permanent(e),
                            latency_ms=(time.perf_counter() - t0) * 1000)

    def generate(self, requests: Sequence[LLMRequest], on_reply: Callable[[int, LLMReply], None] | None = None
                 ) -> list[LLMReply]:
        """Send the batch as up to ``concurrency`` concurrent requests; replies keep request order.

        ``on_reply(position, reply)`` is called from this thread as each reply arrives.
        """
        out: list[LLMReply | None] = [None] * len(requests)
        with ThreadPoolExecutor(max_workers=max(1, min(self.params.concurrency, len(requests)))) as pool:
            futs = {pool.submit(self._score if r.scoring else self._one, r): i for i, r in enumerate(requests)}
            for fut in as_completed(futs):
                i = futs[fut]
                out[i] = fut.result()
                if on_reply is not None:
                    on_reply(i, out[i])
        return [r for r in out if r is not None]
