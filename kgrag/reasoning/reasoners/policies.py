"""The three policies every graph reasoner (``tog``, ``fasttog``, ``agent``, ``explore``) takes, written once.

* :class:`Decider`: how an LLM choice among options is taken. ``generate`` (the papers' setting): the reasoner's
  own prompt, the reply's option letters parsed, the pre-rank's first ``k`` when none is readable; ``score``
  (kgrag's adaptation, ``decide``): every option scored as the reply by the LLM's log-likelihood
  (``LLMRequest.continuations``), the ``k`` best taken, nothing parsed.
* :class:`Answerer`: how the final answer is made. ``generate``: the answer the search generated, else the
  fallback (IO, or chain of thought over the facts collected); ``rank``: ``rank``'s answer selection over the
  entities the search reached (``decide.rank_call``), the facts it collected as context.
* Demonstrations: none (:class:`NoDemos`) or the kNN relation-path demonstrations of a learnt plan
  (``decide.PathBook``, ``demos: k`` and ``demos_order``), whose scores the relation decisions read.

:func:`policies_of` builds the three once per question from a reasoner's params; each reasoner keeps its own
prompts, options and search, and asks the policies how to decide, answer and what to show.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from kgrag.llm.calls import CallRecord, LLMRequest
from kgrag.reasoning.reasoners import decide as dc
from kgrag.reasoning.reasoners.baselines import cot_answer, cot_request, io_request
from kgrag.reasoning.reasoners.core import ReasonInput, Reasoning, Sampling, text_of
from kgrag.reasoning.reasoners.parsing import parse_choices

Gen = Generator[list[LLMRequest], list[CallRecord], Any]


# ------------------------------------------------------------------------------------------ deciding

@dataclass(frozen=True)
class Choice:
    """One decision taken: the positions chosen (best first), whether the reply was read (a scored decision
    always is), the generated reply ("" when scored) and every option's score (scored; None after a failed
    call, or when generated)."""

    positions: list[int]
    parsed: bool = True
    reply: str = ""
    scores: list[float] | None = None


class Decider(Protocol):
    """How an LLM choice among options is taken (``decide``)."""

    name: str  # "generate" | "score"
    scored: bool  # the options are scored, nothing generated

    def request(self, options: Sequence[str], *, ask: Callable[[], str], paper: Callable[[], LLMRequest] | None,
                system: str = dc.DECIDE_SYSTEM) -> LLMRequest:
        """The decision's one request: the reasoner's own prompt (``paper()``) or ``options`` scored as the reply
        to ``ask()`` under ``system``."""
        ...

    def choose(self, rec: CallRecord, n: int, k: int, *, none: bool = False) -> Choice:
        """The ``k`` of ``n`` options the call's reply chooses; ``none``: the options end with a "none of them"
        option, which chosen first (by letter or best score) chooses nothing."""
        ...


def parse_fine(reply: str, n: int, k: int) -> tuple[list[int] | None, bool]:
    """(chosen positions, parsed) of a choice reply over ``n`` options plus the "none" option (FastToG's fine
    pruning): ``[]`` when the LLM picks "none" first; None with parsed False when no valid letter is found."""
    got = parse_choices(reply, n + 1, n + 1)
    if got is None:
        return None, False
    if got[0] == n:
        return [], True
    return [g for g in got if g != n][:k], True


class GenerateDecider:
    """``decide: generate``: the paper's prompt, the reply's option letters parsed; no letter readable: the first
    ``k`` options (the pre-rank), counted unparseable by the caller (``Choice.parsed`` False)."""

    name, scored = "generate", False

    def request(self, options, *, ask, paper, system=dc.DECIDE_SYSTEM) -> LLMRequest:
        return paper()

    def choose(self, rec: CallRecord, n: int, k: int, *, none: bool = False) -> Choice:
        reply = text_of(rec)
        got, ok = parse_fine(reply, n, k) if none else (parse_choices(reply, n, k), True)
        if got is None:
            return Choice(list(range(min(k, n))), False, reply)
        return Choice(got, ok, reply)


@dataclass(frozen=True)
class ScoreDecider:
    """``decide: score``: every option scored as the reply (``decide.score_request``), the ``k`` best taken
    (``score_normalize``: mean or sum of the token log-probs); a failed call keeps the first ``k``."""

    s: Sampling
    normalize: str = "mean"
    name: str = "score"
    scored: bool = True

    def request(self, options, *, ask, paper=None, system=dc.DECIDE_SYSTEM) -> LLMRequest:
        return dc.score_request(ask(), options, self.s, system=system)

    def choose(self, rec: CallRecord, n: int, k: int, *, none: bool = False) -> Choice:
        best, scores = dc.choose(rec, n + int(none), k, self.normalize)
        return Choice([] if none and best[:1] == [n] else best, True, "", scores)


# ------------------------------------------------------------------------------------------ answering

@dataclass(frozen=True)
class Ranked:
    """rank's answer over the entities reached: the joined answer, the top scored names, the names chosen (the
    answers as they are) and the calls made (0 or 1)."""

    answer: str
    top: list
    picked: tuple[str, ...]
    calls: int


@dataclass(frozen=True)
class Fallback:
    """The fallback's answer (IO, or chain of thought): the answer, 1 when its reply was not read, the reply."""

    answer: str
    unparseable: int
    reply: str


