"""``llm``: the LLM picks the useful reasoning paths from a list (the paper's path-refinement prompt)."""

from __future__ import annotations

import re
from typing import Sequence

import numpy as np
from pydantic import Field

from kgrag.config.base import Strict
from kgrag.retrieval.lego.registries import REFINERS
from kgrag.retrieval.lego.types import Context, Path
from kgrag.llm.calls import LLMRequest

PROMPT = (
    "You are an expert filterer with a deep understanding of relevant information. Your task is to analyze "
    "the given question and entities, and identify the potentially useful reasoning paths from the provided "
    "corpus. Select the most relevant paths that can help answer the question.\n\n"
    "Given the question '{question}' and entities [{entities}], identify the potentially useful reasoning "
    "paths from the following list:\n\n{corpus}\n\n"
    "Now answer, you only need to output useful paths, one per line, nothing else!"
)


class LLMRefineParams(Strict):
    """Params of the ``llm`` refiner."""

    top_k: int = Field(64, ge=0, description="paths kept at most")
    max_prompt_paths: int = Field(200, ge=1, description="paths shown to the LLM (the filter's first ones)")
    max_tokens: int = Field(1024, ge=1, description="reply length cap")
    temperature: float = Field(0.0, ge=0.0, description="sampling temperature")
    seed: int = Field(0, description="sampling seed")
    fallback: bool = Field(True, description="on a failed call or no recognised path, keep the filter's first top_k")


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text.strip().strip("-*•").strip()).lower()


def match_lines(reply: str, texts: Sequence[str]) -> list[int]:
    """Indices of ``texts`` quoted in ``reply`` (one per line, exact up to case/space/bullets), reply order."""
    where: dict[str, int] = {}
    for i, t in enumerate(texts):
        where.setdefault(_norm(t), i)
    out: list[int] = []
    for line in reply.splitlines():
        line = re.sub(r"^\s*\d+[.)]\s*", "", line)
        i = where.get(_norm(line))
        if i is not None and i not in out:
            out.append(i)
    return out


@REFINERS.register("llm", params=LLMRefineParams, version="2")
def refine_llm(*, paths: Sequence[Path], texts: Sequence[str], params: LLMRefineParams, ctx: Context) -> np.ndarray:
    """Indices of the paths the LLM selects (its order, at most ``top_k``).

    Never silent: reply lines that match no listed path are counted in ``llm_unparsed``, and a failed call or a
    reply that names no path in ``llm_fallbacks`` (with ``fallback`` the filter's first ``top_k`` are kept,
    else none), both in the stage's trace entry and surfaced by the evaluate stage.

    References
    ----------
    Cao et al., LEGO-GraphRAG (2024), section 4.1 "Path-Refinement Module" and Appendix A.2
    (Path-Refinement Prompt).
    """
    shown = list(texts[: params.max_prompt_paths])
    if not shown:
        return np.zeros(0, dtype=np.int64)
    req = LLMRequest(
        messages=(("user", PROMPT.format(question=ctx.question, entities=", ".join(ctx.topic_names),
                                         corpus="\n".join(shown))),),
        temperature=params.temperature, max_tokens=params.max_tokens, seed=params.seed,
    )
    rec = ctx.client().generate([req])[0]
    picked = [] if rec.failed else match_lines(rec.reply.text, shown)
    if not rec.failed:  # reply lines that name no listed path (bullets / numbering / blank lines aside)
        lines = [ln for ln in rec.reply.text.splitlines() if _norm(re.sub(r"^\s*\d+[.)]\s*", "", ln))]
        ctx.count("llm_unparsed", max(0, len(lines) - len(picked)))
    if not picked:
        ctx.count("llm_fallbacks", 1)
        if params.fallback:
            picked = list(range(min(params.top_k, len(shown))))
    return np.asarray(picked[: params.top_k], dtype=np.int64)
