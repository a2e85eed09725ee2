"""``rank``: KG-constrained answer selection: the retrieved subgraph's entities ranked by the LLM's likelihood.

Instead of generating an answer, the reasoner asks the LLM to *score* every candidate answer (one scoring call:
``LLMRequest.continuations``): the candidate's name as the reply after the same prompt the ``answer`` reasoner
sends. All candidates of a question share the prompt's KV state (``llamacpp``: one prompt evaluation, then every
candidate in one multi-sequence batch; ``vllm`` / ``openai``: prompt log-probs, see docs/inference.md).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Literal

from pydantic import Field

from kgrag.config.base import Strict
from kgrag.llm.constrain import answer_candidates
from kgrag.llm.prompts import build_request
from kgrag.llm.calls import scores_of
from kgrag.reasoning.reasoners.core import REASONERS, ReasonGen, ReasonInput, Reasoning


class RankParams(Strict):
    """Params of ``rank``."""

    candidates: Literal["ends", "context", "context_without_topic"] = Field(
        "ends", description="candidate answers (kgrag.llm.constrain.answer_candidates): ends = the answer entities "
        "the retriever proposed (relpath: the ends of its chosen relation sequences) that the context shows, else "
        "the context's entity names without the topic entities; context_without_topic = those always; context = "
        "every entity name of the context",
    )
    normalize: Literal["mean", "sum"] = Field(
        "sum", description="a candidate's score: sum of its token log-probs, or their mean (length-normalized); "
        "sum scores best with SmolLM2-135M on MetaQA (reports/bench/rank.json: 2-hop Hit@1 0.475 vs 0.365)",
    )
    top_k: int | Literal["auto"] = Field(
        "auto", description="best candidates output, best first, joined by the separator; auto = every candidate "
        "scoring within `margin` of the best (a many-answer question gets them all; Hit@1 reads the first)")
    margin: float = Field(
        8.0, ge=0.0, description="with top_k auto: candidates whose score is at least the best's minus this "
        "(log-prob units of `normalize`) are output. Chosen on 300 MetaQA dev questions (1/2/3-hop mixed, "
        "reports/bench/generalize_dev_margin.json): F1 0.659 at 1, 0.746 at 2, 0.872 at 4, 0.945 at 8, 0.956 for "
        "every candidate; 8 keeps the LLM's cut for retrievers that propose distractors")
    max_candidates: int = Field(0, ge=0, description="candidates scored per question, in context order; 0 = all")
    distance: int = Field(
        0, ge=0, description="only candidates this many hops from a topic entity in the graph of the context's "
        "facts (GCR constrains answers to KG paths from the topic); 0 = every candidate; a question with none at "
        "that distance keeps them all. The question's hop count is never read here",
    )
    calibrate: Literal["none", "labels", "all"] = Field(
        "none", description="contextual calibration (Zhao et al. 2021): a candidate's score minus its score after "
        "a content-free prompt (the same prompt with the question 'N/A' and no facts), so that a name or label the "
        "model prefers whatever the input loses that head start; labels = label questions only (their "
        "choices), all = entity candidates too; none = raw scores. One more scoring call per question (a label "
        "task's content-free call is the same for every question: one call, then the call cache)",
    )


#: the trace's ``no_call`` reason of a question with one candidate (no score is needed to choose it)
ONE_CANDIDATE = "one candidate: it is the answer, no score needed"


def candidate_score(lp: float, n: int, normalize: str) -> float:
    """A candidate's score from its (sum of token log-probs, tokens): the sum, or the mean."""
    return lp / n if normalize == "mean" and n > 0 else lp


