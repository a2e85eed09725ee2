"""``loglik``: the LLM's log-likelihood of each doc (a verbalized relation path) as the reply to the question.

A zero-shot relation-path planner for ``relpath`` (``retrieve.relpath.base: scorer``, ``scorer: loglik``) and a
LEGO scorer: one scoring call per list of docs (the backend's ``continuations`` primitive, the one ``rank`` uses),
nothing generated, nothing to parse.
"""

from __future__ import annotations

from typing import Literal, Sequence

import numpy as np
from pydantic import Field

from kgrag.config.base import Strict
from kgrag.retrieval.lego.registries import SCORERS
from kgrag.retrieval.lego.types import Context
from kgrag.llm.calls import LLMRequest, scores_of

PROMPT = ("Question: {question}\nTopic entity: {topics}\n"
          "Which relations lead from the topic entity to the answer? Reply with the relations in order.")


class LogLikParams(Strict):
    """Params of the ``loglik`` scorer."""

    normalize: Literal["sum", "mean"] = Field(
        "sum", description="a doc's score: the sum of its token log-probs (a longer path must earn its length) or "
        "their mean")


@SCORERS.register("loglik", params=LogLikParams, version="1")
def score_loglik(*, query: str, docs: Sequence[str], params: LogLikParams, ctx: Context) -> np.ndarray:
    """Log-likelihood of each doc as the LLM's reply to the question (sum or mean over its tokens), rounded to 4
    decimals. A failed call scores every doc ``-inf``-like (-1e9) and is counted in ``llm_unparsed`` (never
    silent).

    References
    ----------
    Luo et al., Reasoning on Graphs (RoG, ICLR 2024), section 4.1: relation paths as the planner's output, scored
    by their likelihood given the question; Luo et al., Graph-constrained Reasoning (GCR, 2024): KG-constrained
    paths ranked by the LLM's likelihood. Here zero-shot (no fine-tuning), through the scoring primitive.
    """
    if not docs:
        return np.zeros(0)
    req = LLMRequest(messages=(("user", PROMPT.format(question=query, topics="; ".join(ctx.topic_names))),),
                     max_tokens=1, continuations=tuple(docs))
    (rec,) = ctx.client().generate([req])
    got = scores_of(rec)
    if len(got) != len(docs):
        ctx.count("llm_unparsed", len(docs))
        return np.full(len(docs), -1e9)
    return np.asarray([round(lp / n if params.normalize == "mean" and n else lp, 4) for lp, n in got])
