"""``tog``: Think-on-Graph, as FastToG describes it (n-d 1-w beam search over entity-relation chains).

From the question's topic entities, each depth does *relation pruning* (up to W (entity, relation,
direction) candidates among the current entities' relations), then *entity pruning* (up to W of the tail
entities those relations reach, each extending one chain by a triple), then a *reasoning* call asking
whether the chains collected so far suffice ("Answer: ..." or "Unknown"). Without an answer by depth D
the reasoner falls back to the IO or CoT baseline (the LLM's own knowledge).

Pruning is by the LLM (a multiple-choice prompt whose options carry letters in braces, read by
``parse_choices``) or, with no LLM call, by BM25 or sentence-transformer similarity to the question
(``kgrag.retrieval.lego.SCORERS``). The shared pieces (reasoning prompt and parser, fallback step, scoring) are
reused by ``fasttog``.

References
----------
Sun et al., Think-on-Graph: Deep and Responsible Reasoning of Large Language Model on Knowledge Graph
(ICLR 2024), section 2 (search pruning, reasoning, Algorithm 1); Liang et al., FastToG (2024), related work
and Table 1 (ToG as the n-d 1-w baseline).
"""

from __future__ import annotations

import zlib
from collections.abc import Generator, Sequence
from typing import Any, Literal

import numpy as np
from pydantic import Field

from kgrag import ranking
from kgrag.llm.prompts import DEMO_QUESTION, clean_question, separated
from kgrag.llm.calls import CallRecord, LLMRequest
from kgrag.reasoning.reasoners import decide as dc
from kgrag.reasoning.reasoners.core import REASONERS, ReasonGen, ReasonInput, Reasoning, Sampling, text_of
from kgrag.reasoning.reasoners.parsing import final_answer, is_unknown, letters
from kgrag.reasoning.reasoners.policies import Policies, policies_of, ranked
from kgrag.reasoning.traces import ToGDepth, ToGTrace
from kgrag.kg.kgview import KGView


# ------------------------------------------------------------------------------------------ prompts

TOG_SYSTEM = "You explore a knowledge graph to answer a question. Follow the instructions exactly."

TOG_RELATION_PROMPT = (
    "Question: {question}\n"
    "Current entities: {entities}\n"
    "Relations of the current entities ('?' is the entity the relation leads to):\n"
    "{options}\n"
    "Choose up to {k} relations most likely to lead to the answer. "
    "Reply only with their letters in braces, e.g. {example}."
)

TOG_ENTITY_PROMPT = (
    "Question: {question}\n"
    "Candidate facts (head, relation, tail) extending the reasoning paths:\n"
    "{options}\n"
    "Choose up to {k} facts most likely to lead to the answer. "
    "Reply only with their letters in braces, e.g. {example}."
)

REASON_SYSTEM = (
    "You answer a question from the knowledge graph facts you are given. If the facts are enough, reply "
    "'Answer: name | name' with the answer names only. If they are not enough, reply 'Answer: Unknown'."
)

TOG_REASON_PROMPT = (
    "Knowledge graph paths (head, relation, tail):\n{paths}\n\n"
    "Question: {question}\n"
    "Are these facts enough to answer? Reply 'Answer: name | name', or 'Answer: Unknown' if not."
)

# one worked example of the reasoning format (shown when ``generate.few_shot``): the format only, no domain; its
# entities and relations are placeholders no KG holds (``kgrag.llm.prompts.DEMO_NAMES``), so an answer copied
# from it cannot score
REASON_DEMO = (
    "Knowledge graph paths (head, relation, tail):\n(Entity Two, relation_1, Entity One)\n"
    f"(Entity Two, relation_2, Entity Four)\n\nQuestion: {DEMO_QUESTION}\n"
    "Are these facts enough to answer? Reply 'Answer: name | name', or 'Answer: Unknown' if not.",
    "Answer: Entity Four",
)

MAX_OPTIONS = 25  # letters A..Y for candidates; the 26th letter is kept for FastToG's "none of them"


# ------------------------------------------------------------------------------------------ shared parts

