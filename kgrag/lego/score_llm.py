"""``llm``: an LLM rates each doc's usefulness for the question from 0 to 1 (numbered list in, scores out)."""

from __future__ import annotations

import re
from typing import Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from kgrag.lego.registries import SCORERS
from kgrag.lego.types import Context
from kgrag.llm import LLMRequest

PROMPT = (
    "Please score the items below that contribute to answering the question on a scale from 0 to 1.\n"
    "Question: {question}\nTopic entity: {topics}\nItems:\n{items}\n"
    "Answer with one line per item, `number: score`, nothing else."
)
LINE = re.compile(r"^\s*(\d+)\s*[:.)\-]\s*([0-9]*\.?[0-9]+)", re.MULTILINE)


class LLMScoreParams(BaseModel):
    """Params of the ``llm`` scorer."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    batch: int = Field(30, ge=1, description="docs rated in one prompt")
    max_tokens: int = Field(400, ge=1, description="reply length cap")
    temperature: float = Field(0.0, ge=0.0, description="sampling temperature")
    seed: int = Field(0, description="sampling seed")


def parse_scores(text: str, n: int, lo: float = 0.0, hi: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """(scores, rated) by 1-based item number from a reply: each score clipped to the prompt's [lo, hi] (an echoed
    ``300`` scores 1, not 300); items not rated get 0 and ``rated`` False."""
    out = np.zeros(n)
    rated = np.zeros(n, dtype=bool)
    for num, val in LINE.findall(text):
        i = int(num) - 1
        if 0 <= i < n:
            out[i] = min(hi, max(lo, float(val)))
            rated[i] = True
    return out, rated


@SCORERS.register("llm", params=LLMScoreParams, version="2")
def score_llm(*, query: str, docs: Sequence[str], params: LLMScoreParams, ctx: Context) -> np.ndarray:
    """Relevance of each doc as rated by the LLM, clipped to the prompt's 0-1 scale.

    Never silent: a doc the reply does not rate (or whose call failed) scores 0 and is counted in
    ``llm_unparsed`` of the stage's trace entry (``Context.count``), surfaced by the evaluate stage as
    ``retrieval_llm_unparsed`` and per module.

    The prompt rates a numbered list of items on 0-1; the paper's own retrieval prompt (Appendix A.2
    ``score_prompt``) rates relations separated by semicolons, summing to 1, with a worked Freebase example —
    not reproduced here (one prompt serves relations, triples and paths, and the example is Freebase-specific).

    References
    ----------
    Cao et al., LEGO-GraphRAG (2024), section 4.1 "Vanilla LLMs" and Appendix A.2 (score_prompt).
    """
    if not docs:
        return np.zeros(0)
    chunks = [list(docs[i: i + params.batch]) for i in range(0, len(docs), params.batch)]
    reqs = [
        LLMRequest(
            messages=(("user", PROMPT.format(
                question=query, topics="; ".join(ctx.topic_names),
                items="\n".join(f"{j + 1}. {d}" for j, d in enumerate(chunk)))),),
            temperature=params.temperature, max_tokens=params.max_tokens, seed=params.seed,
        )
        for chunk in chunks
    ]
    records = ctx.client().generate(reqs)
    parts = []
    for c, r in zip(chunks, records):
        scores, rated = (np.zeros(len(c)), np.zeros(len(c), dtype=bool)) if r.failed else parse_scores(r.reply.text, len(c))
        ctx.count("llm_unparsed", int((~rated).sum()))
        parts.append(scores)
    return np.concatenate(parts)
