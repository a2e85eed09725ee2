"""``gretriever``: answers with a trained G-Retriever checkpoint (graph token through ``inputs_embeds``).

Each request's user message, as ``kgrag.llm.prompts.build_request`` writes it, is read back into its question
and its context triples (``generate.context: csv`` gives them exactly; ``triples`` unless a name contains
", "); the triples become the graph the encoder reads (node and relation texts embedded with the model the
checkpoint was trained with) and, when the checkpoint was trained with it, the textualized graph of the
prompt, laid out as in training. Decoding is greedy (temperature and sampling seed are not used), and an
output constraint (``choices`` / ``grammar``) is not enforced.
"""

from __future__ import annotations

import functools
import hashlib
import json
import time
from pathlib import Path
from typing import Callable, Sequence

from pydantic import Field

from kgrag.config.base import Strict
from kgrag.llm.calls import LLMReply, LLMRequest
from kgrag.registry import BACKENDS


class GRetrieverBackendParams(Strict):
    """Params of the ``gretriever`` backend (``generate.gretriever`` in params.yaml)."""

    checkpoint: str = Field("data/gretriever/explagraphs-g_retriever",
                            description="a train run's checkpoint folder (config.json + best.pt)")
    threads: int = Field(2, ge=1, description="torch CPU threads")
    batch_size: int = Field(8, ge=1, description="requests generated together")


@functools.lru_cache(maxsize=2)
def _load(folder: str, threads: int):
    import torch

    from kgrag.gretriever.data import TextEmbedder
    from kgrag.gretriever.model import ModelConfig, load_best
    from kgrag.gretriever.module import build_model

    torch.set_num_threads(threads)
    meta = json.loads((Path(folder) / "config.json").read_text())
    cfg = ModelConfig.from_dict(meta["model"])
    model = build_model(cfg)
    load_best(model, folder)
    model.eval()
    return model, TextEmbedder(cfg.embed_model)


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()[:12]


@BACKENDS.register("gretriever", params=GRetrieverBackendParams)
class GRetrieverBackend:
    """A G-Retriever checkpoint in process; requests generated in batches of ``batch_size``."""

    def __init__(self, params: GRetrieverBackendParams, *, timeout_s: float = 120.0) -> None:
        self.params = params
        self.folder = Path(params.checkpoint)
        best = self.folder / "best.pt"
        if not best.is_file() or not (self.folder / "config.json").is_file():
            raise FileNotFoundError(
                f"{self.folder}: no trained G-Retriever checkpoint (config.json + best.pt); train one with "
                "`dvc repro gretriever/dvc.yaml:train_gretriever-explagraphs@g_retriever` (or another preset)")
        # the checkpoint's content is part of the model id, so the call cache never mixes two trainings
        self.model_id = f"gretriever:{self.folder.name}:{_digest(best)}"
        self.timeout_s = timeout_s

    def generate(self, requests: Sequence[LLMRequest], on_reply: Callable[[int, LLMReply], None] | None = None
                 ) -> list[LLMReply]:
        """Answer the requests batch by batch; ``on_reply(position, reply)`` as each batch finishes."""
        from kgrag.gretriever.data import Example, graph_arrays, parse_prompt

        model, embed = _load(str(self.folder), self.params.threads)
        out: list[LLMReply] = []
        size = self.params.batch_size
        parsed: list[Example | Exception] = []
        for i, req in enumerate(requests):
            try:
                user = next((c for r, c in reversed(req.messages) if r == "user"), "")
                question, triples = parse_prompt(user)
                parsed.append(Example(example_id=str(i), question=question, triples=tuple(triples), label="",
                                      answers=(), choices=tuple(req.choices)))
            except Exception as e:  # a prompt not written by build_request: an error reply, the rest go on
                parsed.append(e)
        good = [i for i, p in enumerate(parsed) if isinstance(p, Example)]
        replies: dict[int, LLMReply] = {}
        for k in range(0, len(requests), size):
            for i in range(k, min(k + size, len(requests))):
                if isinstance(parsed[i], Exception):
                    replies[i] = LLMReply(error=f"{type(parsed[i]).__name__}: {parsed[i]}")
            idx = [i for i in good if k <= i < k + size]
            t0 = time.perf_counter()
            try:
                exs = [parsed[i] for i in idx]
                if exs:
                    graphs = [graph_arrays(e.triples, embed) for e in exs] if model.cfg.graph_token else None
                    res = model.generate(exs, graphs, max_new_tokens=max(requests[i].max_tokens for i in idx))
                    ms = (time.perf_counter() - t0) * 1000 / len(exs)
                    for i, (text, n_in, n_out) in zip(idx, res):
                        replies[i] = LLMReply(text=text, tokens_in=n_in, tokens_out=n_out, latency_ms=ms)
            except Exception as e:  # the batch failed: recorded per request, the run goes on
                ms = (time.perf_counter() - t0) * 1000 / max(len(idx), 1)
                for i in idx:
                    replies[i] = LLMReply(error=f"{type(e).__name__}: {e}", latency_ms=ms)
            for i in range(k, min(k + size, len(requests))):
                out.append(replies[i])
                if on_reply is not None:
                    on_reply(i, replies[i])
        return out
