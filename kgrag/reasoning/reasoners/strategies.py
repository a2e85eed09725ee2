"""Reasoning strategies shared by the graph reasoners ``agent`` and ``explore``: CoT, ToT and GoT.

One search loop, parametrised by the strategy (paper: "Grounding LLM Reasoning with Knowledge Graphs",
section 4.1). A *domain* (the agent's Thought → Action → Observation step, or the exploration's thought +
graph search step) says how one state grows by one step; the strategy says how many children each state
gets and which survive:

- ``cot``: one chain; each step has one child (the sampling settings of the generate section).
- ``tot``: every kept state gets ``branching`` children per step, all prompts of the step (every branch of
  every kept state) in one yield, so ``run_batched`` sends them as one batch; children are sampled with
  ``branch_temperature`` and seeds ``seed + j``. An evaluator keeps ``breadth`` of them (equation 2):
  ``select`` asks the LLM to name the best candidates by letter in braces (``{B}``) — one call;
  ``score`` asks it to rate each candidate 0-10 — one call per candidate, all in one batch — and keeps the
  top-rated (stable: ties keep generation order).
- ``got``: ToT plus a merge (equation 3): after the evaluation, one LLM call merges the two best unfinished
  states into one thought; the merged state (the union of both parents' graph information plus the merged
  thought) takes the first place among the kept *unfinished* states. Finished states (a found answer) among
  the best ``breadth`` are always kept, ahead of it; the merge is skipped when they fill all ``breadth`` places
  (with ``breadth`` 1 a found answer is never replaced by a merge).

``decide: score`` (``kgrag.reasoning.reasoners.decide``; kgrag's adaptation for small models, not the paper's setting): both
evaluators become one scoring call per evaluation: every candidate's rendering (its last ``clip_chars``
characters) is scored as the reply to "which reasoning state most likely leads to the answer"
(``EVAL_SCORE_PROMPT``; ``score_normalize`` mean or sum of its token log-probs) and the candidates are ranked
by that score (ties keep generation order); the ``breadth`` best are kept. Nothing is parsed: a failed scoring
call keeps generation order and is not counted unparseable; the scores (None on a failed call) are in the
trace. The GoT merge stays a generated thought (it is text, not a decision). ``decide`` and ``answer`` are
read by the reasoners too (the agent's action, explore's pruning, the final answer: see ``agent`` and
``explore``).

Documented fallbacks (each counted as unparseable): a ``select`` reply without a valid letter keeps the
first ``breadth`` candidates in generation order (letters found but fewer than ``breadth``: the rest are
filled in generation order); a ``score`` reply without a number scores 0; an empty merge reply keeps the
parents unmerged. A score reply is read on the prompt's 0-10 scale by ``parsing.parse_rating`` (``8`` and
``8/10`` → 0.8, ``1`` → 0.1, ``on a scale of 0 to 10: 8`` → 0.8, ``0.8`` → 0.8), clipped to [0, 1].

Defaults that differ from the paper (section 5: n = 10 steps, k = t = 3 for ToT and GoT): ``branching`` k = 2
and ``breadth`` b (the paper's t) = 1 here, to bound the cost on CPU; set ``branching: 3, breadth: 3`` (and
``max_steps: 10`` in ``agent`` / ``explore``) for the paper's setting. The paper's Score evaluator asks for a
probability in [0, 1] (Appendix "State Evaluators"); this one asks for 0-10 (small models answer integers more
reliably) and reads both. Evaluator, merge prompts are greedy (``eval_temperature``, ``merge_temperature``: 0)
and show the last ``clip_chars`` (700) characters of a state.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, Protocol, TypeVar

from pydantic import Field

from kgrag.llm.prompts import clean_question
from kgrag.llm.calls import CallRecord, LLMRequest
from kgrag.reasoning.reasoners import decide as dc
from kgrag.reasoning.reasoners.core import Sampling, text_of
from kgrag.reasoning.reasoners.parsing import letters, parse_choices, parse_rating
from kgrag.reasoning.reasoners.policies import Decider
from kgrag.reasoning.traces import SearchStep

S = TypeVar("S")
Gen = Generator[list[LLMRequest], list[CallRecord], Any]


class StrategyParams(dc.ScoreFields):
    """The strategy fields shared by ``agent`` and ``explore`` (their params models extend this one)."""

    strategy: Literal["cot", "tot", "got"] = Field(
        "cot", description="cot: one chain | tot: branching children per kept state, an evaluator keeps breadth "
                           "| got: tot plus merging the two best chains into one each step")
    branching: int = Field(2, ge=1, le=8, description="tot/got: children generated per kept state and step (k; the "
                                                      "paper: 3)")
    breadth: int = Field(1, ge=1, le=8, description="tot/got: states kept after each evaluation (b; the paper's t: 3)")
    evaluator: Literal["select", "score"] = Field(
        "select", description="tot/got: select = the LLM names the best candidates by letter ({A}); "
                              "score = the LLM rates each candidate 0-10")
    branch_temperature: float = Field(
        0.7, ge=0.0, description="tot/got: sampling temperature of the branches (seeds seed, seed+1, ...); "
                                 "cot uses the generate section's temperature")
    eval_max_tokens: int = Field(16, ge=1, description="tokens of an evaluator reply")
    merge_max_tokens: int = Field(96, ge=1, description="got: tokens of the merged thought")
    eval_temperature: float = Field(0.0, ge=0.0, description="tot/got: sampling temperature of evaluator calls")
    merge_temperature: float = Field(0.0, ge=0.0, description="got: sampling temperature of the merge call")
    clip_chars: int = Field(700, ge=50, description="characters of a state shown to the evaluator and merge "
                                                   "prompts (its last ones)")
    decide: dc.Decide = Field("generate", description=dc.DECIDE_HELP + "; the tot/got evaluator (both kinds: one "
                              "call scoring every candidate state), the agent's action, explore's pruning")
    answer: dc.FinalAnswer = Field("generate", description=dc.ANSWER_HELP + ": the entities the chain observed "
                                   "(agent) or reached (explore), the question's own entities left out")


class Domain(Protocol[S]):
    """What a reasoner gives the search: how states grow and how they read."""

    def expand(self, states: list[S], k: int, temperature: float, seeds: list[list[int]]) -> Gen:
        """Generator: ``k`` children of every state (``seeds[i][j]`` for child j of state i), all prompts of a
        sub-step yielded together; returns ``list[list[S]]`` (children per state)."""
        ...

    def done(self, state: S) -> bool:
        """Whether the state has its final answer (it is not expanded any more)."""
        ...

    def render(self, state: S) -> str:
        """The state as text for the evaluator and the merge prompt."""
        ...

    def merge(self, a: S, b: S, thought: str) -> S:
        """The GoT merge of ``a`` and ``b`` with the LLM's merged ``thought``."""
        ...