def prune_request(prompt: str, s: Sampling, max_tokens: int, system: str = TOG_SYSTEM,
                  temperature: float | None = None) -> LLMRequest:
    """A pruning request (the generate section's sampling settings unless ``temperature`` is given, short reply)."""
    return LLMRequest(messages=(("system", system), ("user", prompt)),
                      temperature=s.temperature if temperature is None else temperature, top_p=s.top_p,
                      max_tokens=max_tokens, seed=s.seed)


def option_lines(texts: Sequence[str]) -> str:
    """``{A} text`` lines."""
    return "\n".join(f"{{{c}}} {t}" for c, t in zip(letters(len(texts)), texts))


def example_letters(k: int, n: int) -> str:
    """The answer-format example of a choice prompt: ``{A}`` or ``{A} {B}``."""
    return " ".join(f"{{{c}}}" for c in letters(min(k, n, 2)))


def reason_request(user: str, s: Sampling) -> LLMRequest:
    """The reasoning call: facts + question, reply ``Answer: ...`` or ``Answer: Unknown``."""
    demo = (("user", separated(REASON_DEMO[0], s.separator)), ("assistant", REASON_DEMO[1])) if s.few_shot else ()
    return LLMRequest(messages=(("system", separated(REASON_SYSTEM, s.separator)), *demo, ("user", user)),
                      temperature=s.temperature, top_p=s.top_p, max_tokens=s.max_tokens, seed=s.seed)


def parse_reasoning(text: str) -> tuple[str | None, bool]:
    """(answer or None for Unknown, parsed) of a reasoning reply.

    An ``Answer:`` line gives the answer (``Answer: Unknown`` means not yet); a reply that declines
    (``Unknown``, ``I don't know``) or is empty (failed call) means not yet. Anything else is
    *unparseable* (second element False) and, as documented in the reasoners, treated as Unknown: the
    search goes on and, at worst, the fallback answers.
    """
    ans = final_answer(text)
    if ans is not None:
        return (None if is_unknown(ans) else ans), True
    if is_unknown(text):
        return None, True
    return None, False


def incident_edges(kg: KGView, ids: Sequence[int], graph_id: str | None, max_edges: int,
                   rng: np.random.Generator | None = None, fair: bool = False) -> np.ndarray:
    """Triple indices of the edges touching ``ids`` that a question over ``graph_id`` sees (its own graph
    when it has one, else the global KG: ``KGStore.question_neighbourhood``), sorted.

    Past ``max_edges`` (a hub): with ``rng`` a uniform random subsample of ``max_edges`` of them (seeded by the
    caller, so reproducible; no draw is made below the cap), without it the first ``max_edges`` in KB order
    (which favours whatever the loader wrote first). ``fair`` (with ``rng``): the cap is shared among ``ids``
    (``fair_share``): a node with few edges keeps them all, the hubs share the rest, so a genre's thousands of
    films do not push a film's director out of a draw over the union.
    """
    ids_ = np.asarray(list(ids), dtype=np.int64)
    nb = kg.question_neighbourhood(ids_, 1, max_edges if rng is None else 10**12, graph_id=graph_id)
    e = np.sort(nb.edges)
    if rng is not None and len(e) > max_edges:
        e = fair_share(kg, e, ids_, max_edges, rng) if fair else np.sort(rng.choice(e, size=max_edges, replace=False))
    return e


def fair_share(kg: KGView, edges: np.ndarray, ids: np.ndarray, cap: int, rng: np.random.Generator) -> np.ndarray:
    """``cap`` of ``edges`` (sorted) shared among the nodes ``ids`` they touch (an edge counts for its head when
    the head is one of ``ids``, else for its tail): the largest per-node quota q with sum(min(count, q)) <= cap
    (water-filling), each node's edges a seeded uniform draw of min(count, q); sorted."""
    owner = np.where(np.isin(kg.heads[edges], ids), kg.heads[edges], kg.tails[edges])
    nodes, counts = np.unique(owner, return_counts=True)
    lo, hi = 0, int(counts.max())
    while lo < hi:  # the largest quota that fits
        mid = (lo + hi + 1) // 2
        if int(np.minimum(counts, mid).sum()) <= cap:
            lo = mid
        else:
            hi = mid - 1
    keep = [edges[owner == n] if c <= lo else rng.choice(edges[owner == n], size=lo, replace=False)
            for n, c in zip(nodes.tolist(), counts.tolist())]
    return np.sort(np.concatenate(keep)) if keep else edges[:0]