def rank_candidates(names: list[str], scores: list[tuple[float, int]], *, normalize: str,
                    ids: dict[str, int] | None = None,
                    content_free: list[tuple[float, int]] | None = None) -> list[tuple[str, float]]:
    """(name, score) best first: score = sum or mean token log-prob, minus the same after the content-free
    prompt when ``content_free`` is given (contextual calibration), rounded to 4 decimals; ties broken by
    entity id (by name for a name without id), so the order does not depend on float rounding.

    References
    ----------
    Luo et al., Graph-constrained Reasoning (GCR, 2024, arXiv 2410.13080), KG-constrained decoding: answers
    restricted to KG entities, ranked by the LLM's (length-normalized) log-likelihood.
    Zhao et al., Calibrate Before Use: Improving Few-Shot Performance of Language Models (ICML 2021), section 5:
    the label probabilities divided by those of a content-free input ("N/A"), i.e. ``log p(y | x) - log p(y |
    N/A)`` in log space (their W = diag(p_cf)^-1, b = 0).
    """
    ids = ids or {}
    out = []
    for j, (name, (lp, n)) in enumerate(zip(names, scores)):
        s = candidate_score(lp, n, normalize)
        if content_free is not None:
            s -= candidate_score(*content_free[j], normalize)
        out.append((name, round(s, 4) if math.isfinite(s) else -1e9))
    return sorted(out, key=lambda x: (-x[1], ids.get(x[0], 1 << 62), x[0]))


@REASONERS.register("rank", params=RankParams, version="7")
def rank(*, inp: ReasonInput, params: RankParams) -> ReasonGen:
    """Score every candidate (context entity, or the question's ``choices`` for a label task) as the answer
    after the ``answer`` reasoner's prompt (with ``calibrate``: minus its score after the content-free prompt); the answer is the ``top_k`` best joined by the separator, or with
    ``top_k: auto`` every candidate within ``margin`` of the best (one choice for a label task). No candidate: no call, empty answer. One candidate: no call, it
    is the answer (whatever the score, every setting outputs it; its trace score is None). A failed scoring call:
    empty answer. The chosen candidates are reported as they are (``Reasoning.answers``), not parsed back from
    the answer text.
    """
    s = inp.sampling
    choices = inp.question.choices
    req = build_request(question=inp.question.text, context=inp.context, temperature=s.temperature, top_p=s.top_p,
                        max_tokens=s.max_tokens, seed=s.seed, few_shot=s.few_shot, choices=choices,
                        separator=s.separator)
    names = answer_candidates(question=inp.question, context=inp.context, proposed=inp.proposed, kg=inp.kg,
                              candidates=params.candidates, distance=params.distance)
    if params.max_candidates:
        names = names[: params.max_candidates]
    trace: dict = {"reasoner": "rank", "candidates": len(names)}
    if not choices and params.distance:
        trace["distance"] = params.distance
    if not names:
        return Reasoning(answer="", trace=trace)
    if len(names) == 1:  # no choice to make: no call (every setting outputs the one candidate); no score traced
        trace["top"], trace["no_call"] = [[names[0], None]], ONE_CANDIDATE
        return Reasoning(answer=names[0], trace=trace, answers=(names[0],))
    content_free = None
    if params.calibrate == "all" or (params.calibrate == "labels" and choices):
        # the content-free prompt first, in its own step: a failed calibration call fails the question (the
        # driver reads the last call), it never silently leaves the raw scores
        cf = build_request(question="N/A", context="", temperature=s.temperature, top_p=s.top_p,
                           max_tokens=s.max_tokens, seed=s.seed, few_shot=s.few_shot, choices=choices,
                           separator=s.separator)
        (crec,) = yield [replace(cf, continuations=tuple(names))]
        content_free = scores_of(crec)
        trace["calibrate"] = params.calibrate
        if len(content_free) != len(names):
            return Reasoning(answer="", trace=trace, unparseable=int(not crec.failed))
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
    ranked = rank_candidates(names, scores, normalize=params.normalize, ids=ids, content_free=content_free)
    trace["top"] = [[n, sc] for n, sc in ranked[:10]]
    if content_free is not None:  # each shown name's content-free score, what its score had taken off
        cf_of = {n: round(candidate_score(*c, params.normalize), 4) for n, c in zip(names, content_free)}
        trace["content_free"] = [[n, cf_of[n]] for n, _ in ranked[:10]]
    if choices:
        chosen = ranked[:1]
    elif params.top_k == "auto":
        chosen = [(n, sc) for n, sc in ranked if sc >= ranked[0][1] - params.margin]
    else:
        chosen = ranked[: params.top_k]
    # the chosen candidates are the answers as they are (a name such as "33.82" or "3. Paris" is not re-parsed)
    return Reasoning(answer=f" {s.separator} ".join(n for n, _ in chosen), trace=trace,
                     answers=tuple(n for n, _ in chosen))
