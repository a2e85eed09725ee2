"""Scored decisions for the graph reasoners: each choice among options by the LLM's log-likelihood.

The papers' reasoners take every decision from generated text: option letters in braces (ToG's relation and
entity pruning, FastToG's community pruning, the ToT / GoT ``select`` evaluator, GraphExplore's pruning), a
Thought / Action line (the Graph-CoT agent), a 0-10 rating (the ``score`` evaluator), ``Answer: ... | Unknown``
(the reasoning step). A 135M model writes such text unreliably, and a reply no parser can read falls back to a
fixed rule (the pre-rank, Unknown), so with the embedded model the search is mostly the fallback's.

``decide: score`` (kgrag's adaptation for small models, not the papers' setting) asks the same question and scores
each option *as the reply* with the backend's log-likelihood primitive (``LLMRequest.continuations``, the one
``rank`` uses: one call per decision, the options share the prompt's KV state, the call cache keys on the
options). The best option, or the best k, is taken; nothing is parsed, so nothing is unparseable. Every option's
score is written to the trace.

``answer: rank`` ends a graph reasoner's search with ``rank``'s answer selection over the entities its search
reached (the question, the facts it collected as context, each entity's name scored as the answer), in place
of a generated ``Answer:`` reply or the IO / CoT fallback.

References
----------
Luo et al., Graph-constrained Reasoning (GCR, 2024, arXiv 2410.13080): answers constrained to KG entities and
ranked by the LLM's likelihood; Sun et al., Think-on-Graph (ICLR 2024) and Liang et al., FastToG (2024) for the
decisions scored here (relation / entity / community pruning, the sufficiency check).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from kgrag.llm.calls import CallRecord, LLMRequest, scores_of
from kgrag.reasoning.reasoners.core import Reasoning, Sampling

Decide = Literal["generate", "score"]
FinalAnswer = Literal["generate", "rank"]

DECIDE_HELP = ("how each LLM decision is taken: generate = the paper's prompt, the reply parsed (option letters, "
               "Answer: lines); score = every option scored as the reply by the LLM's log-likelihood and the best "
               "taken (kgrag's adaptation for small models, not the paper's setting; docs/papers.md)")
ANSWER_HELP = ("the final answer: generate = the paper's generated answer (and its IO / CoT fallback); rank = "
               "rank's answer selection over the entities the search reached, with the facts it collected as "
               "context (kgrag's adaptation)")
NORMALIZE_HELP = ("with decide: score, an option's score: mean of its token log-probs (options of different "
                  "lengths compete fairly) or their sum")



class ScoreFields(BaseModel):
    """The fields of ``decide: score`` / ``answer: rank`` that every graph reasoner's params share (each reasoner
    adds its own ``decide`` and ``answer``, whose descriptions say what they change there)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    score_normalize: Literal["mean", "sum"] = Field("mean", description=NORMALIZE_HELP)
    margin: float = Field(0.0, ge=0.0, description="with answer: rank, names scoring within this of the best are "
                          "output too (rank's top_k auto rule; 0 = the best only)")


DECIDE_SYSTEM = "You explore a knowledge graph to answer a question."

# the sufficiency check scored: the two replies the check's prompt allows
ENOUGH_OPTIONS = ("Yes", "No")
ENOUGH_PROMPT = ("Knowledge graph paths (head, relation, tail):\n{paths}\n\n"
                 "Question: {question}\n"
                 "Do these facts name the answer to the question? Reply Yes or No.")


def score_request(user: str, options: Sequence[str], s: Sampling, system: str = DECIDE_SYSTEM) -> LLMRequest:
    """One scoring call: ``options`` scored as the reply to ``user`` (greedy settings: nothing is sampled)."""
    return LLMRequest(messages=(("system", system), ("user", user)), temperature=0.0, top_p=1.0, max_tokens=1,
                      seed=s.seed, continuations=tuple(options))