def valid_topics(inp: ReasonInput) -> list[int]:
    """The question's topic entity ids present in the KG, in order, without repeats."""
    kg = inp.kg
    if kg is None:
        return []
    out: list[int] = []
    for t in inp.question.topic_ids:
        if t is not None and 0 <= int(t) < kg.num_entities and int(t) not in out:
            out.append(int(t))
    return out


def no_topic_entity(run: Any, start: str) -> Gen:
    """The answer of a graph search with no topic entity to start from (``valid_topics`` empty): nothing is
    explored, the trace's ``start`` key (where ``run`` writes what it starts from) is empty and ``run``'s fallback
    answers at depth 0 (``stop: no_topic_entity``)."""
    run.trace[start] = []
    return (yield from run.finish("no_topic_entity", 0))


class Scorer:
    """Relevance of texts to the question by BM25 or sentence-transformer similarity (the LEGO scorers).

    ``st`` needs the embedding index; without one (``ReasonInput.index`` is None) it scores by BM25
    instead and says so in ``used``.
    """

    def __init__(self, kind: str, inp: ReasonInput) -> None:
        from kgrag.retrieval.lego import SCORERS
        from kgrag.retrieval.lego.types import Context

        self.question = clean_question(inp.question.text)
        self.used = kind if kind in ("bm25", "st") else "bm25"
        if self.used == "st" and inp.index is None:
            self.used = "bm25"
        self.entry = SCORERS.get(self.used)
        qvec = inp.index.encode([self.question])[0] if self.used == "st" else np.zeros(1, dtype=np.float32)
        self.ctx = Context(question=self.question, query_vec=qvec, kg=inp.kg, index=inp.index)

    def __call__(self, docs: Sequence[str]) -> np.ndarray:
        if not docs:
            return np.zeros(0)
        return np.asarray(self.entry.impl(query=self.question, docs=list(docs), params=self.entry.params(),
                                          ctx=self.ctx), dtype=np.float64)

    def rank(self, docs: Sequence[str]) -> list[int]:
        """Doc positions by descending score rounded per ``kgrag.ranking``, ties in input order."""
        return [int(i) for i in ranking.order(self(docs))]


def rel_words(name: Any) -> str:
    """A relation name as words (for scoring)."""
    return str(name).replace("_", " ").replace(".", " ")


# ------------------------------------------------------------------------------------------ params

class ToGParams(dc.DemoFields):
    """Params of ``tog``."""

    width: int = Field(3, ge=1, le=MAX_OPTIONS, description="beam width W: relations kept and chains kept per depth")
    depth: int = Field(3, ge=1, description="maximum depth D (exploration + reasoning rounds)")
    path_margin: float = Field(2.3, ge=0.0, description=dc.PATH_MARGIN_HELP)
    prune: Literal["llm", "bm25", "st"] = Field(
        "llm", description="pruner of relations and entities: llm (multiple-choice prompt), bm25 or st "
        "(sentence-transformer similarity to the question; no LLM call)")
    fallback: Literal["io", "cot"] = Field("cot", description="baseline answering when no answer by depth D")
    max_relations: int = Field(
        20, ge=1, le=MAX_OPTIONS, description="relation candidates considered per depth (best BM25 / ST first; "
        "the LLM sees them as options {A}, {B}, ...)")
    max_entities: int = Field(20, ge=1, le=MAX_OPTIONS, description="tail-entity candidates considered per depth")
    max_edges: int = Field(5000, ge=1, description="incident edges read per depth (past it a hub's edges are a "
                           "seeded random subsample)")
    prune_tokens: int = Field(24, ge=1, description="max tokens of a pruning reply")
    decide: dc.Decide = Field("generate", description=dc.DECIDE_HELP + "; with prune: llm, relation and entity "
                              "pruning and the sufficiency check (Yes / No scored) are scored")
    answer: dc.FinalAnswer = Field("generate", description=dc.ANSWER_HELP + ": the ends of the kept chains")
    stop: Literal["check", "rank", "path"] = Field(
        "check", description="with decide: score and answer: rank, when the search stops: check = when the scored "
        "sufficiency check prefers Yes to No (else at depth D); rank = rank's call at every depth over the kept "
        "chains' ends, the search runs D depths (or to a dead end) and answers with the depth whose best name "
        "scores highest; path (needs demos) = when the best chain's relation path ends, '.' scored against '->' "
        "after the demonstrations' paths")


