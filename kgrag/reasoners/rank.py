"""``rank``: KG-constrained answer selection: the retrieved subgraph's entities ranked by the LLM's likelihood.

Instead of generating an answer, the reasoner asks the LLM to *score* every candidate answer (one scoring call:
``LLMRequest.continuations``): the candidate's name as the reply after the same prompt the ``answer`` reasoner
sends. All candidates of a question share the prompt's KV state (``llamacpp``: one prompt evaluation, then every
candidate in one multi-sequence batch; ``vllm`` / ``openai``: prompt log-probs, see docs/inference.md).
"""

from __future__ import annotations

import math
import re
from dataclasses import replace
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from kgrag.constrain import context_distances, context_entities
from kgrag.generate import build_request
from kgrag.llm import scores_of
from kgrag.reasoners.core import REASONERS, ReasonGen, ReasonInput, Reasoning


class RankParams(BaseModel):
    """Params of ``rank``."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    candidates: Literal["context", "context_without_topic"] = Field(
        "context_without_topic", description="candidate answers: the entity names of the retrieved context "
        "(the facts the prompt shows), with or without the question's topic entities",
    )
    normalize: Literal["mean", "sum"] = Field(
        "sum", description="a candidate's score: sum of its token log-probs, or their mean (length-normalized); "
        "sum scores best with SmolLM2-135M on MetaQA (reports/bench/rank.json: 2-hop Hit@1 0.475 vs 0.365)",
    )
    top_k: int = Field(1, ge=1, description="best candidates output, best first, joined by the separator")
    max_candidates: int = Field(0, ge=0, description="candidates scored per question, in context order; 0 = all")
    distance: int | Literal["hops"] = Field(
        "hops", description="only candidates this many hops from a topic entity in the graph of the context's "
        "facts (the answer ring of a k-hop question; GCR constrains answers to KG paths from the topic); "
        "hops = the question set's declared hop count (MetaQA's k-hop files: 2 for 2-hop), every candidate "
        "where the data declares none; 0 = every candidate; a question with none at that distance keeps them all",
    )

    @field_validator("distance")
    @classmethod
    def _non_negative(cls, v):
        if isinstance(v, int) and v < 0:
            raise ValueError("distance must be >= 0 or 'hops'")
        return v


def rank_candidates(names: list[str], scores: list[tuple[float, int]], *, normalize: str,
                    ids: dict[str, int] | None = None) -> list[tuple[str, float]]:
    """(name, score) best first: score = sum or mean token log-prob, rounded to 4 decimals; ties broken by
    entity id (by name for a name without id), so the order does not depend on float rounding.

    References
    ----------
    Luo et al., Graph-constrained Reasoning (GCR, 2024, arXiv 2410.13080), KG-constrained decoding: answers
    restricted to KG entities, ranked by the LLM's (length-normalized) log-likelihood.
    """
    ids = ids or {}
    out = []
    for name, (lp, n) in zip(names, scores):
        s = lp / n if normalize == "mean" and n > 0 else lp
        out.append((name, round(s, 4) if math.isfinite(s) else -1e9))
    return sorted(out, key=lambda x: (-x[1], ids.get(x[0], 1 << 62), x[0]))


def _topic_names(inp: ReasonInput) -> set[str]:
    names = set(re.findall(r"\[([^\]]+)\]", inp.question.text))
    kg = inp.kg
    if kg is not None and inp.question.topic_ids and getattr(kg, "names", None) is not None:
        try:
            names |= set(kg.names(list(inp.question.topic_ids)))
        except Exception:  # a store without these ids: the bracketed names stay
            pass
    return names


def _distance(distance: int | str, question) -> int:
    """``rank.distance`` for one question: ``hops`` reads the question's declared hop count (0 where none)."""
    if distance == "hops":
        return int(question.hops or 0)
    return int(distance)


@REASONERS.register("rank", params=RankParams, version="2")
def rank(*, inp: ReasonInput, params: RankParams) -> ReasonGen:
    """Score every candidate (context entity, or the question's ``choices`` for a label task) as the answer
    after the ``answer`` reasoner's prompt; the answer is the ``top_k`` best joined by the separator (one
    choice for a label task). No candidate: no call, empty answer. A failed scoring call: empty answer.
    """
    s = inp.sampling
    choices = inp.question.choices
    req = build_request(question=inp.question.text, context=inp.context, temperature=s.temperature, top_p=s.top_p,
                        max_tokens=s.max_tokens, seed=s.seed, few_shot=s.few_shot, choices=choices)
    distance = 0
    if choices:
        names, k = list(dict.fromkeys(choices)), 1
    else:
        names = context_entities(inp.context, inp.kg)
        distance = _distance(params.distance, inp.question)
        topic = _topic_names(inp) if params.candidates == "context_without_topic" or distance else set()
        if params.candidates == "context_without_topic":
            kept = [n for n in names if n not in topic]
            names = kept or names  # a context of topic entities only: rank them rather than answer nothing
        if distance:
            dist = context_distances(inp.context, topic, inp.kg)
            ring = [n for n in names if dist.get(n) == distance]
            names = ring or names
        k = params.top_k
    if params.max_candidates:
        names = names[: params.max_candidates]
    trace: dict = {"reasoner": "rank", "candidates": len(names)}
    if not choices and distance:
        trace["distance"] = distance
    if not names:
        return Reasoning(answer="", trace=trace)
    (rec,) = yield [replace(req, continuations=tuple(names))]
    scores = scores_of(rec)
    if len(scores) != len(names):  # failed call (error in the trace), or a reply that is no score list
        return Reasoning(answer="", trace=trace, unparseable=int(not rec.failed))
    ids = {}
    if inp.kg is not None and getattr(inp.kg, "ids_of", None) is not None and not choices:
        try:
            ids = {n: i for n in names for i in inp.kg.ids_of([n])}
        except Exception:
            ids = {}
    ranked = rank_candidates(names, scores, normalize=params.normalize, ids=ids)
    trace["top"] = [[n, sc] for n, sc in ranked[:10]]
    return Reasoning(answer=f" {s.separator} ".join(n for n, _ in ranked[:k]), trace=trace)
