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

``demos: k`` (with ``decide: score``) shows the relation-path decisions ``k`` labelled questions took: the
nearest training questions of a learnt relation-path plan (``relplan`` stage, the one relpath votes with), each
with the relation path that answers it, as in-context demonstrations. A relation is then scored as the next step
of the question's own path, after the demonstrations' paths: a decision a small model can take by copying the
pattern of similar questions (kNN demonstration selection, Liu et al. 2022; RoG's relation paths as plans).

``answer: rank`` ends a graph reasoner's search with ``rank``'s answer selection over the entities its search
reached (the question, the facts it collected as context, each entity's name scored as the answer), in place
of a generated ``Answer:`` reply or the IO / CoT fallback.

References
----------
Luo et al., Graph-constrained Reasoning (GCR, 2024, arXiv 2410.13080): answers constrained to KG entities and
ranked by the LLM's likelihood; Luo et al., Reasoning on Graphs (RoG, ICLR 2024): relation paths as plans;
Liu et al., What Makes Good In-Context Examples for GPT-3? (DeeLIO 2022): nearest-neighbour demonstrations;
Sun et al., Think-on-Graph (ICLR 2024) and Liang et al., FastToG (2024) for the
decisions scored here (relation / entity / community pruning, the sufficiency check).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Literal

import numpy as np
from pydantic import Field, model_validator

from kgrag.config.base import Strict
from kgrag.llm.calls import CallRecord, LLMRequest, scores_of
from kgrag.reasoning.reasoners.core import Sampling

Decide = Literal["generate", "score"]
FinalAnswer = Literal["generate", "rank"]

DECIDE_HELP = ("how each LLM decision is taken: generate = the paper's prompt, the reply parsed (option letters, "
               "Answer: lines); score = every option scored as the reply by the LLM's log-likelihood and the best "
               "taken (kgrag's adaptation for small models, not the paper's setting; docs/papers.md)")
ANSWER_HELP = ("the final answer: generate = the paper's generated answer (and its IO / CoT fallback); rank = "
               "rank's answer selection over the entities the search reached, with the facts it collected as "
               "context (kgrag's adaptation; one entity reached: it is the answer, no call, unless stop: rank)")
NORMALIZE_HELP = ("with decide: score, an option's score: mean of its token log-probs (options of different "
                  "lengths compete fairly) or their sum")



class ScoreFields(Strict):
    """The fields of ``decide: score`` / ``answer: rank`` that every graph reasoner's params share (each reasoner
    adds its own ``decide`` and ``answer``, whose descriptions say what they change there)."""

    score_normalize: Literal["mean", "sum"] = Field("mean", description=NORMALIZE_HELP)
    margin: float = Field(0.0, ge=0.0, description="with answer: rank, names scoring within this of the best are "
                          "output too (rank's top_k auto rule; 0 = the best only)")


DECIDE_SYSTEM = "You explore a knowledge graph to answer a question."

DEMOS_HELP = ("with decide: score, the relation decisions show the paths of the k labelled questions nearest to "
              "the question (kNN demonstrations from the learnt plan `plan`) and score each relation as the next "
              "step of the question's path; 0 = no demonstrations (kgrag's adaptation, docs/papers.md)")
PLAN_HELP = "folder of the learnt relation-path plan the demonstrations come from (stage relplan)"
#: labelled questions that vote with ``demos_order: vote`` (relpath's ``plan_k`` default)
VOTE_K = 16
DEMOS_ORDER_HELP = ("with demos: which demonstrations, in which order: nearest = the k nearest labelled questions "
                    "(distinct question and path), nearest first; vote = the k relation paths with the largest vote "
                    f"among the {VOTE_K} nearest (the plan's cosine-weighted vote, as relpath's), each shown with its "
                    "nearest question, most voted first (labels of one template that disagree show their majority "
                    "path first, not whichever is nearest). Dev, ToG: vote 0.833 against nearest 0.883 Hit@1 "
                    "(reports/bench/generalize_dev_demos_vote.json): nearest repeats the right path, vote shows it "
                    "once")
PATH_MARGIN_HELP = ("with demos: a relation whose next-step score (summed log-prob) is more than this below the best "
                    "one's is dropped, the width staying the upper bound (2.3: ten times less likely)")


class DemoFields(ScoreFields):
    """The ``demos: k`` fields of the reasoners whose relation decisions can be shown demonstrations (``tog``,
    ``fasttog``, ``explore``, ``agent``); each subclass defines ``decide`` (the demonstrations need ``score``)
    and, where it has one, ``prune`` (they need ``llm``) and ``stop`` (``stop: path`` needs demos and ``answer:
    rank``)."""

    demos: int = Field(0, ge=0, le=16, description=DEMOS_HELP)
    plan: str = Field("data/relplan", description=PLAN_HELP)
    demos_order: Literal["nearest", "vote"] = Field("nearest", description=DEMOS_ORDER_HELP)

    @model_validator(mode="after")
    def _demos_need_scores(self):
        if self.demos and (getattr(self, "decide", None) != "score" or getattr(self, "prune", "llm") != "llm"):
            needs = "decide: score" + (" and prune: llm" if hasattr(self, "prune") else "")
            raise ValueError(f"demos: the demonstrations are shown to scored decisions; set {needs}, or demos: 0")
        return self

    @model_validator(mode="after")
    def _stop_path_needs_demos(self):
        if getattr(self, "stop", None) == "path" and (not self.demos or getattr(self, "answer", None) != "rank"):
            raise ValueError("stop: path scores the end of the path after the demonstrations; it needs demos > 0 "
                             "and answer: rank")
        return self


def step_text(relation: str, forward: bool) -> str:
    """One step of a relation path as the demonstrations write it: ``written_by`` walked head -> tail, or
    ``written_by (reverse)`` walked tail -> head."""
    return relation if forward else f"{relation} (reverse)"


def path_text(steps: Sequence[tuple[str, bool]]) -> str:
    """A relation path, ``a -> b (reverse)``."""
    return " -> ".join(step_text(r, f) for r, f in steps)


class Demos:
    """The labelled training questions of a learnt relation-path plan (``kgrag.index.relplan``), looked up by
    similarity: the ``k`` nearest (topic names masked as the plan's texts are) with their relation paths."""

    def __init__(self, plan_folder: str, index) -> None:
        from kgrag.index import relplan

        if index is None:
            raise ValueError("demos: needs the embedding index (the question is embedded to find its neighbours)")
        self.plan = relplan.load_cached(plan_folder)
        if self.plan.model != index.model:
            raise ValueError(f"demos: the plan {plan_folder} was trained with {self.plan.model!r}, the index uses "
                             f"{index.model!r}; re-run the relplan stage (`dvc repro relplan`)")
        self.index = index

    def nearest(self, masked: str, k: int, order: str = "nearest") -> list[tuple[str, tuple[tuple[str, bool], ...]]]:
        """The ``k`` nearest labelled questions with distinct (text, path), nearest first
        (``PlanModel.nearest``: cosine rounded, ties by row): ``[(masked text, path steps), ...]``. ``order:
        vote``: the ``k`` paths of largest vote share among the ``VOTE_K`` nearest (``PlanModel.votes``; ties by
        the path's text), most voted first, each with its nearest question."""
        if k < 1:
            return []
        vec = self.index.encode([masked])[0]
        if order == "vote":
            rows, sims = self.plan.nearest(vec, VOTE_K)
            _, whole = self.plan.shares(rows, sims)
            paths = sorted(whole, key=lambda p: (-whole[p], path_text(p)))[:k]
            first = {}
            for i in rows.tolist():
                first.setdefault(tuple(self.plan.labels[i]), self.plan.texts[i])
            return [(first[p], tuple((str(r), bool(f)) for r, f in p)) for p in paths]
        rows, _ = self.plan.nearest(vec, 8 * k)
        out: list = []
        for i in rows.tolist():
            item = (self.plan.texts[i], tuple((str(r), bool(f)) for r, f in self.plan.labels[i]))
            if item not in out:
                out.append(item)
            if len(out) == k:
                break
        return out


PATH_SYSTEM = ("You write the knowledge graph relation path that answers a question: the relations from the "
               "question's entity X to the answer, '(reverse)' where a relation is walked from tail to head, "
               "ended by '.'.")


def demo_turns(demos: Sequence[tuple[str, Sequence[tuple[str, bool]]]]) -> tuple[tuple[str, str], ...]:
    """The demonstrations as chat turns: each question asked, its path ended by '.' as the reply."""
    out: list[tuple[str, str]] = []
    for t, p in demos:
        out += [("user", f"Question: {t}"), ("assistant", f"{path_text(p)}.")]
    return tuple(out)


def _path_call(demos: Sequence[tuple[str, str]], question: str, options: Sequence[str], s: Sampling) -> LLMRequest:
    return LLMRequest(messages=(("system", PATH_SYSTEM), *demos, ("user", f"Question: {question}")),
                      temperature=0.0, top_p=1.0, max_tokens=1, seed=s.seed, continuations=tuple(options))


END_OPTIONS = (".", " ->")


def paths_request(*, demos: Sequence[tuple[str, str]], question: str, paths: Sequence[Sequence[tuple[str, bool]]],
                  s: Sampling) -> LLMRequest:
    """Whole relation paths of any prefixes in one call, each scored twice: ending there ('.') and going on
    (' ->') (``END_OPTIONS``, options ``2 i`` and ``2 i + 1``). Their log-sum is the last step's probability as
    the path's next step; a bare prefix is no fair option, since the tokenizer merges a path's last character
    with what follows (SmolLM2 writes "(reverse)." as "(reverse" + ")."; "(reverse)" alone ends in a token the
    demonstrations use only before ' ->')."""
    return _path_call(demos, question, [path_text(p) + e for p in paths for e in END_OPTIONS], s)


class PathBook:
    """One question's demonstrations and the scores of every relation path a search walked after them (``demos:
    k`` of ``explore``, ``agent`` and ``fasttog``). The scores are the path's, whichever entity ends it:
    ``ends[path]`` = (log P(path '.'), log P(path ' ->')) as the reply, ``score[path]`` = their log-sum, log
    P(path) as the reply's start; ``expanded``: the paths whose next steps were scored. The demonstrations policy
    of ``demos: k`` (``policies.NoDemos`` is ``demos: 0``'s)."""

    active = True

    def __init__(self, *, plan: str, index, k: int, question: str, topic_names: Sequence[str], s: Sampling,
                 order: str = "nearest") -> None:
        from kgrag.index.relplan import mask_topics

        demos = Demos(plan, index)
        self.masked = mask_topics(question, topic_names)
        got = demos.nearest(self.masked, k, order)
        self.turns = demo_turns(got)
        self.shown = [[t, path_text(p)] for t, p in got]
        self.s = s
        self.score: dict[tuple, float] = {(): 0.0}
        self.ends: dict[tuple, list[float]] = {}
        self.expanded: set[tuple] = set()

    @classmethod
    def of(cls, params: DemoFields, *, index, question: str, topic_names: Sequence[str], s: Sampling):
        """A reasoner's book from its ``demos`` fields (``plan``, ``demos``, ``demos_order``); None without demos."""
        if not params.demos:
            return None
        return cls(plan=params.plan, index=index, k=params.demos, question=question, topic_names=topic_names, s=s,
                   order=params.demos_order)

    def stamp(self, trace: dict) -> None:
        """The demonstrations shown, in the trace (``demos``: [question, path] each)."""
        trace["demos"] = self.shown

    def expand(self, groups: dict[tuple, Sequence[tuple[str, bool]]]):
        """Score the next ``steps`` of each path (``{path: steps}``) not scored before, each step's path ending
        and going on: **one** call for all of them (:meth:`score_paths`, one group: the options are whole paths,
        so a call's prompt does not depend on their prefixes, and a score does not depend on the options beside
        it, docs/inference.md "Exact scores"). A step's score (``score``) is the log-sum of the two (log P(path ->
        step)), its new path's ends (``ends``) are the two; a failed call leaves the steps unscored. Yields the
        request; returns how many (0 or 1)."""
        self.expanded.update(h for h, st in groups.items() if st)
        return (yield from self.score_paths([[h + (st,) for h, sts in groups.items() for st in sts]]))

    def score_paths(self, groups):
        """Score the non-empty paths of each group (``[[path, ...], ...]``) not scored before, each ending and going
        on: **one** call per group whatever the paths' prefixes (``paths_request``; FastToG's one call per chain and
        round), all in one batch; ``score[path]`` the log-sum of the two, ``ends[path]`` the two (the options are
        whole paths, so scores of different prefixes compare). A path new in two groups is scored in the first; a
        failed call leaves its paths unscored. Yields the requests (none when nothing is new); returns how many."""
        seen: set = set()
        todo = []
        for g in groups:
            new = [x for x in dict.fromkeys(g) if x and x not in self.score and x not in seen]
            seen.update(new)
            if new:
                todo.append(new)
        reqs = [paths_request(demos=self.turns, question=self.masked, paths=new, s=self.s) for new in todo]
        recs = (yield reqs) if reqs else []
        for new, rec in zip(todo, recs):
            sc = option_scores(rec, len(END_OPTIONS) * len(new), "sum")
            for i, x in enumerate(new if sc is not None else []):
                end, on = sc[2 * i], sc[2 * i + 1]
                self.score[x] = round(float(np.logaddexp(end, on)), 4)
                self.ends[x] = [end, on]
        return len(reqs)

    def score_ends(self, paths):
        """The end options of each non-empty path not scored yet, all in **one** call (``paths_request``: the
        prompt does not depend on the paths, and each score is as when asked alone); yields it, returns how many
        (0 or 1); a failed call leaves the paths without ``ends``."""
        todo = list(dict.fromkeys(x for x in paths if x and x not in self.ends))
        if not todo:
            return 0
        (rec,) = yield [paths_request(demos=self.turns, question=self.masked, paths=todo, s=self.s)]
        sc = option_scores(rec, len(END_OPTIONS) * len(todo), "sum")
        for i, x in enumerate(todo if sc is not None else []):
            self.ends[x] = [sc[2 * i], sc[2 * i + 1]]
        return 1

    def best(self, paths) -> tuple[tuple | None, float | None]:
        """The most likely whole path among ``paths`` (the highest log P(path '.'); ties by the path's text) and
        its score; (None, None) when none is scored."""
        done = [(self.ends[x][0], path_text(x), x) for x in set(paths) if x in self.ends]
        if not done:
            return None, None
        sc, _, best = min(done, key=lambda t: (-t[0], t[1]))
        return best, sc

    def best_state(self, states: Sequence, default):
        """The state (``.reach``: its paths) whose most likely whole path scores highest, the earlier on a tie;
        ``default`` when none has a scored path (ToT / GoT keep several states; the demonstrations' judgement
        decides between them)."""
        scored = [(sc, -i, st) for i, st in enumerate(states) if (sc := self.best(st.reach)[1]) is not None]
        return max(scored, key=lambda t: (t[0], t[1]))[2] if scored else default

    def open_bound(self, paths) -> float | None:
        """The best log P(path ' ->') among ``paths`` whose next steps were not scored yet: what a path still to
        be extended can at most score (a continuation only lowers the probability)."""
        return max((self.ends[x][1] for x in set(paths) if x not in self.expanded and x in self.ends), default=None)


def merged_reach(a: dict, b: dict) -> dict:
    """Two chains' ``{relation path: entities at its end}`` as one (GoT's merge), ``a``'s entities first."""
    out = dict(a)
    for p, ends in b.items():
        out[p] = out.get(p, ()) + tuple(e for e in ends if e not in out.get(p, ()))
    return out


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
                        choices=question.choices, separator=s.separator)
    return replace(req, continuations=tuple(question.choices or names))


def rank_answer(rec: CallRecord, names: Sequence[str], s: Sampling, *, normalize: str = "sum",
                margin: float = 0.0, ids: dict[str, int] | None = None,
                chosen: list[str] | None = None) -> tuple[str, list[list]]:
    """(answer, top scored names) of ``rank_request``: the best name, and every name within ``margin`` of it,
    joined by the separator (``rank``'s rule, ``kgrag.reasoning.reasoners.rank.rank_candidates``); "" on a failed
    call. ``chosen``, when given, receives the chosen names themselves."""
    from kgrag.reasoning.reasoners.rank import rank_candidates

    got = scores_of(rec)
    if len(got) != len(names) or not names:
        return "", []
    ranked = rank_candidates(list(names), got, normalize=normalize, ids=ids)
    best = [n for n, sc in ranked if sc >= ranked[0][1] - margin]
    if chosen is not None:
        chosen[:] = best
    return f" {s.separator} ".join(best), [[n, sc] for n, sc in ranked[:10]]


def rank_call(*, question, facts: Sequence[str], ids: dict[str, int], s: Sampling, margin: float, trace: dict,
              need_score: bool = False, chosen: list[str] | None = None):
    """``rank_request`` over the names of ``ids`` (name -> entity id; a label task's choices where it has them),
    then ``rank_answer``: yields the one request and returns (answer, top scored names, calls made). ``rank``'s
    one-candidate rule (``kgrag.reasoning.reasoners.rank``): one name and no choices makes no call, the name is
    the answer (top ``[[name, None]]``, ``no_call`` in ``trace``), unless ``need_score`` (``stop: rank`` compares
    the best scores of depths). ``chosen``, when given, receives the chosen names themselves."""
    from kgrag.reasoning.reasoners.rank import ONE_CANDIDATE

    names = list(ids)
    if len(names) == 1 and not question.choices and not need_score:
        trace["no_call"] = ONE_CANDIDATE
        if chosen is not None:
            chosen[:] = names
        return names[0], [[names[0], None]], 0
    (rec,) = yield [rank_request(question=question, facts=facts, names=names, s=s)]
    ans, top = rank_answer(rec, question.choices or names, s, margin=margin, ids=ids, chosen=chosen)
    return ans, top, 1