# ------------------------------------------------------------------------------------------ prompts of decide: score

TOG_RELATION_SCORE = ("Question: {question}\nCurrent entities: {entities}\n"
                      "Which relation of the current entities leads to the answer? Reply with it as "
                      "(head, relation, tail), '?' for the entity it leads to.")
TOG_ENTITY_SCORE = ("Question: {question}\n"
                    "Which fact (head, relation, tail) extends the reasoning path towards the answer?")


# ------------------------------------------------------------------------------------------ the reasoner

def _triple(kg: KGView, e: int) -> tuple[str, str, str]:
    return (str(kg.entity_names[kg.heads[e]]), str(kg.relation_names[kg.relations[e]]),
            str(kg.entity_names[kg.tails[e]]))


def _fmt(t: tuple[str, str, str]) -> str:
    return f"({t[0]}, {t[1]}, {t[2]})"


def _all_kept(texts: list[str]) -> tuple[list[int], dict, int]:
    """A scored decision with no more options than the width: nothing to choose, every option kept, no call
    (``_prune``'s return: positions, trace record, calls)."""
    return list(range(len(texts))), {"options": texts, "chosen": list(texts), "parsed": True, "reply": "",
                                     "no_call": "no more options than the width"}, 0


def _prune(params, s, decider, texts: list[str], *, score_prompt, prompt):
    """One pruning decision of ToG (relations or entities) over ``texts``: with ``prune: llm`` the decider's
    (``decide: score``: the options scored as the reply to ``score_prompt()``, W best kept, and no call where
    there are no more options than W; ``generate``: the paper's prompt ``prompt()``, its letters parsed), else
    the embedding / BM25 pre-rank's first W. Yields its one request, if any; returns (chosen positions, the trace
    record: options, chosen, parsed, reply and, when scored, every option's score (None after a failed call),
    calls)."""
    if params.prune != "llm":
        return list(range(min(params.width, len(texts)))), {"options": texts, "chosen": texts[: params.width],
                                                            "parsed": True, "reply": ""}, 0
    if decider.scored and len(texts) <= params.width:
        return _all_kept(texts)
    (rec,) = yield [decider.request(texts, ask=score_prompt,
                                    paper=lambda: prune_request(prompt(), s, params.prune_tokens))]
    got = decider.choose(rec, len(texts), params.width)
    record = {"options": texts, "chosen": [texts[i] for i in got.positions], "parsed": got.parsed, "reply": got.reply}
    if decider.scored:
        record["scores"] = dc.scored_options(texts, got.scores)
    return got.positions, record, 1


def _steps(kg: KGView, path: Sequence[int], end: int) -> tuple[tuple[str, bool], ...]:
    """The relation path of a chain (its triples, walked from a topic to ``end``): ``(relation, forward)`` per
    triple, forward when walked head -> tail (the learnt plan's steps, ``kgrag.index.relplan``)."""
    out: list[tuple[str, bool]] = []
    cur = end
    for x in reversed(list(path)):
        h, t = int(kg.heads[x]), int(kg.tails[x])
        fwd = t == cur
        out.append((str(kg.relation_names[kg.relations[x]]), fwd))
        cur = h if fwd else t
    return tuple(reversed(out))


