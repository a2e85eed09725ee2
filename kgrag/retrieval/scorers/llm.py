"""``llm``: an LLM rates each doc's usefulness for the question from 0 to 1.

Two prompts (``prompt``): ``items`` (kgrag's default: a numbered list in, ``number: score`` lines out) and
``paper`` (LEGO-GraphRAG's Appendix A.2 ``score_prompt``, with its worked Freebase example: the docs separated by
semicolons, one ``Score: a, b, c`` line out, scores summing to 1).

``decide: score`` (kgrag's adaptation for small models) asks for no rating at all: each doc is scored as the
LLM's reply to the question by its log-likelihood (``kgrag.retrieval.scorers.loglik``'s scoring call), nothing parsed.
"""

from __future__ import annotations

import re
from typing import Literal, Sequence

import numpy as np
from pydantic import Field

from kgrag.config.base import Strict
from kgrag.retrieval.lego.registries import SCORERS
from kgrag.retrieval.scorers.loglik import LogLikParams, score_loglik
from kgrag.retrieval.lego.types import Context
from kgrag.llm.calls import LLMRequest

PROMPT = (
    "Please score the items below that contribute to answering the question on a scale from 0 to 1.\n"
    "Question: {question}\nTopic entity: {topics}\nItems:\n{items}\n"
    "Answer with one line per item, `number: score`, nothing else."
)
LINE = re.compile(r"^\s*(\d+)\s*[:.)\-]\s*([0-9]*\.?[0-9]+)", re.MULTILINE)

# LEGO-GraphRAG, Appendix A.2, score_prompt (its worked example verbatim; the query part in the example's form)
PAPER_PROMPT = (
    "Please score the relations (separated by semicolon) that contribute to the question on a scale from 0 to 1 "
    "(the sum of the scores of all relations is 1).\n\n"
    "Q: Name the president of the country whose main spoken language was Brahui in 1980?\n"
    "Topic Entity: Brahui Language\n"
    "Relations: language.human_language.main_country; language.human_language.countries_spoken_in; "
    "base.rosetta.languoid.parent; kg.object_profile.prominent_type\n"
    "Score: 0.4, 0.3, 0.2, 0.0\n"
    "language.human_language.main_country is highly relevant as it directly relates to the country whose "
    "president is being asked for, and the main country where Brahui language is spoken in 1980.\n"
    "language.human_language.countries_spoken_in is also relevant as it provides information on the countries "
    "where Brahui language is spoken, which could help narrow down the search for the president.\n"
    "base.rosetta.languoid.parent is less relevant but still provides some context on the language family to "
    "which Brahui belongs, which could be useful in understanding the linguistic and cultural background of the "
    "country in question.\n"
    "kg.object_profile.prominent_type is not relevant and contributes nothing to the question.\n\n"
    "Q: {question}\nTopic Entity: {topics}\nRelations: {items}\nScore:"
)
_NUMBER = re.compile(r"[-+]?[0-9]*\.?[0-9]+")


class LLMScoreParams(Strict):
    """Params of the ``llm`` scorer."""

    batch: int = Field(30, ge=1, description="docs rated in one prompt")
    max_tokens: int = Field(400, ge=1, description="reply length cap")
    temperature: float = Field(0.0, ge=0.0, description="sampling temperature")
    seed: int = Field(0, description="sampling seed")
    prompt: Literal["items", "paper"] = Field(
        "items", description="items: numbered list, `number: score` lines; paper: LEGO-GraphRAG's Appendix A.2 "
                             "score_prompt (semicolon-separated, one `Score: a, b, ...` line)")
    decide: Literal["generate", "score"] = Field(
        "generate", description="generate: the LLM writes the ratings (prompt, batch, max_tokens, temperature); "
        "score: each doc scored as the reply to the question by the LLM's log-likelihood (the loglik scorer's "
        "call: one per doc list, nothing parsed; kgrag's adaptation for small models)")
    score_normalize: Literal["mean", "sum"] = Field(
        "mean", description="decide: score: a doc's score is the mean of its token log-probs (docs of different "
        "lengths compete fairly) or their sum")


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


def parse_paper_scores(text: str, n: int, lo: float = 0.0, hi: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """(scores, rated) from a reply to the paper's prompt: the numbers of its first line holding any (after an
    optional ``Score:``), in doc order, clipped to [lo, hi]; docs past the numbers given are not rated (0)."""
    out = np.zeros(n)
    rated = np.zeros(n, dtype=bool)
    for line in text.splitlines():
        nums = _NUMBER.findall(re.sub(r"^\s*score\s*:", "", line, flags=re.IGNORECASE))
        if nums:
            for i, v in enumerate(nums[:n]):
                out[i] = min(hi, max(lo, float(v)))
                rated[i] = True
            break
    return out, rated


@SCORERS.register("llm", params=LLMScoreParams, version="3")
def score_llm(*, query: str, docs: Sequence[str], params: LLMScoreParams, ctx: Context) -> np.ndarray:
    """Relevance of each doc as rated by the LLM, clipped to the prompt's 0-1 scale.

    Never silent: a doc the reply does not rate (or whose call failed) scores 0 and is counted in
    ``llm_unparsed`` of the stage's trace entry (``Context.count``), surfaced by the evaluate stage as
    ``retrieval_llm_unparsed`` and per module.

    ``prompt: items`` (default) rates a numbered list of items on 0-1 (one prompt for relations, triples, paths
    and names); ``prompt: paper`` is the paper's own ``score_prompt`` (Appendix A.2: docs separated by semicolons,
    scores summing to 1, its worked Freebase example). The paper's relation-path (subgraph extraction) and
    path-filtering prompts belong to LLM extractor / filter modules kgrag does not have (docs/papers.md).

    ``decide: score`` (kgrag's adaptation for small models, not the paper's setting): no rating is generated;
    each doc's score is its log-likelihood as the LLM's reply to the question (mean or sum over its tokens,
    ``score_normalize``), the ``loglik`` scorer's one scoring call (``kgrag.retrieval.scorers.loglik``); a failed call
    scores every doc -1e9 and counts them in ``llm_unparsed``.

    References
    ----------
    Cao et al., LEGO-GraphRAG (2024), section 4.1 "Vanilla LLMs" and Appendix A.2 (score_prompt).
    """
    if not docs:
        return np.zeros(0)
    if params.decide == "score":
        return score_loglik(query=query, docs=docs, params=LogLikParams(normalize=params.score_normalize), ctx=ctx)
    chunks = [list(docs[i: i + params.batch]) for i in range(0, len(docs), params.batch)]
    paper = params.prompt == "paper"
    reqs = [
        LLMRequest(
            messages=(("user", (PAPER_PROMPT if paper else PROMPT).format(
                question=query, topics="; ".join(ctx.topic_names),
                items="; ".join(chunk) if paper else "\n".join(f"{j + 1}. {d}" for j, d in enumerate(chunk)))),),
            temperature=params.temperature, max_tokens=params.max_tokens, seed=params.seed,
        )
        for chunk in chunks
    ]
    records = ctx.client().generate(reqs)
    parse = parse_paper_scores if paper else parse_scores
    parts = []
    for c, r in zip(chunks, records):
        scores, rated = (np.zeros(len(c)), np.zeros(len(c), dtype=bool)) if r.failed else parse(r.reply.text, len(c))
        ctx.count("llm_unparsed", int((~rated).sum()))
        parts.append(scores)
    return np.concatenate(parts)
