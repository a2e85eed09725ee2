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


def parse_scores(text: str, n: int) -> np.ndarray:
    """Scores by 1-based item number from a reply; items not rated get 0."""
    out = np.zeros(n)
    for num, val in LINE.findall(text):
        i = int(num) - 1
        if 0 <= i < n:
            out[i] = float(val)
    return out


@SCORERS.register("llm", params=LLMScoreParams, version="1")
def score_llm(*, query: str, docs: Sequence[str], params: LLMScoreParams, ctx: Context) -> np.ndarray:
    """Relevance of each doc as rated by the LLM; a failed call rates its docs 0.

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
    parts = [np.zeros(len(c)) if r.failed else parse_scores(r.reply.text, len(c)) for c, r in zip(chunks, records)]
    return np.concatenate(parts)