def _prune_by_path(params, texts: list[str], steps: list[tuple[str, bool]],
                   history: list[tuple[tuple[str, bool], ...]], book: dc.PathBook):
    """Relation pruning with demonstrations (``demos: k``): each option (``steps[i]`` reached from a chain whose
    path so far is ``history[i]``) scored as the next step of that path after the demonstrations' paths: the
    whole path with the step, ending ('.') and going on (' ->'), log-sum of the two (``decide.PathBook.expand``:
    one call for every distinct path so far; the two end scores stay in ``book.ends``, where ``stop:
    path`` reads them instead of a call); the W best options within ``path_margin`` of the best kept (an option
    whose call failed scores below every scored one, so the pre-rank decides among those). Yields its requests;
    returns (chosen positions, the trace record, calls)."""
    if len(texts) <= params.width:
        return _all_kept(texts)
    groups: dict[tuple, list[tuple[str, bool]]] = {}
    for h, st in zip(history, steps):
        groups.setdefault(tuple(h), []).append(st)
    n = yield from book.expand(groups)
    score = [book.score.get(tuple(h) + (st,)) for h, st in zip(history, steps)]
    per_path = [{"path": dc.path_text(h), "scores": dc.scored_options(
        [dc.step_text(*x) for x in dict.fromkeys(sts)], [book.score.get(h + (x,)) for x in dict.fromkeys(sts)])}
        for h, sts in groups.items()]
    chosen = dc.best_k([-1e18 if v is None else v for v in score], params.width)
    if chosen and score[chosen[0]] is not None:  # far less likely next steps than the best are not walked
        chosen = [i for i in chosen if score[i] is not None and score[i] >= score[chosen[0]] - params.path_margin]
    return chosen, {"options": texts, "chosen": [texts[i] for i in chosen], "parsed": True, "reply": "",
                    "scores": [[t, score[i]] for i, t in enumerate(texts)], "paths": per_path}, n


def _hub_rng(seed: int, question_id: str, depth: int) -> np.random.Generator:
    """The generator of a hub's edge subsample: seeded by the sampling seed, the question and the depth."""
    return np.random.default_rng([seed, zlib.crc32(str(question_id).encode()), depth])


@REASONERS.register("tog", params=ToGParams, version="7")
def tog(*, inp: ReasonInput, params: ToGParams) -> ReasonGen:
    """Think-on-Graph: beam search of width W and depth D over relation then entity pruning, a reasoning
    call after each depth, IO / CoT fallback.

    Fallbacks (each recorded in the trace):

    * no KG, or no topic entity of the question in the KG: no exploration, straight to the fallback
      (``stop: no_topic_entity``), depth 0;
    * a depth with no relation (or no new tail entity) to explore: the search stops (``stop: dead_end``)
      and the fallback answers;
    * no answer by depth D (every reasoning reply Unknown): the fallback answers (``stop: max_depth``);
    * an LLM pruning reply without a valid option letter: counted in ``unparseable`` and the first W
      candidates of the pre-ranking (BM25, or ST when ``prune: st``) are kept instead;
    * a reasoning reply neither ``Answer: ...`` nor Unknown: counted in ``unparseable`` and treated as
      Unknown (the search goes deeper);
    * ``prune: st`` without an embedding index: BM25 is used (``scorer`` in the trace says which).

    ``decide: score`` (with ``prune: llm``; ``kgrag.reasoning.reasoners.decide``): the relation and entity pruning
    score every option as the reply and keep the W best (a failed scoring call keeps the pre-rank's first W);
    with ``answer: rank`` as well, the sufficiency check scores "Yes" against "No". ``answer: rank``: the answer
    is ``rank``'s selection over the ends of the kept chains, with their triples as the facts, once the check
    says the facts suffice, at depth D, or at a dead end (no chain walked yet: the fallback answers).
    Every score is in the trace (``scores`` of each decision, ``rank_top``).

    ``demos: k`` (with ``decide: score``; ``kgrag.reasoning.reasoners.decide.PathBook``): the relation pruning shows
    the relation paths of the k labelled questions nearest to the question (the learnt plan ``plan``) and scores
    each relation as the next step of its chain's path: the path with the step ending ('.') and going on (' ->'),
    log-sum of the two (one call a depth for every chain's path), keeping the W best within ``path_margin``
    of the best; entity pruning keeps one chain per entity; rank answers over the ends of the chains whose path
    scores best (the sum of its next-step scores). ``stop: path``: after each depth, '.' against ' ->' after the
    best-scored chain's path says whether it ends there, read from the call that scored its last step (a call of
    its own only when that step was not scored) (kgrag's adaptation, docs/papers.md).

    At most 3·D + 1 LLM calls with ``prune: llm`` (relation, entity, reasoning per depth; the fallback or
    rank's answer), also 3·D + 1 with ``demos`` (one relation call a depth), D + 1 otherwise.

    References
    ----------
    Sun et al., Think-on-Graph (ICLR 2024), section 2.1; Liang et al., FastToG (2024).
    """
    topics = valid_topics(inp)
    run = _ToGRun(inp, params, topics)
    if not topics:
        return (yield from no_topic_entity(run, "topic"))
    run.start(topics)
    for d in range(1, params.depth + 1):
        rec_d: ToGDepth = {"depth": d}
        run.trace["depths"].append(rec_d)
        relations = yield from run.prune_relations(rec_d, d)
        if relations is None or not (yield from run.prune_entities(rec_d, *relations)):
            return (yield from run.conclude("dead_end", d - 1))
        done = yield from run.reason(rec_d, d)
        if done is not None:
            return done
    return (yield from run.conclude("max_depth", params.depth))


