"""The traces of the graph reasoners (``tog``, ``fasttog``, ``agent``, ``explore``) as types: what each writes to a
generations row's ``trace`` column and each report view (``kgrag.reporting.trace_views``, one view per trace
type) reads.

Each is a ``TypedDict``: at run time a plain dict, so a trace serialises to the same JSON, key for key and in the
same order, as the untyped dicts it types; a key is present only where the trace's docstring says so. They live
in the reasoning layer (the reasoners write them; the reporting layer above reads them) and import nothing.

The shared parts: :class:`Choice` (one pruning decision, generated or scored), :class:`Check` (a depth's
sufficiency check), :class:`Ends` (the keys every graph reasoner's end writes: how it stopped and answered),
:class:`SearchStep` (a ToT / GoT step of ``strategies.search``).
"""

from __future__ import annotations

from typing import Any, TypedDict

#: ``[option, score]`` pairs of a scored decision (score None after a failed call)
Scored = list[list[Any]]


class Choice(TypedDict, total=False):
    """One pruning decision: the options (best pre-ranked first), the ones chosen, whether the reply was read,
    the reply ("" when scored); ``scores`` when scored; ``no_call`` where nothing was to choose; ``paths`` (ToG
    with demos: each relation path's next-step scores)."""

    options: list[str]
    chosen: list[Any]  # ToG: the options chosen; FastToG: their positions
    parsed: bool
    reply: str
    scores: Scored
    no_call: str
    paths: list[dict[str, Any]]


class Check(TypedDict, total=False):
    """After a depth, whether the search stops: the generated reasoning (``reply``, ``parsed``, ``answer``), the
    scored check (``enough``, ``scores``), rank's call of ``stop: rank`` (``rank_top``) or, with demos, the
    likeliest path (``path``, ``score`` / ``path_ends``)."""

    reply: str
    parsed: bool
    answer: str | None
    enough: bool
    scores: Scored
    rank_top: Scored
    path: str | None
    score: float | None
    path_ends: bool


class Ends(TypedDict, total=False):
    """How a graph reasoner's search ended: ``stop`` and ``depth_reached`` (ToG, FastToG), the policies' names
    where either is kgrag's adaptation (``decide``, ``answer``), the demonstrations shown (``demos``), rank's
    answer (``answer_from``, ``rank_top``, ``answer_depth`` with ``stop: rank``, ``answer_path`` with demos,
    ``no_call`` for one candidate) or the fallback's / final call's reply."""

    stop: str
    depth_reached: int
    decide: str
    answer: str
    demos: list[list[str]]
    answer_from: str
    rank_top: Scored
    answer_depth: int
    answer_path: str
    no_call: str
    fallback_reply: str
    answer_reply: str


class ToGDepth(TypedDict, total=False):
    """One depth of ToG: relation and entity pruning, the kept chains (their triples' texts), the check."""

    depth: int
    relations: Choice
    entities: Choice
    chains: list[list[str]]
    reasoning: Check


class ToGTrace(Ends, total=False):
    """``tog``'s trace (view: ``trace_views._trace_tog``)."""

    reasoner: str
    width: int
    max_depth: int
    prune: str
    depths: list[ToGDepth]
    topic: list[str]
    scorer: str
    llm_requests: int


class CommunityChoice(TypedDict, total=False):
    """A FastToG community pruning: the LCS record (``lcs``), the candidate communities' texts and modularity,
    the decision (``reply``, ``parsed``, ``chosen`` positions, ``scores`` / ``paths`` when scored) and, per chain
    of a round, ``chain`` and ``stopped`` where it stopped growing; the initial phase adds its ``chains`` and
    its check (``context``, ``reasoning``)."""

    chain: int
    lcs: dict[str, Any]
    options: list[str]
    modularity: list[float]
    reply: str
    parsed: bool
    chosen: list[int]
    scores: Scored
    paths: list[str | None]
    stopped: str
    chains: list[list[list[str]]]
    context: str
    reasoning: Check


class FastToGRound(TypedDict, total=False):
    """One round of FastToG: each chain's pruning, the chains (their communities' entity names), the text
    reasoned over and the check."""

    depth: int
    pruning: list[CommunityChoice]
    chains: list[list[list[str]]]
    context: str
    reasoning: Check


class FastToGTrace(Ends, total=False):
    """``fasttog``'s trace (view: ``trace_views._trace_fasttog``); ``llm_requests``: the purpose of every call."""

    reasoner: str
    width: int
    d_max: int
    detector: str
    text: str
    depths: list[FastToGRound]
    llm_requests: list[str]
    start: str | list
    initial: CommunityChoice
    call_bound: dict[str, Any]


class SearchStep(TypedDict, total=False):
    """One step of the CoT / ToT / GoT search (``strategies.search``): candidates, the evaluator's record, the
    GoT merge and the positions kept."""

    step: int
    candidates: int
    evaluator: str
    decide: str
    scores: list[Any] | None
    chosen: list[int] | None
    reply: str
    merged: dict[str, Any] | None
    kept: list[Any]


class AgentStep(TypedDict, total=False):
    """One agent step: the thought, action, observation and whether the action was valid; in the log of every
    step (``all_steps``) also where it grew from (``step``, ``parent``, ``branch``) and the generated ``reply``;
    scored, each option's ``scores`` (and ``best_path`` with demos)."""

    step: int
    parent: int | str
    branch: int | None
    reply: str
    thought: str
    action: str
    observation: str
    valid: bool
    scores: Scored
    best_path: dict[str, Any]


class AgentTrace(Ends, total=False):
    """``agent``'s trace (view: ``trace_views._trace_agent``): the answering chain's steps, every step, the
    search; ``prerank`` (scored): the NeighborCheck options' pre-rank."""

    reasoner: str
    strategy: str
    steps: list[AgentStep]
    all_steps: list[AgentStep]
    search: list[SearchStep]
    prerank: str


class Explored(TypedDict, total=False):
    """One entity explored: its level, name, the relations kept and the triples kept; the pruning's scores
    (``relation_scores``, ``triple_scores``) and, with demos, the path it was reached by (``path``,
    ``path_end``)."""

    level: int
    entity: str
    relations: list[str]
    triples: list[str]
    path: str
    relation_scores: Scored
    path_end: Scored
    triple_scores: Scored


class ExploreStep(TypedDict, total=False):
    """One explore thought: where it grew from, the thought, the extraction reply and entities matched, the
    entities explored, and the scored End? check (``enough``; ``path_end`` with demos)."""

    step: int
    parent: int | str
    branch: int
    thought: str
    extraction: str | None
    entities: list[dict[str, Any]]
    explored: list[Explored]
    enough: Check
    path_end: dict[str, Any]


class ExploreTrace(Ends, total=False):
    """``explore``'s trace (view: ``trace_views._trace_explore``)."""

    reasoner: str
    strategy: str
    prune: str
    seed_entities: list[str]
    thoughts: list[str]
    triples: list[str]
    steps: list[ExploreStep]
    search: list[SearchStep]