class Answerer(Protocol):
    """How the final answer is made (``answer``)."""

    name: str  # "generate" | "rank"
    ranks: bool  # rank's selection over the entities reached answers

    def rank(self, *, facts: Sequence[str], ids: dict[str, int], trace: dict, need_score: bool = False) -> Gen:
        """rank's call over the names of ``ids`` (name -> entity id) with ``facts`` as context: returns
        :class:`Ranked` (one name and no score needed: no call, ``decide.rank_call``)."""
        ...

    def fallback(self, kind: str = "cot", *, facts: str = "", max_tokens: int | None = None) -> Gen:
        """The LLM answers alone: the IO prompt, or chain of thought over ``facts``: returns :class:`Fallback`."""
        ...

    def final(self, *, ids: dict[str, int], facts: Sequence[str], generated: str | None, trace: dict, depth: int,
              unparseable: int) -> Gen:
        """A search's answer from what it reached (``ids``, ``facts``) or ``generated``: the :class:`Reasoning`, or
        None where neither answers (the caller's fallback then does)."""
        ...


@dataclass(frozen=True)
class GenerateAnswerer:
    """``answer: generate``: the search's generated answer, else the fallback (IO / chain of thought)."""

    inp: ReasonInput
    margin: float = 0.0
    name: str = "generate"
    ranks: bool = False

    def rank(self, *, facts, ids, trace, need_score=False) -> Gen:
        picked: list[str] = []
        ans, top, made = yield from dc.rank_call(question=self.inp.question, facts=facts, ids=ids,
                                                 s=self.inp.sampling, margin=self.margin, trace=trace,
                                                 need_score=need_score, chosen=picked)
        return Ranked(ans, top, tuple(picked), made)

    def final(self, *, ids, facts, generated, trace, depth, unparseable) -> Gen:
        """The generated answer, if any (no call)."""
        if generated is None:
            return None
        yield from ()
        return Reasoning(answer=generated or "", depth=depth, trace=trace, unparseable=unparseable)

    def fallback(self, kind: str = "cot", *, facts: str = "", max_tokens: int | None = None) -> Gen:
        q, s = self.inp.question, self.inp.sampling
        (rec,) = yield [io_request(q.text, s, choices=q.choices) if kind == "io"
                        else cot_request(q.text, s, facts=facts, max_tokens=max_tokens, choices=q.choices)]
        text = text_of(rec)
        if kind == "io":
            return Fallback(text.strip(), 0, text)
        ans, ok = cot_answer(text)
        return Fallback(ans, int(not ok and bool(text)), text)