Gen = Generator[list[LLMRequest], list[CallRecord], Any]


class _ToGRun:
    """One question's Think-on-Graph search (:func:`tog`): its state (the kept chains, the trace, the calls made and
    the replies not parsed) and its steps, each a generator of LLM request batches as the reasoner protocol wants."""

    def __init__(self, inp: ReasonInput, params: ToGParams, topics: list[int]) -> None:
        self.inp, self.params = inp, params
        # the three policies: deciding, answering, demonstrations (demos: every relation path's scores)
        self.pol: Policies = policies_of(params, inp, inp.kg.names(np.asarray(topics)) if topics else None)
        self.book = self.pol.demos
        self.s, self.kg, self.q = inp.sampling, inp.kg, inp.question
        self.question = clean_question(self.q.text)
        self.trace: ToGTrace = {"reasoner": "tog", "width": params.width, "max_depth": params.depth,
                                      "prune": params.prune, "depths": []}
        self.unparseable = 0
        self.calls = 0
        # stop: rank: (best score, depth, rank's answer) of the best depth so far
        self.best: list = []
        self.path_score: dict[tuple[int, ...], float] = {}  # demos: a chain's summed next-step scores
        # a chain: the triple indices walked from a topic entity, and the entity it ends at
        self.chains: list[tuple[tuple[int, ...], int]] = []

    def start(self, topics: list[int]) -> None:
        params, trace = self.params, self.trace
        trace["topic"] = self.kg.names(np.asarray(topics))
        self.scorer = Scorer("bm25" if params.prune == "llm" else params.prune, self.inp)
        trace["scorer"] = self.scorer.used
        self.pol.stamp(trace)
        self.book.stamp(trace)
        self.chains = [((), t) for t in topics]

    def finish(self, stop: str, depth: int) -> Gen:
        """The fallback (IO / CoT) answers."""
        params = self.params
        fb = yield from self.pol.answer.fallback(params.fallback)
        self.calls += 1
        self.unparseable += fb.unparseable
        self.trace.update(stop=stop, depth_reached=depth, llm_requests=self.calls, fallback_reply=fb.reply)
        return Reasoning(answer=fb.answer, depth=depth, fallback=params.fallback, trace=self.trace,
                         unparseable=self.unparseable)

    def ranked_ends(self, need_score: bool = False) -> Gen:
        """rank's call over the walked chains' ends, their triples as the facts (``policies.Ranked``); one end and
        no score needed (not ``stop: rank``): no call (``dc.rank_call``)."""
        kg, path_score = self.kg, self.path_score
        walked = [(p, e) for p, e in self.chains if p]
        if path_score:  # demos: the ends of the best-scored relation path (summed next-step scores) only
            top = max(path_score.get(p, -1e18) for p, _ in walked) if walked else 0.0
            walked = [(p, e) for p, e in walked if path_score.get(p, -1e18) >= top - 1e-9]
        ids: dict[str, int] = {}
        for _, e in walked:
            ids.setdefault(str(kg.entity_names[e]), e)
        facts: list[str] = []
        for p, _ in walked:
            facts.extend(t for t in (_fmt(_triple(kg, x)) for x in p) if t not in facts)
        got = yield from self.pol.answer.rank(facts=facts, ids=ids, trace=self.trace, need_score=need_score)
        self.calls += got.calls
        return got

    def conclude(self, stop: str, depth: int) -> Gen:
        """With answer: rank, rank's selection over the kept chains' ends (stop: rank: the best depth's); no
        chain walked yet: the fallback. The entities rank chose are the answers as they are
        (``Reasoning.answers``), not parsed back from their joined text."""
        if self.best:
            d_best, got = self.best[1:]
            return ranked(got, depth=d_best, trace=self.trace, unparseable=self.unparseable, answer_depth=d_best,
                          stop=stop, depth_reached=depth, llm_requests=self.calls)
        if not self.pol.answer.ranks or not any(p for p, _ in self.chains):
            return (yield from self.finish(stop, depth))
        got = yield from self.ranked_ends()
        return ranked(got, depth=depth, trace=self.trace, unparseable=self.unparseable, stop=stop,
                      depth_reached=depth, llm_requests=self.calls)

    def prune_relations(self, rec_d: ToGDepth, d: int) -> Gen:
        """Relation pruning: the (entity, relation, direction) candidates of the chains' end entities, pre-ranked
        and pruned to W. Returns (candidate keys, their texts, their edges, the chosen positions), or None where
        there is no candidate (a dead end)."""
        params, kg, q, book = self.params, self.kg, self.q, self.book
        ends = sorted({e for _, e in self.chains})
        edges = incident_edges(kg, ends, q.graph_id, params.max_edges, rng=_hub_rng(self.s.seed, q.question_id, d))
        used = {x for path, _ in self.chains for x in path}
        cands: dict[tuple[int, int, str], list[int]] = {}
        end_set = set(ends)
        for e in edges.tolist():
            if e in used:
                continue
            h, r, t = int(kg.heads[e]), int(kg.relations[e]), int(kg.tails[e])
            if h in end_set:
                cands.setdefault((h, r, "out"), []).append(e)
            if t in end_set and t != h:
                cands.setdefault((t, r, "in"), []).append(e)
        keys = list(cands)
        if not keys:
            rec_d["relations"] = {"options": [], "chosen": []}
            return None
        order = self.scorer.rank([rel_words(kg.relation_names[r]) for _, r, _ in keys])[: params.max_relations]
        keys = [keys[i] for i in order]
        texts = [(f"({kg.entity_names[e]}, {kg.relation_names[r]}, ?)" if dr == "out"
                  else f"(?, {kg.relation_names[r]}, {kg.entity_names[e]})") for e, r, dr in keys]
        if book.active:
            hist_of = {}
            for path, end in self.chains:
                hist_of.setdefault(end, _steps(kg, path, end))
            chosen, rec_d["relations"], n_calls = yield from _prune_by_path(
                params, texts, [(str(kg.relation_names[r]), dr == "out") for _, r, dr in keys],
                [hist_of[e] for e, _, _ in keys], book)
        else:
            question = self.question
            chosen, rec_d["relations"], n_calls = yield from _prune(
                params, self.s, self.pol.decide, texts,
                score_prompt=lambda: TOG_RELATION_SCORE.format(question=question,
                                                               entities=", ".join(kg.names(np.asarray(ends)))),
                prompt=lambda: TOG_RELATION_PROMPT.format(
                    question=question, entities=", ".join(kg.names(np.asarray(ends))), options=option_lines(texts),
                    k=params.width, example=example_letters(params.width, len(texts))))
        self.calls += n_calls
        self.unparseable += int(not rec_d["relations"]["parsed"])
        return keys, texts, cands, chosen

    def prune_entities(self, rec_d: ToGDepth, keys: list, texts: list[str], cands: dict, chosen: list[int]) -> Gen:
        """Entity pruning: each chosen relation extends the chains ending at its entity by one triple; the
        extensions pre-ranked and pruned to W become the chains. Returns False where none extends (a dead end)."""
        params, kg, book, path_score = self.params, self.kg, self.book, self.path_score
        ext: list[tuple[tuple[int, ...], int]] = []
        # a relation's next-step score (demos): none when there was no choice (0), a failed call's far below
        step_score = {t: -1e9 if sc is None else sc for t, sc in rec_d["relations"].get("scores", [])}
        for i in chosen:
            ent, r, dr = keys[i]
            for path, end in self.chains:
                if end != ent:
                    continue
                on_path = {end} | {int(kg.heads[x]) for x in path} | {int(kg.tails[x]) for x in path}
                for e in cands[keys[i]]:
                    nxt = int(kg.tails[e]) if dr == "out" else int(kg.heads[e])
                    if nxt not in on_path:
                        ext.append((path + (e,), nxt))
                        if book.active:  # the chain's path score: its relations' next-step scores
                            path_score[path + (e,)] = path_score.get(path, 0.0) + step_score.get(texts[i], 0.0)
        if self.pol.decide.scored:  # one chain per entity reached: two relations to one entity would fill the beam
            seen: set[int] = set()
            ext = [x for x in ext if not (x[1] in seen or seen.add(x[1]))]
        if not ext:
            rec_d["entities"] = {"options": [], "chosen": []}
            return False
        etexts = [_fmt(_triple(kg, p[-1])) for p, _ in ext]
        order = self.scorer.rank(etexts)[: params.max_entities]
        ext, etexts = [ext[i] for i in order], [etexts[i] for i in order]
        question = self.question
        chosen, rec_d["entities"], n_calls = yield from _prune(
            params, self.s, self.pol.decide, etexts, score_prompt=lambda: TOG_ENTITY_SCORE.format(question=question),
            prompt=lambda: TOG_ENTITY_PROMPT.format(question=question, options=option_lines(etexts),
                                                    k=params.width, example=example_letters(params.width, len(etexts))))
        self.calls += n_calls
        self.unparseable += int(not rec_d["entities"]["parsed"])
        self.chains = [ext[i] for i in chosen]
        return True

    def reason(self, rec_d: ToGDepth, d: int) -> Gen:
        """After a depth, whether the kept chains answer: the best chain's path ends (``stop: path``), rank's best
        depth so far (``stop: rank``), the sufficiency check (``answer: rank``) or the paper's reasoning call.
        Returns the Reasoning where the search stops here, else None (deeper)."""
        params, kg, s, question, trace, book = self.params, self.kg, self.s, self.question, self.trace, self.book
        paths = [[_fmt(_triple(kg, x)) for x in p] for p, _ in self.chains]
        rec_d["chains"] = paths
        # ---- reasoning over every triple of the kept chains
        lines: list[str] = []
        for p in paths:
            lines.extend(t for t in p if t not in lines)
        if params.stop == "path":  # the best chain's path ends here ('.') or goes on ('->'), after the demos
            hist = _steps(kg, *max(self.chains, key=lambda c: self.path_score.get(c[0], -1e18)))  # the best-scored
            # read from the call that scored its last step; a call of its own only when that step was not scored
            # (no choice at that depth, or a failed call)
            self.calls += yield from book.score_ends([tuple(hist)])
            sc = book.ends.get(tuple(hist))
            done = sc is not None and sc[0] > sc[1]
            rec_d["reasoning"] = {"path": dc.path_text(hist), "path_ends": done,
                                  "scores": dc.scored_options(dc.END_OPTIONS, sc)}
            return (yield from self.conclude("answered", d)) if done else None
        if self.pol.scored_check and params.stop == "rank":
            got = yield from self.ranked_ends(need_score=True)
            rec_d["reasoning"] = {"rank_top": got.top}
            if got.top and (not self.best or got.top[0][1] > self.best[0]):
                self.best[:] = [got.top[0][1], d, got]
            return None
        if self.pol.scored_check:
            # the sufficiency check scored (Yes / No); the answer then comes from rank
            (rec,) = yield [dc.enough_request("\n".join(lines), question, s)]
            self.calls += 1
            yes, sc = dc.enough(rec)
            rec_d["reasoning"] = {"enough": yes, "scores": dc.scored_options(dc.ENOUGH_OPTIONS, sc)}
            return (yield from self.conclude("answered", d)) if yes else None
        prompt = separated(TOG_REASON_PROMPT, s.separator).format(paths="\n".join(lines), question=question)
        (rec,) = yield [reason_request(prompt, s)]
        self.calls += 1
        ans, ok = parse_reasoning(text_of(rec))
        self.unparseable += int(not ok)
        rec_d["reasoning"] = {"reply": text_of(rec), "parsed": ok, "answer": ans}
        if ans is None:
            return None
        if self.pol.answer.ranks:
            return (yield from self.conclude("answered", d))
        trace.update(stop="answered", depth_reached=d, llm_requests=self.calls)
        return Reasoning(answer=ans, depth=d, trace=trace, unparseable=self.unparseable)