@dataclass
class SearchResult(Generic[S]):
    """The kept states after the last step (best first), the per-step search trace, unparseable replies."""

    states: list[S]
    steps: int
    trace: list[SearchStep] = field(default_factory=list)
    unparseable: int = 0


EVAL_SYSTEM = "You judge partial reasoning toward answering a question from a knowledge graph."


def _clip(text: str, n: int = 700) -> str:
    return text if len(text) <= n else "…" + text[-n:]


def select_request(question: str, rendered: Sequence[str], keep: int, max_tokens: int, seed: int,
                   temperature: float = 0.0, clip: int = 700) -> LLMRequest:
    """Select evaluator: the candidates lettered, the LLM names the ``keep`` best in braces."""
    opts = "\n\n".join(f"({c}) {_clip(r, clip)}" for c, r in zip(letters(len(rendered)), rendered))
    user = (f"Question: {clean_question(question)}\n\nCandidates:\n{opts}\n\n"
            f"Which {keep} candidate{'s are' if keep > 1 else ' is'} most likely to lead to the correct answer? "
            "Reply with the letter in braces, e.g. {A}.")
    return LLMRequest(messages=(("system", EVAL_SYSTEM), ("user", user)), temperature=temperature,
                      max_tokens=max_tokens, seed=seed)


SCORE_LO, SCORE_HI = 0.0, 10.0  # the score prompt's scale


def score_request(question: str, rendered: str, max_tokens: int, seed: int, temperature: float = 0.0,
                  clip: int = 700) -> LLMRequest:
    """Score evaluator: the LLM rates one candidate from 0 (useless) to 10 (surely leads to the answer)."""
    user = (f"Question: {clean_question(question)}\n\nReasoning so far:\n{_clip(rendered, clip)}\n\n"
            "How likely is this reasoning to lead to the correct answer? Reply with a number from 0 to 10.")
    return LLMRequest(messages=(("system", EVAL_SYSTEM), ("user", user)), temperature=temperature,
                      max_tokens=max_tokens, seed=seed)


EVAL_SCORE_PROMPT = ("Question: {question}\n\n"
                     "Which reasoning state most likely leads to the correct answer? Reply with it.")


def merge_request(question: str, a: str, b: str, max_tokens: int, seed: int, temperature: float = 0.0,
                  clip: int = 700) -> LLMRequest:
    """GoT merge: one thought combining two reasoning chains."""
    user = (f"Question: {clean_question(question)}\n\nReasoning chain 1:\n{_clip(a, clip)}\n\n"
            f"Reasoning chain 2:\n{_clip(b, clip)}"
            "\n\nCombine what both chains found into one short thought that moves toward the answer.")
    return LLMRequest(messages=(("system", EVAL_SYSTEM), ("user", user)), temperature=temperature,
                      max_tokens=max_tokens, seed=seed)


def norm_score(text: str) -> float | None:
    """A 0-1 score from a reply to the 0-10 score prompt (``parsing.parse_rating``); None without a number."""
    return parse_rating(text, SCORE_LO, SCORE_HI)