@dataclass(frozen=True)
class RankAnswerer(GenerateAnswerer):
    """``answer: rank``: rank's selection over the entities the search reached (names within ``margin`` of the
    best output too); with none reached, as ``generate``."""

    name: str = "rank"
    ranks: bool = True

    def final(self, *, ids, facts, generated, trace, depth, unparseable) -> Gen:
        """rank's answer over the names of ``ids`` (a label task's choices where it has them) with ``facts`` as
        context; nothing to rank: the generated answer, if any."""
        if not ids and not self.inp.question.choices:
            return (yield from super().final(ids=ids, facts=facts, generated=generated, trace=trace, depth=depth,
                                             unparseable=unparseable))
        got = yield from self.rank(facts=facts, ids=ids, trace=trace)
        return ranked(got, depth=depth, trace=trace, unparseable=unparseable)


def ranked(r: Ranked, *, depth: int, trace: dict, unparseable: int, answer_depth: int | None = None,
           **fields) -> Reasoning:
    """The Reasoning of rank's answer: ``fields`` (a reasoner's stop, depth reached ...), ``answer_from``,
    ``rank_top`` and, when given, ``answer_depth`` (``stop: rank``'s best depth) written to the trace; the names
    rank chose are the answers as they are."""
    trace.update(**fields, answer_from="rank", rank_top=r.top)
    if answer_depth is not None:
        trace["answer_depth"] = answer_depth
    return Reasoning(answer=r.answer, depth=depth, trace=trace, unparseable=unparseable, answers=r.picked)


# ------------------------------------------------------------------------------------------ demonstrations

class Demonstrations(Protocol):
    """Which demonstrations the relation decisions are shown (``demos``), and the scores of the relation paths
    walked after them: ``decide.PathBook`` (``demos: k``; its path scoring is what the reasoners' relation
    decisions call) or :class:`NoDemos`."""

    active: bool  # demonstrations are shown, relation paths scored
    shown: list  # [question, path] of each demonstration

    def stamp(self, trace: dict) -> None:
        """The demonstrations shown, in the trace."""
        ...

    def best(self, paths) -> tuple[tuple | None, float | None]:
        """The most likely whole path among ``paths`` and its score; (None, None) when none is scored."""
        ...

    def best_state(self, states: Sequence, default):
        """The state whose most likely whole path scores highest; ``default`` when none has a scored path."""
        ...


@dataclass(frozen=True)
class NoDemos:
    """``demos: 0``: no demonstration is shown, no relation path is scored (``decide.PathBook``'s reads answer
    "nothing scored")."""

    active: bool = False
    shown: list = field(default_factory=list)

    def stamp(self, trace: dict) -> None:
        """Nothing shown, nothing written to the trace."""

    def best(self, paths) -> tuple[None, None]:
        return None, None

    def best_state(self, states: Sequence, default):
        return default


# ------------------------------------------------------------------------------------------ the factory

@dataclass(frozen=True)
class Policies:
    """One question's three policies (:func:`policies_of`)."""

    decide: Decider
    answer: Answerer
    demos: Demonstrations

    @property
    def scored_check(self) -> bool:
        """The sufficiency check (``End?``) is scored, Yes against No: decisions scored and rank answers."""
        return self.decide.scored and self.answer.ranks

    def stamp(self, trace: dict) -> None:
        """kgrag's adaptations in the trace: ``decide`` and ``answer`` where either is not the paper's."""
        if self.decide.scored or self.answer.ranks:
            trace.update(decide=self.decide.name, answer=self.answer.name)


def policies_of(params: dc.ScoreFields, inp: ReasonInput, topic_names: Sequence[str] | None = ()) -> Policies:
    """The policies a graph reasoner's params select (``decide``, ``answer``, ``score_normalize``, ``margin``
    and, where it has them, the ``demos`` fields), for the question of ``inp`` whose topic entities are named
    ``topic_names`` (masked in the demonstrations' lookup; None: the search does not start, no demonstrations
    are looked up)."""
    s = inp.sampling
    decider = ScoreDecider(s, params.score_normalize) if params.decide == "score" else GenerateDecider()
    answerer = (RankAnswerer if params.answer == "rank" else GenerateAnswerer)(inp, params.margin)
    book = dc.PathBook.of(params, index=inp.index, question=inp.question.text, topic_names=topic_names, s=s) \
        if getattr(params, "demos", 0) and topic_names is not None else None
    return Policies(decider, answerer, NoDemos() if book is None else book)