def option_scores(rec: CallRecord, n: int, normalize: str = "mean") -> list[float] | None:
    """Each option's score (mean or sum of its token log-probs, rounded to 4 decimals); None when the call
    failed or its reply is no list of ``n`` scores."""
    got = scores_of(rec)
    if len(got) != n:
        return None
    out = []
    for lp, k in got:
        v = lp / k if normalize == "mean" and k > 0 else lp
        out.append(round(v, 4) if math.isfinite(v) else -1e9)
    return out


def best_k(scores: Sequence[float], k: int) -> list[int]:
    """Positions of the ``k`` best scores, best first; ties keep the options' order (their pre-rank)."""
    return sorted(range(len(scores)), key=lambda i: (-scores[i], i))[: max(0, k)]


def choose(rec: CallRecord, n: int, k: int, normalize: str = "mean") -> tuple[list[int], list[float] | None]:
    """(positions chosen best first, every option's score) of a scoring call over ``n`` options; a failed call
    keeps the first ``k`` (the pre-rank) and gives None scores (the call's error is in the trace)."""
    sc = option_scores(rec, n, normalize)
    if sc is None:
        return list(range(min(k, n))), None
    return best_k(sc, k), sc


def scored_options(texts: Sequence[str], scores: Sequence[float] | None) -> list[list]:
    """``[[text, score], ...]`` for the trace (score None when the call failed)."""
    return [[t, None if scores is None else scores[i]] for i, t in enumerate(texts)]


def enough_request(paths: str, question: str, s: Sampling) -> LLMRequest:
    """The sufficiency check as a scoring call over ``ENOUGH_OPTIONS``."""
    return score_request(ENOUGH_PROMPT.format(paths=paths, question=question), ENOUGH_OPTIONS, s)


def enough(rec: CallRecord) -> tuple[bool, list[float] | None]:
    """(the facts suffice: "Yes" scores above "No", the two scores); a failed call: not yet (search goes on)."""
    sc = option_scores(rec, len(ENOUGH_OPTIONS), "sum")
    return (sc is not None and sc[0] > sc[1]), sc


def rank_request(*, question, facts: Sequence[str], names: Sequence[str], s: Sampling) -> LLMRequest:
    """``rank``'s scoring call: the ``answer`` prompt over the collected ``facts``, each name a continuation."""
    from kgrag.llm.prompts import build_request

    req = build_request(question=question.text, context="\n".join(facts), temperature=s.temperature,
                        top_p=s.top_p, max_tokens=s.max_tokens, seed=s.seed, few_shot=s.few_shot,
                        choices=question.choices)
    return replace(req, continuations=tuple(question.choices or names))


def rank_answer(rec: CallRecord, names: Sequence[str], s: Sampling, *, normalize: str = "sum",
                margin: float = 0.0, ids: dict[str, int] | None = None) -> tuple[str, list[list]]:
    """(answer, top scored names) of ``rank_request``: the best name, and every name within ``margin`` of it,
    joined by the separator (``rank``'s rule, ``kgrag.reasoning.reasoners.rank.rank_candidates``); "" on a failed call."""
    from kgrag.reasoning.reasoners.rank import rank_candidates

    got = scores_of(rec)
    if len(got) != len(names) or not names:
        return "", []
    ranked = rank_candidates(list(names), got, normalize=normalize, ids=ids)
    chosen = [n for n, sc in ranked if sc >= ranked[0][1] - margin]
    return f" {s.separator} ".join(chosen), [[n, sc] for n, sc in ranked[:10]]


def rank_reached(*, question, facts: Sequence[str], ids: dict[str, int], s: Sampling, margin: float, trace: dict,
                 depth: int, unparseable: int):
    """``answer: rank`` at the end of a search (the agent's, the explorer's): ``rank``'s call over the names of the
    entities it reached (``ids``: name -> entity id; a label task's choices instead where it has them), with the
    facts it collected as context. Yields the one request; returns the :class:`Reasoning` (``rank_top`` and
    ``answer_from`` in ``trace``)."""
    names = list(ids)
    (rec,) = yield [rank_request(question=question, facts=facts, names=names, s=s)]
    ans, top = rank_answer(rec, question.choices or names, s, margin=margin, ids=ids)
    trace.update(answer_from="rank", rank_top=top)
    return Reasoning(answer=ans, depth=depth, trace=trace, unparseable=unparseable)