def search(domain: Domain[S], *, question: str, init: S, params: StrategyParams, max_steps: int,
           sampling: Sampling, decider: Decider) -> Generator[list[LLMRequest], list[CallRecord], SearchResult[S]]:
    """Grow ``init`` for up to ``max_steps`` steps with the strategy of ``params``; stops early when every kept
    state is done (``decider``: the reasoner's deciding policy, which the evaluator follows). Returns the kept
    states, best first."""
    tree = params.strategy != "cot"
    k = params.branching if tree else 1
    temp = params.branch_temperature if tree else sampling.temperature
    beam: list[S] = [init]
    trace: list[SearchStep] = []
    bad = 0
    step = 0
    for step in range(1, max_steps + 1):
        live = [s for s in beam if not domain.done(s)]
        if not live:
            step -= 1
            break
        seeds = [[sampling.seed + i * k + j for j in range(k)] for i in range(len(live))]
        children: list[list[S]] = yield from domain.expand(live, k, temp, seeds)
        cands = [s for s in beam if domain.done(s)] + [c for cs in children for c in cs]
        rec: SearchStep = {"step": step, "candidates": len(cands)}
        if tree and len(cands) > params.breadth:
            order, info, b = yield from _evaluate(domain, question, cands, params, sampling.seed, decider)
            rec.update(info)
            bad += b
        else:
            order = list(range(len(cands)))
        ranked = [cands[i] for i in order]
        kept = ranked[: params.breadth] if tree else ranked[:1]
        if params.strategy == "got":
            open_ = [s for s in ranked if not domain.done(s)]
            done_kept = [s for s in kept if domain.done(s)]  # found answers are never merged away
            if len(open_) >= 2 and len(done_kept) < params.breadth:
                a, b2 = open_[0], open_[1]
                (m,) = yield [merge_request(question, domain.render(a), domain.render(b2), params.merge_max_tokens,
                                            sampling.seed, params.merge_temperature, params.clip_chars)]
                thought = text_of(m).strip()
                if thought:
                    merged = domain.merge(a, b2, thought)
                    open_kept = [s for s in kept if not domain.done(s)]
                    kept = done_kept + [merged] + open_kept[: params.breadth - len(done_kept) - 1]
                    rec["merged"] = {"parents": [_pos(cands, a), _pos(cands, b2)], "thought": thought}
                else:
                    bad += 1
                    rec["merged"] = None
        rec["kept"] = [_pos(cands, s) for s in kept]
        trace.append(rec)
        beam = kept
    return SearchResult(states=beam, steps=step, trace=trace, unparseable=bad)


def _pos(cands: list, s: Any) -> int | str:
    """Index of ``s`` among the candidates by identity ("merged" for a merged state)."""
    return next((i for i, c in enumerate(cands) if c is s), "merged")


def _evaluate(domain: Domain[S], question: str, cands: list[S], params: StrategyParams, seed: int,
              decider: Decider) -> Generator[list[LLMRequest], list[CallRecord], tuple[list[int], dict, int]]:
    """Rank the candidates with the evaluator: (order best first, trace info, unparseable replies)."""
    rendered = [domain.render(c) for c in cands]
    n = len(cands)
    if decider.scored:  # both evaluators: one scoring call over the candidates' renderings (their last clip_chars)
        (rec,) = yield [decider.request([_clip(r, params.clip_chars) for r in rendered], system=EVAL_SYSTEM,
                                        ask=lambda: EVAL_SCORE_PROMPT.format(question=clean_question(question)),
                                        paper=None)]
        got = decider.choose(rec, n, n)
        order, scores = got.positions, got.scores
        return order, {"evaluator": params.evaluator, "decide": "score", "scores": scores,
                       "chosen": order[: params.breadth]}, 0
    if params.evaluator == "select":
        (rec,) = yield [select_request(question, rendered[:26], params.breadth, params.eval_max_tokens, seed,
                                       params.eval_temperature, params.clip_chars)]
        got = parse_choices(text_of(rec), min(n, 26), k=params.breadth)
        order = list(got or [])
        order += [i for i in range(n) if i not in order]
        return order, {"evaluator": "select", "reply": text_of(rec), "chosen": got}, int(got is None)
    recs = yield [score_request(question, r, params.eval_max_tokens, seed, params.eval_temperature, params.clip_chars)
                  for r in rendered]
    scores = [norm_score(text_of(r)) for r in recs]
    vals = [s if s is not None else 0.0 for s in scores]
    order = sorted(range(n), key=lambda i: -vals[i])
    return order, {"evaluator": "score", "scores": scores}, sum(1 for s in scores if s is None)


def gather(groups: list[list[LLMRequest]]) -> Generator[list[LLMRequest], list[CallRecord], list[list[CallRecord]]]:
    """Send several groups of requests as one step; their records come back grouped the same way."""
    flat = [r for g in groups for r in g]
    if not flat:
        return [[] for _ in groups]
    recs = yield flat
    out, pos = [], 0
    for g in groups:
        out.append(list(recs[pos: pos + len(g)]))
        pos += len(g)
    return out
