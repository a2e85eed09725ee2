"""``fasttog``: Fast Think-on-Graph, reasoning "community by community" (Algorithms 1 and 2 of the paper).

Initial phase: the start community c0 is the question's topic entities; Local Community Search (LCS)
around it gives the W head communities of the W reasoning chains (one multiple-choice pruning call), and one
reasoning call over the head communities may already answer (depth 0: "1 round of pruning and reasoning in
the initial phase", section "Reasoning"; so ``depth`` is the paper's AvgDepth of Fig. 3). Reasoning phase, up
to D_max rounds: LCS around the last community of every active chain (one
single-choice pruning call per chain; a chain stops when the LLM says none of the candidates fits), the
chains are turned into text (Community2Text), and one reasoning call answers or says Unknown. Without an
answer after D_max rounds the LLM answers alone (IO or CoT).

LCS (Algorithm 2): the local subgraph within R_max hops of the current community, each node at hop n kept
with probability rho^(n-1) (seeded); community detection on it with max community size M
(``kgrag.reasoning.community.detect``); communities already in the history set H or not adjacent to the current
community left out; modularity coarse pruning to N candidates (equation 5, ``coarse_prune``); LLM fine
pruning (equation 6).

Paper settings (section "Experiments", "Language Model"): pruning at temperature 0.4, reasoning at 0.1
(``prune_temperature``, ``reason_temperature``; the IO / CoT fallback and graph2text-by-LLM use the generate
section's sampling). Defaults that differ: D_max 3 (paper 5, for cost). Hub entities: past ``max_edges``
incident edges per hop, a seeded random subsample is read (not the first ones in KB order) before the rho
sampling, the cap shared among the hop's nodes (``tog.fair_share``); past ``max_nodes`` a hop's sampled nodes
are subsampled round-robin over the nodes that reached them (``fair_subsample``), so a genre hub in the
current community does not crowd out a film's director. The seq2seq graph2text input is cut at
``seq2seq_max_input_tokens`` (512) tokens.

kgrag's adaptations for small models (not the paper's setting; docs/papers.md): ``decide: score`` scores each
candidate community as the reply; ``answer: rank`` ends with rank's selection over the entities reached;
``demos: k`` rates a community by its nodes' relation paths from the topic after kNN demonstrations, and
``stop: path`` stops on the likeliest whole path (see ``fasttog``).

References
----------
Liang et al., Fast Think-on-Graph: Wider, Deeper and Faster Reasoning of Large Language Model on Knowledge
Graph (2024): sections "Local Community Search", "Reasoning", "Community-to-Text", Appendix A
(Algorithms 1, 2) and C (prompts).
"""

from __future__ import annotations

import functools
import zlib
from collections.abc import Generator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import numpy as np
from pydantic import BaseModel, Field, field_validator, model_validator

from kgrag import arrays
from kgrag.reasoning.community import coarse_prune, detect
from kgrag.llm.prompts import DEMO_QUESTION, clean_question, separated
from kgrag.llm.calls import CallRecord, LLMRequest
from kgrag.reasoning.reasoners import decide as dc
from kgrag.reasoning.reasoners.kgtools import rel_name
from kgrag.reasoning.reasoners.core import REASONERS, ReasonGen, ReasonInput, Reasoning, Sampling, text_of
from kgrag.reasoning.reasoners.parsing import letters
from kgrag.reasoning.reasoners.policies import Policies, policies_of, ranked
from kgrag.reasoning.traces import CommunityChoice, FastToGRound, FastToGTrace
from kgrag.reasoning.reasoners.tog import (
    MAX_OPTIONS, REASON_SYSTEM, _fmt, _triple, example_letters, incident_edges,
    no_topic_entity, option_lines, parse_reasoning, prune_request, rel_words, valid_topics,
)
from kgrag.kg.kgview import KGView


Triple = tuple[str, str, str]

# ------------------------------------------------------------------------------------------ prompts
# Appendix C: the pruning prompt carries the context communities after "Premise" and the candidate
# communities after "Selection" as options {A}, {B}, ...; the reasoning prompt starts with "Context",
# the start community S first (once), then each chain.

PRUNE_SYSTEM = (
    "You explore a knowledge graph community by community to answer a question. Follow the instructions "
    "exactly."
)

PRUNE_PROMPT = (
    "Question: {question}\n"
    "Premise: {premise}\n"
    "Selection:\n{options}\n"
    "{instruction}"
)

PRUNE_MULTI = (
    "Choose up to {k} candidates that help answer the question. Reply only with their letters in braces, "
    "e.g. {example}. If none of them helps, reply {{{none}}}."
)

PRUNE_SINGLE = (
    "Choose the one candidate that best helps answer the question. Reply only with its letter in braces, "
    "e.g. {{A}}. If none of them helps, reply {{{none}}}."
)

NONE_OPTION = "None of the above"

REASON_PROMPT = (
    "Context:\nS: {start}\n{chains}\n\n"
    "Question: {question}\n"
    "Are these facts enough to answer? Reply 'Answer: name | name', or 'Answer: Unknown' if not."
)

REASON_DEMO = (  # the format only: placeholders no KG holds (kgrag.llm.prompts.DEMO_NAMES), no domain
    "Context:\nS: Entity One\nChain 1: Entity Two relation 1 Entity One -> Entity Two relation 2 Entity Four\n\n"
    f"Question: {DEMO_QUESTION}\n"
    "Are these facts enough to answer? Reply 'Answer: name | name', or 'Answer: Unknown' if not.",
    "Answer: Entity Four",
)

G2T_SYSTEM = "You rewrite knowledge graph facts as plain English. Use only the facts given; add nothing."

G2T_PROMPT = (
    "Facts (head relation tail): {triples}\n"
    "Rewrite these facts as one or two short English sentences."
)

# decide: score (kgrag's adaptation for small models): the same questions without option letters, each
# candidate community's Triple2Text (and, for a chain, "None of the above") scored as the reply
SCORE_MULTI = (
    "Question: {question}\n"
    "Premise: {premise}\n"
    "Which community of facts next to the premise helps answer the question? Reply with its facts."
)

SCORE_SINGLE = (
    "Question: {question}\n"
    "Premise: {premise}\n"
    "Which community of facts extends the premise towards the answer? Reply with its facts, or "
    "\"" + NONE_OPTION + "\" if no community helps."
)

SEQ2SEQ_PREFIX = "translate Graph to Text: "  # WebNLG-style linearization for T5 graph-to-text models


# ------------------------------------------------------------------------------------------ Community2Text

def triple2text(triples: Sequence[Triple]) -> str:
    """Triple2Text (T2T): the community's triples as ``head relation tail``, comma-separated (rule-based)."""
    return ", ".join(f"{h} {rel_words(r)} {t}" for h, r, t in triples)


def linearize(triples: Sequence[Triple]) -> str:
    """The seq2seq model's input: ``<H> head <R> relation <T> tail ...`` behind the task prefix."""
    return SEQ2SEQ_PREFIX + " ".join(f"<H> {h} <R> {rel_words(r)} <T> {t}" for h, r, t in triples)


class Community2Text(Protocol):
    """Turns communities (each a list of triples) into text, possibly through LLM calls.

    ``requests`` gives the LLM requests it needs (the reasoner yields them, so they are batched and
    counted like every other call; none for local converters); ``texts`` gets their reply texts (same
    order) and returns one text per community plus the number of unusable outputs, each replaced by
    Triple2Text.
    """

    name: str

    def requests(self, communities: Sequence[Sequence[Triple]], s: Sampling) -> list[LLMRequest]: ...

    def texts(self, communities: Sequence[Sequence[Triple]], replies: Sequence[str]) -> tuple[list[str], int]: ...


class Triple2Text:
    """T2T: rule-based, no model."""

    name = "triple2text"

    def requests(self, communities: Sequence[Sequence[Triple]], s: Sampling) -> list[LLMRequest]:
        return []

    def texts(self, communities: Sequence[Sequence[Triple]], replies: Sequence[str]) -> tuple[list[str], int]:
        return [triple2text(c) for c in communities], 0


class LLMGraph2Text:
    """G2T by the configured LLM: one request per community text, a prompt turning triples into sentences.

    An empty reply (or a failed call) is counted unusable and replaced by the community's Triple2Text.
    """

    name = "graph2text-llm"

    def __init__(self, max_tokens: int) -> None:
        self.max_tokens = max_tokens

    def requests(self, communities: Sequence[Sequence[Triple]], s: Sampling) -> list[LLMRequest]:
        return [LLMRequest(messages=(("system", G2T_SYSTEM), ("user", G2T_PROMPT.format(triples=triple2text(c)))),
                           temperature=s.temperature, top_p=s.top_p, max_tokens=self.max_tokens, seed=s.seed)
                for c in communities]

    def texts(self, communities: Sequence[Sequence[Triple]], replies: Sequence[str]) -> tuple[list[str], int]:
        out, bad = [], 0
        for c, r in zip(communities, replies):
            t = " ".join((r or "").split())
            if not t:
                bad += 1
                t = triple2text(c)
            out.append(t)
        return out, bad


@functools.lru_cache(maxsize=2)
def load_seq2seq(path: str):
    """(tokenizer, model) of a local Hugging Face seq2seq folder (``AutoModelForSeq2SeqLM``), CPU, eval mode,
    hub offline (nothing is downloaded)."""
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    model = AutoModelForSeq2SeqLM.from_pretrained(path, local_files_only=True)
    model.eval()
    return tok, model


class Seq2SeqGraph2Text:
    """G2T by a local seq2seq model (the paper fine-tunes T5-base on WebNLG): greedy decoding of the
    linearized triples, no LLM call. An empty output is counted unusable and replaced by Triple2Text."""

    name = "graph2text-seq2seq"

    def __init__(self, path: str, max_tokens: int, max_input_tokens: int = 512) -> None:
        self.path, self.max_tokens, self.max_input_tokens = path, max_tokens, max_input_tokens

    def requests(self, communities: Sequence[Sequence[Triple]], s: Sampling) -> list[LLMRequest]:
        return []

    def texts(self, communities: Sequence[Sequence[Triple]], replies: Sequence[str]) -> tuple[list[str], int]:
        if not communities:
            return [], 0
        import torch

        tok, model = load_seq2seq(self.path)
        enc = tok([linearize(c) for c in communities], return_tensors="pt", padding=True, truncation=True,
                  max_length=self.max_input_tokens)
        enc.pop("token_type_ids", None)
        with torch.no_grad():
            ids = model.generate(**enc, max_new_tokens=self.max_tokens, do_sample=False, num_beams=1)
        out, bad = [], 0
        for c, t in zip(communities, tok.batch_decode(ids, skip_special_tokens=True)):
            t = " ".join(t.split())
            if not t:
                bad += 1
                t = triple2text(c)
            out.append(t)
        return out, bad


# ------------------------------------------------------------------------------------------ params

class FastToGParams(dc.DemoFields):
    """Params of ``fasttog`` (defaults: the paper's W = 3, M = 4, Louvain; D_max 3 instead of 5 for cost)."""

    width: int = Field(3, ge=1, le=MAX_OPTIONS, description="W: reasoning chains (head communities chosen)")
    d_max: int = Field(3, ge=1, description="D_max: rounds of the reasoning phase (pruning + reasoning) after the "
                                            "initial one (depth 0); the paper uses 5")
    r_max: int = Field(2, ge=1, description="R_max: radius in hops of the local subgraph around a community")
    rho: float = Field(0.5, gt=0.0, le=1.0, description="decay: a node at hop n is sampled with probability rho^(n-1)")
    max_size: int = Field(4, ge=1, description="M: maximum community size (detection backtracks until it holds)")
    detector: str = Field("louvain", description="community detector: louvain | girvan_newman | hierarchical | "
                          "spectral | random (kgrag.reasoning.community)")
    detector_params: dict[str, Any] = Field(
        default_factory=dict, description="params of the chosen detector, validated by its own model (louvain: "
        "resolution, max_passes; spectral: max_k, kmeans_iter; random: mean_size); empty = its defaults")
    candidates: int = Field(4, ge=1, le=MAX_OPTIONS, description="N: communities kept by modularity coarse "
                            "pruning (equation 5), the options of the LLM's fine pruning")
    text: Literal["triple2text", "graph2text"] = Field("triple2text", description="Community2Text of the chains "
                                                       "in the reasoning prompt")
    graph2text: Literal["llm", "seq2seq"] = Field("llm", description="graph2text by the configured LLM (one call "
                                                  "per chain and round) or by a local seq2seq folder")
    seq2seq_path: str | None = Field(None, description="local Hugging Face seq2seq folder (AutoModelForSeq2SeqLM, "
                                     "e.g. a T5 fine-tuned on WebNLG); required by graph2text: seq2seq")
    text_tokens: int = Field(96, ge=1, description="max tokens of a graph2text output")
    seq2seq_max_input_tokens: int = Field(512, ge=8, description="graph2text: seq2seq input cut at this many "
                                          "tokens (T5's usual limit)")
    prune_temperature: float = Field(0.4, ge=0.0, description="sampling temperature of the pruning calls (the "
                                     "paper's 0.4)")
    reason_temperature: float = Field(0.1, ge=0.0, description="sampling temperature of the reasoning calls (the "
                                      "paper's 0.1)")
    fallback: Literal["io", "cot"] = Field("cot", description="baseline answering (io | cot) when no answer after "
                                                              "D_max rounds")
    seed: int = Field(0, description="seed of the neighbour sampling and of the community detector")
    max_nodes: int = Field(300, ge=2, description="local subgraph size cap (past it a hop's sampled nodes are "
                           "subsampled round-robin over the nodes that reached them, seeded)")
    max_edges: int = Field(5000, ge=1, description="incident edges read per hop (past it the cap is shared among "
                           "the hop's nodes: a node with few edges keeps them all, the hubs' are a seeded random "
                           "subsample)")
    max_community_triples: int = Field(8, ge=1, description="triples shown per community (links to the current "
                                       "community first)")
    prune_tokens: int = Field(24, ge=1, description="max tokens of a pruning reply")
    decide: dc.Decide = Field("generate", description=dc.DECIDE_HELP + "; the initial multiple-choice and each "
                              "chain's single-choice community pruning (\"None of the above\" scored too) are "
                              "scored, and with answer: rank the reasoning check (Yes / No scored)")
    answer: dc.FinalAnswer = Field("generate", description=dc.ANSWER_HELP + ": the entities of the chains' last "
                                   "communities, the chains' triples as the facts")
    stop: Literal["check", "rank", "path"] = Field(
        "check", description="with decide: score and answer: rank, when the search stops: check = when the scored "
        "sufficiency check prefers Yes to No (else after D_max rounds); rank = rank's call in the initial phase and "
        "every round over the entities of the chains' last communities, the search runs D_max rounds (or until the "
        "chains are exhausted) and answers with the depth whose best name scores highest; path (needs demos) = "
        "no reasoning call: a chain stops when none of its candidate communities can beat the most likely whole "
        "relation path reached, and rank answers over that path's ends")
    path_margin: float = Field(2.3, ge=0.0, description=dc.PATH_MARGIN_HELP + " (the initial phase's head "
                               "communities)")

    @field_validator("detector")
    @classmethod
    def _known_detector(cls, v: str) -> str:
        from kgrag.reasoning.community import DETECTORS

        DETECTORS.get(v)  # raises listing the valid names
        return v

    @model_validator(mode="after")
    def _detector_params_valid(self) -> "FastToGParams":
        self.detector_model()  # an unknown or ill-typed key is an error naming it
        return self

    def detector_model(self) -> BaseModel:
        """The chosen detector's validated params."""
        from kgrag.reasoning.community import DETECTORS

        return DETECTORS.get(self.detector).params.model_validate(self.detector_params)

    @model_validator(mode="after")
    def _seq2seq_needs_a_path(self) -> "FastToGParams":
        if self.text == "graph2text" and self.graph2text == "seq2seq" and not self.seq2seq_path:
            raise ValueError("graph2text: seq2seq needs seq2seq_path (a local model folder)")
        return self


def community2text(p: FastToGParams) -> Community2Text:
    """The converter the params select."""
    if p.text == "triple2text":
        return Triple2Text()
    if p.graph2text == "llm":
        return LLMGraph2Text(p.text_tokens)
    return Seq2SeqGraph2Text(str(p.seq2seq_path), p.text_tokens, p.seq2seq_max_input_tokens)


def call_bound(width: int, d_max: int) -> int:
    """The paper's worst case of LLM calls: 2·W·D_max + D_max + 2 (section "Reasoning")."""
    return 2 * width * d_max + d_max + 2


def implementation_bound(width: int, d_max: int, llm_text: bool) -> int:
    """This implementation's worst case: the paper's (``call_bound``) — which holds with Triple2Text, fallback
    included (W·D_max + D_max + 3 calls at most) — plus, with graph2text by the LLM (the paper's G2T is a local
    T5, not an LLM call), the W graph2text calls of the head communities and the fallback."""
    return call_bound(width, d_max) + (width + 1 if llm_text else 0)


# ------------------------------------------------------------------------------------------ LCS

@dataclass(frozen=True)
class Candidate:
    """A candidate community: its new nodes, the triples that textualize it (links to the current
    community and internal edges), its modularity Q(c)."""

    nodes: frozenset[int]
    edges: tuple[int, ...]
    modularity: float


def fair_subsample(kg: KGView, edges: np.ndarray, frontier: Sequence[int], take: np.ndarray, room: int,
                   rng: np.random.Generator) -> np.ndarray:
    """``room`` of the new nodes ``take`` (sorted), chosen round-robin over the ``frontier`` nodes that reached
    them through ``edges``: each frontier node's new neighbours in a seeded random order, one per frontier node
    in turn (sorted), each node once. A uniform draw over the union would fill the cap with a hub's neighbours
    (a genre's thousands of films) and drop the few neighbours of the other nodes (a film's director)."""
    if room <= 0:
        return np.zeros(0, dtype=np.int64)
    wanted = set(take.tolist())
    h, t = kg.heads[edges].tolist(), kg.tails[edges].tolist()
    fr = set(frontier)
    by: dict[int, list[int]] = {}
    for a, b in zip(h + t, t + h):
        if a in fr and b in wanted:
            by.setdefault(a, []).append(b)
    queues = [list(dict.fromkeys(rng.permutation(np.asarray(by[a])).tolist())) for a in sorted(by)]
    out: list[int] = []
    chosen: set[int] = set()
    depth = 0
    while len(out) < room and any(depth < len(q) for q in queues):
        for q in queues:
            if depth < len(q) and q[depth] not in chosen and len(out) < room:
                chosen.add(q[depth])
                out.append(q[depth])
        depth += 1
    return np.sort(np.asarray(out, dtype=np.int64))


def local_subgraph(kg: KGView, community: frozenset[int], *, r_max: int, rho: float, rng: np.random.Generator,
                   max_nodes: int, max_edges: int, graph_id: str | None) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """(nodes, triple indices, nodes kept per hop) of the subgraph within ``r_max`` hops of ``community``.

    A node first reached at hop n is kept with probability rho^(n-1) (hop 1 always); only kept nodes are
    expanded. Past ``max_nodes`` a hop's kept nodes are subsampled (seeded), round-robin over the frontier nodes
    that reached them (``fair_subsample``: a hub does not crowd out the other nodes' neighbours). The edges are
    those walked
    between kept nodes.

    References
    ----------
    Liang et al., FastToG (2024), "Community Detection on Subgraph": Pr(x = 1) = rho^(n-1).
    """
    seen = set(community)
    kept = set(community)
    per_hop = [len(kept)]
    frontier = sorted(community)
    walked: list[np.ndarray] = []
    for n in range(1, r_max + 1):
        if not frontier:
            break
        e = incident_edges(kg, frontier, graph_id, max_edges, rng=rng, fair=True)
        walked.append(e)
        ends = arrays.unique(np.concatenate([kg.heads[e], kg.tails[e]])) if len(e) else np.zeros(0, dtype=np.int64)
        new = np.asarray([x for x in ends.tolist() if x not in seen], dtype=np.int64)
        seen.update(new.tolist())
        draw = rng.random(len(new))
        take = new[draw < rho ** (n - 1)]
        room = max_nodes - len(kept)
        if len(take) > room:
            take = fair_subsample(kg, e, frontier, take, max(room, 0), rng)
        kept.update(take.tolist())
        per_hop.append(int(len(take)))
        frontier = take.tolist()
    nodes = np.asarray(sorted(kept), dtype=np.int64)
    edges = arrays.unique(np.concatenate(walked)) if walked else np.zeros(0, dtype=np.int64)
    ok = np.isin(kg.heads[edges], nodes) & np.isin(kg.tails[edges], nodes)
    return nodes, edges[ok], per_hop


def lcs_candidates(kg: KGView, current: frozenset[int], visited: set[int], history: set[frozenset[int]],
                   p: FastToGParams, rng: np.random.Generator, graph_id: str | None,
                   known: dict[int, tuple] | None = None) -> tuple[list[Candidate], dict[str, Any]]:
    """Algorithm 2 up to the fine pruning: subgraph, community detection, coarse pruning.

    Each detected community loses the nodes the chain has already visited; what remains is a candidate
    when it is non-empty, one hop from the current community (the paper excludes candidates farther away)
    and not in the history H. The N of highest modularity are kept; with ``known`` (``demos``: the current
    community's relation paths) the N are path-diverse (``path_diverse``).
    """
    nodes, edges, per_hop = local_subgraph(kg, current, r_max=p.r_max, rho=p.rho, rng=rng, max_nodes=p.max_nodes,
                                           max_edges=p.max_edges, graph_id=graph_id)
    n = len(nodes)
    src = np.searchsorted(nodes, kg.heads[edges]).astype(np.int64)
    dst = np.searchsorted(nodes, kg.tails[edges]).astype(np.int64)
    pairs = np.stack([src, dst], axis=1) if len(edges) else np.zeros((0, 2), dtype=np.int64)
    comms = detect(n=n, edges=pairs, method=p.detector, max_size=p.max_size, seed=p.seed,
                   params=p.detector_model())
    pos = {int(g): i for i, g in enumerate(nodes.tolist())}
    cur = np.zeros(n, dtype=bool)
    cur[[pos[g] for g in current if g in pos]] = True
    vis = np.zeros(n, dtype=bool)
    vis[[pos[g] for g in visited if g in pos]] = True
    rests = []
    for c in comms:
        rest = c[~vis[c]]
        if not len(rest):
            continue
        inr = np.zeros(n, dtype=bool)
        inr[rest] = True
        if np.any((inr[src] & cur[dst]) | (inr[dst] & cur[src])):
            rests.append(rest)
    hist = {frozenset(pos[g] for g in h) for h in history if all(g in pos for g in h)}
    kept = coarse_prune(n=n, edges=pairs, communities=rests, history=hist,
                        keep=p.candidates if known is None else len(rests), exclude=np.nonzero(vis)[0].tolist())
    out = []
    for c, q in kept:
        inc = np.zeros(n, dtype=bool)
        inc[c] = True
        link = (inc[src] & cur[dst]) | (inc[dst] & cur[src])
        internal = inc[src] & inc[dst]
        chosen = np.concatenate([np.nonzero(link)[0], np.nonzero(internal & ~link)[0]])[: p.max_community_triples]
        out.append(Candidate(frozenset(int(x) for x in nodes[c]), tuple(int(x) for x in edges[chosen]), float(q)))
    info = {"subgraph_nodes": int(n), "subgraph_edges": int(len(edges)), "kept_per_hop": per_hop,
            "communities": len(comms), "adjacent_new": len(rests)}
    if known is not None:
        out, info["path_signatures"] = path_diverse(kg, out, known, p.candidates)
    info.update(coarse_kept=len(out), sampled=sorted(int(x) for x in nodes.tolist()))
    return out, info


def path_diverse(kg: KGView, cands: Sequence[Candidate], known: dict[int, tuple], n: int
                 ) -> tuple[list[Candidate], int]:
    """``demos``' coarse pruning: ``n`` of the candidates (in modularity order), taken round-robin over their
    relation-path signatures (the set of the paths of their nodes linked to the current community,
    ``community_paths`` with ``layers=1``: the steps they take): the best of each signature first, then the
    second of each, ... Modularity alone filled the N slots with a hub's
    neighbours (a genre's films, all one path) and left out the one community with another relation (the film's
    director). Returns (the kept candidates in modularity order, the number of signatures)."""
    groups: dict[frozenset, list[int]] = {}
    for i, c in enumerate(cands):
        sig = frozenset(x for ps in community_paths(kg, c, known, layers=1).values() for x in ps)
        groups.setdefault(sig, []).append(i)
    order = list(groups.values())  # by each signature's best modularity
    keep: list[int] = []
    rank = 0
    while len(keep) < n and any(rank < len(g) for g in order):
        keep += [g[rank] for g in order if rank < len(g)][: n - len(keep)]
        rank += 1
    return [cands[i] for i in sorted(keep)], len(groups)


def _triples(kg: KGView, edges: Sequence[int]) -> list[Triple]:
    e = np.asarray(list(edges), dtype=np.int64)
    return kg.named_triples(kg.heads[e], kg.relations[e], kg.tails[e]) if len(e) else []


def community_paths(kg: KGView, cand: Candidate, known: dict[int, tuple], cap: int = 4,
                    layers: int | None = None) -> dict[int, list[tuple]]:
    """The relation paths from the topic entities to each node of a candidate community, over the triples that
    textualize it (``demos``; kgrag's adaptation): a triple from a node whose path is known (the current
    community's nodes, ``known``) adds one step, ``(relation, walked head -> tail)``; the triples inside the
    community extend the paths found, breadth first: a node's paths are those of its shortest walks (no walk
    goes back). At most ``cap`` paths per node, in the triples' order (links to the current community first). A
    node no triple reaches has none. ``layers``: only the paths of nodes that many steps from the current
    community (1: the linked nodes)."""
    e = np.asarray(list(cand.edges), dtype=np.int64)
    rows = list(zip(kg.heads[e].tolist(), kg.relations[e].tolist(), kg.tails[e].tolist())) if len(e) else []
    out: dict[int, list[tuple]] = {}
    frontier = {n: [p] for n, p in known.items()}
    reached = set(known)
    layer = 0
    while frontier and (layers is None or layer < layers):
        layer += 1
        nxt: dict[int, list[tuple]] = {}
        for h, r, t in rows:
            for a, b, fwd in ((h, t, True), (t, h, False)):
                if b not in cand.nodes or a not in frontier or b in reached:
                    continue
                got = out.setdefault(b, [])
                for path in frontier[a]:
                    longer = path + ((rel_name(kg, r), fwd),)
                    if longer not in got and len(got) < cap:
                        got.append(longer)
                        nxt.setdefault(b, []).append(longer)
        reached.update(nxt)
        frontier = nxt
    return out


def best_paths(book: dc.PathBook, per_node: dict[int, list[tuple]]) -> dict[int, tuple[float, tuple]]:
    """Each node's most likely path (``book.score``, ties by the path's text): ``{node: (score, path)}``;
    nodes none of whose paths is scored are left out."""
    out = {}
    for n, ps in per_node.items():
        sc = [(book.score[x], x) for x in ps if x in book.score]
        if sc:
            out[n] = min(sc, key=lambda t: (-t[0], dc.path_text(t[1])))
    return out


def order_by_paths(scores: Sequence[float | None], whole: Sequence[float | None], k: int) -> list[int]:
    """The ``k`` best candidate communities (positions): by ``scores`` (a community's likeliest node path);
    equal scores by ``whole`` (its likeliest whole path, log P(path '.')); then by position (the pre-rank).
    None sorts last."""
    low = -1e18
    return sorted(range(len(scores)), key=lambda i: (-(low if scores[i] is None else scores[i]),
                                                     -(low if whole[i] is None else whole[i]), i))[: max(k, 0)]


@dataclass
class Chain:
    """A reasoning chain: communities (global node ids, head first), the triples that textualize each,
    and their text segments (``converted`` communities turned into text so far)."""

    communities: list[frozenset[int]] = field(default_factory=list)
    edges: list[tuple[int, ...]] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    converted: int = 0
    active: bool = True
    paths: dict[int, tuple] = field(default_factory=dict)  # demos: node -> the relation path it is reached by


    def visited(self, start: frozenset[int]) -> set[int]:
        return set(start).union(*self.communities)

    def last_paths(self) -> dict[int, tuple]:
        """demos: the relation paths of the last community's nodes (those that have one): what LCS grows from."""
        return {x: self.paths[x] for x in self.communities[-1] if x in self.paths}


@REASONERS.register("fasttog", params=FastToGParams, version="6")
def fasttog(*, inp: ReasonInput, params: FastToGParams) -> ReasonGen:
    """FastToG: W community chains grown by Local Community Search (modularity coarse pruning, LLM fine
    pruning), Community2Text, a reasoning call per round, IO / CoT fallback after D_max rounds.

    LLM calls: 1 multiple-choice pruning and 1 reasoning (initial phase; ≤ W graph2text calls before it with
    ``graph2text: llm``); per round ≤ W single-choice prunings, ≤ W graph2text calls (``graph2text: llm`` only;
    one per chain covering its communities not yet in text) and 1 reasoning; 1 fallback: at most
    2·W·D_max + D_max + 2, the paper's worst case, with Triple2Text (``implementation_bound`` with graph2text
    by the LLM). The count is checked before returning (an ``AssertionError`` if ever exceeded) and logged in
    ``trace.call_bound``. Pruning calls use ``prune_temperature``, reasoning calls ``reason_temperature``.

    Fallbacks (each recorded in the trace):

    * no KG or no topic entity in the KG: straight to the fallback (``stop: no_topic_entity``), depth 0;
    * no candidate community around c0, or the LLM says none of them fits: the fallback answers
      (``stop: no_candidates`` / ``pruned_all``);
    * the initial reasoning over the head communities answers: depth 0 (``stop: answered``);
    * a chain with no candidate left, or whose single-choice reply picks "none": it stops growing; when no
      chain grew and the chains were already reasoned over, the rounds end (``stop: exhausted``);
    * a pruning reply without a valid letter: counted in ``unparseable``; the top-k candidates by
      modularity are taken instead (k = W initially, 1 per chain afterwards);
    * a reasoning reply neither ``Answer: ...`` nor Unknown: counted in ``unparseable``, treated as Unknown;
    * an empty graph2text output: counted in ``unparseable``, replaced by Triple2Text;
    * no answer after D_max rounds: the fallback answers (``stop: max_depth``).

    ``decide: score`` is kgrag's adaptation for small models, not the paper's setting
    (``kgrag.reasoning.reasoners.decide``): a pruning call asks the same question without option letters and scores each
    candidate community's Triple2Text as the reply by the LLM's log-likelihood (``score_normalize``); nothing
    is parsed. The initial multiple-choice pruning keeps the W best communities; a chain's single-choice
    pruning scores "None of the above" too and keeps the best candidate, or stops the chain when "None of the
    above" scores best. A failed scoring call keeps the pre-rank (the top W, or the top 1, by modularity) and is
    not counted in ``unparseable``. With ``answer: rank`` as well, each reasoning call is the sufficiency check
    scored ("Yes" against "No" over the chains' triples); with ``answer: generate`` the reasoning reply is
    generated and parsed as in the paper.

    ``answer: rank`` (kgrag's adaptation): the answer is ``rank``'s selection over the entities of the chains'
    last communities (the entities reached), with the chains' triples as the facts, once the reasoning call
    answers (or the scored check says Yes), after D_max rounds, or when the chains are exhausted, in place of
    the generated answer or the IO / CoT fallback (before any chain exists the fallback still answers).
    Scored calls replace generated ones one for one and rank's call replaces the fallback, so the call bound
    holds unchanged. Every score is in the trace (``scores`` of each pruning and check, ``rank_top``).

    ``demos: k`` (with ``decide: score``; kgrag's adaptation, ``decide.PathBook``): the community pruning is shown
    the relation paths of the ``k`` labelled questions nearest to the question (the ``relplan`` stage's plan, as
    ToG's ``demos``). Every node of a candidate community gets the relation paths from the topic entities to it
    over the community's triples (``community_paths``: a link from the current community adds a step to the
    linking node's path, internal triples extend it, shortest walks only), each path is scored whole, ending
    ('.') and going on (' ->'), after the demonstrations, and a community scores as its likeliest node path:
    one call per pruning whatever the paths' prefixes (``PathBook.score_paths``), so the call bound holds
    (communities of the same score, sharing their likeliest node path, are ordered by their likeliest whole
    path, then by modularity). Coarse pruning keeps N candidates round-robin over their path signatures
    (``path_diverse``) instead of the N of highest modularity. The initial phase keeps the W best within
    ``path_margin`` of the best; a chain keeps its best candidate. Each chosen node keeps its likeliest path. ``stop: path`` (needs ``answer: rank``): no reasoning call; a chain
    stops when its best candidate scores below the likeliest whole path reached (log P(path '.'), every chain):
    no path through the candidate can score above it. When no chain grows, or after D_max rounds, ``rank``
    answers over the entities at the end of the likeliest whole path (``answer_path``), with the chains'
    triples as facts. Traces: each pruning's ``scores`` (communities), ``paths`` (each one's likeliest node
    path), each depth's ``reasoning: {path, score}``, ``demos``.

    ``stop: rank`` (with ``decide: score`` and ``answer: rank`` only; kgrag's adaptation: with SmolLM2-135M the
    scored check preferred "No" on every dev question, so the search always ran D_max rounds): in the initial phase
    and every round rank's call over the entities of the chains' last communities replaces the check call one
    for one (each depth's ``reasoning: {"rank_top": ...}``); the search runs D_max rounds or until the chains
    are exhausted, and the depth whose best name scores highest answers (the earlier one on a tie;
    ``answer_depth`` in the trace and ``depth`` of the result), with no further call. When no depth's rank
    call gave scores (failed calls), rank's call at the end answers as with ``stop: check``. The call bound
    holds unchanged.

    References
    ----------
    Liang et al., Fast Think-on-Graph: Wider, Deeper and Faster Reasoning of Large Language Model on Knowledge
    Graph (2024), Algorithms 1 and 2, equations 4-6, Appendix C. ``answer: rank``: Luo et al., Graph-constrained
    Reasoning (GCR, 2024), answers constrained to KG entities ranked by the LLM's likelihood.
    """
    topics = valid_topics(inp)
    run = _FastToGRun(inp, params, topics)
    if not topics:
        return (yield from no_topic_entity(run, "start"))
    run.start(topics)
    done = yield from run.initial_phase()
    if done is not None:
        return done
    for it in range(params.d_max):
        rd: FastToGRound = {"depth": it + 1, "pruning": []}
        run.trace["depths"].append(rd)
        grew = yield from run.prune_round(rd, it)
        rd["chains"] = [[run.names(c) for c in ch.communities] for ch in run.chains]
        if run.path_stop:
            run.path_state(rd)
            if not grew:  # every chain ended (or ran out of candidates): the paths reached so far answer
                return (yield from run.conclude("answered" if run.reach else "exhausted", it))
            continue
        answered, ans, stale = yield from run.text_and_reason(rd, it + 1)
        if stale:  # nothing new since the last reasoning call
            return (yield from run.conclude("exhausted", it))
        if answered:
            return (yield from run.conclude("answered", it + 1, ans))
    return (yield from run.conclude("max_depth", params.d_max))


Gen = Generator[list[LLMRequest], list[CallRecord], Any]


class _FastToGRun:
    """One question's FastToG search (:func:`fasttog`): its state (the chains, the history H of communities, the
    trace, the purpose of every LLM request, the replies not parsed, with demos the relation paths reached) and
    its phases, each a generator of LLM request batches as the reasoner protocol wants."""

    def __init__(self, inp: ReasonInput, params: FastToGParams, topics: list[int]) -> None:
        self.inp, self.params = inp, params
        # the three policies: deciding, answering, demonstrations (demos: every relation path's scores)
        self.pol: Policies = policies_of(params, inp, inp.kg.names(np.asarray(sorted(topics))) if topics else None)
        self.book = self.pol.demos
        self.s, self.kg, self.q = inp.sampling, inp.kg, inp.question
        self.question = clean_question(self.q.text)
        W, D = params.width, params.d_max
        self.bound = implementation_bound(W, D, params.text == "graph2text" and params.graph2text == "llm")
        self.calls: list[str] = []  # the purpose of every LLM request, in order
        self.trace: FastToGTrace = {
            "reasoner": "fasttog", "width": W, "d_max": D, "detector": params.detector,
            "text": params.text if params.text == "triple2text" else f"graph2text-{params.graph2text}",
            "depths": [], "llm_requests": self.calls}
        self.rank_stop = self.pol.scored_check and params.stop == "rank"  # rank at every depth, not the check
        self.pol.stamp(self.trace)
        self.unparseable = 0
        self.qkey = zlib.crc32(self.q.question_id.encode())
        self.chains: list[Chain] = []
        self.best_depth: list = []  # stop: rank: (best score, depth, rank's answer) of the best depth so far
        self.reach: dict[tuple, list[int]] = {}  # demos: the nodes at each relation path's end (all chains)
        self.path_stop = params.stop == "path"
        self.last_context: str | None = None

    def rng(self, phase: int, chain: int) -> np.random.Generator:
        return np.random.default_rng([self.params.seed, self.qkey, phase, chain])

    def checked(self, res: Reasoning) -> Reasoning:
        """``res``, once the call bound is checked (:meth:`check`)."""
        self.check()
        return res

    def check(self) -> None:
        """The call bound in the trace (``call_bound``); an ``AssertionError`` where the calls made exceed it."""
        calls, bound = self.calls, self.bound
        self.trace["call_bound"] = {"calls": len(calls), "bound": bound, "holds": len(calls) <= bound}
        if len(calls) > bound:
            raise AssertionError(f"fasttog made {len(calls)} LLM requests > its worst case {bound}")

    def finish(self, stop: str, depth: int) -> Gen:
        """The fallback (IO / CoT) answers."""
        params = self.params
        fb = yield from self.pol.answer.fallback(params.fallback)
        self.calls.append("fallback")
        self.unparseable += fb.unparseable
        self.trace.update(stop=stop, depth_reached=depth, fallback_reply=fb.reply)
        self.check()
        return Reasoning(answer=fb.answer, depth=depth, fallback=params.fallback, trace=self.trace,
                         unparseable=self.unparseable)

    def chain_facts(self) -> list[str]:
        """The chains' triples as ``(head, relation, tail)``, chain by chain, each once."""
        facts: list[str] = []
        for ch in self.chains:
            for e in ch.edges:
                facts.extend(t for t in (_fmt(_triple(self.kg, x)) for x in e) if t not in facts)
        return facts

    def ranked_last(self, need_score: bool = False) -> Gen:
        """rank's call over the entities of the chains' last communities (the entities reached), the chains'
        triples as the facts (``policies.Ranked``); one entity and no score needed (not ``stop: rank``): no call
        (``dc.rank_call``)."""
        ids: dict[str, int] = {}
        for ch in self.chains:
            last = sorted(ch.communities[-1])
            for n, e in zip(self.kg.names(np.asarray(last)), last):
                ids.setdefault(str(n), int(e))
        got = yield from self.pol.answer.rank(facts=self.chain_facts(), ids=ids, trace=self.trace,
                                              need_score=need_score)
        self.calls.extend(["rank"] * got.calls)
        return got

    def conclude(self, stop: str, depth: int, ans: str | None = None) -> Gen:
        """The search's answer: with answer: rank, rank's selection over the entities of the chains' last
        communities (stop: rank: the best-scored depth's, no further call); otherwise the generated ``ans``, or
        the fallback when there is none. The entities rank chose are the answers as they are
        (``Reasoning.answers``), not parsed back from their joined text."""
        params, kg, trace, book, reach = self.params, self.kg, self.trace, self.book, self.reach
        if book.active and params.stop == "path" and reach:
            path, _ = book.best(reach)
            if path is not None:  # the ends of the most likely whole relation path
                ids = {str(n): int(e) for n, e in zip(kg.names(np.asarray(reach[path])), reach[path])}
                trace["answer_path"] = dc.path_text(path)
                got = yield from self.pol.answer.rank(facts=self.chain_facts(), ids=ids, trace=trace)
                self.calls.extend(["rank"] * got.calls)
                return self.checked(ranked(got, depth=depth, trace=trace, unparseable=self.unparseable, stop=stop,
                                           depth_reached=depth))
        if self.best_depth:
            d_best, got = self.best_depth[1:]
            return self.checked(ranked(got, depth=d_best, trace=trace, unparseable=self.unparseable,
                                       answer_depth=d_best, stop=stop, depth_reached=depth))
        if self.pol.answer.ranks and self.chains:
            got = yield from self.ranked_last()
            return self.checked(ranked(got, depth=depth, trace=trace, unparseable=self.unparseable, stop=stop,
                                       depth_reached=depth))
        if ans is not None:
            trace.update(stop=stop, depth_reached=depth)
            self.check()
            return Reasoning(answer=ans, depth=depth, trace=trace, unparseable=self.unparseable)
        return (yield from self.finish(stop, depth))

    def start(self, topics: list[int]) -> None:
        """The start community c0 (the topic entities), the history H, the text converter and, with demos, the
        demonstrations and their relation paths' scores."""
        kg, params = self.kg, self.params
        self.c0 = frozenset(topics)
        self.start_text = ", ".join(kg.names(np.asarray(sorted(self.c0))))
        self.trace["start"] = self.start_text
        self.history: set[frozenset[int]] = {self.c0}
        self.converter = community2text(params)
        self.book.stamp(self.trace)

    def rate(self, groups: list[tuple[list[Candidate], dict[int, tuple]]]) -> Gen:
        """demos: every candidate community of each group (one group per pruning: the candidates and the paths
        of the community they grow from) rated by its nodes' relation paths, one call per group, one batch:
        (calls made, per group (each candidate's score, each candidate's ``{node: (score, path)}``)). A
        community scores as its likeliest node path, None when none is scored (a failed call)."""
        book = self.book
        per = [[community_paths(self.kg, c, known) for c in cs] for cs, known in groups]
        n = yield from book.score_paths([[x for d in g for ps in d.values() for x in ps] for g in per])
        out = []
        for g in per:
            rated = [best_paths(book, d) for d in g]
            out.append(([max((v[0] for v in r.values()), default=None) for r in rated], rated))
        return n, out

    def ranked(self, sc: list, rated: list, k: int) -> list[int]:
        """The ``k`` best candidates: by score; candidates sharing their best node path (the same score) by their
        likeliest whole path (log P(path '.') of a node's path: the one that already holds an answer first);
        then the pre-rank (modularity)."""
        ends = self.book.ends
        return order_by_paths(sc, [max((ends[v[1]][0] for v in r.values() if v[1] in ends), default=None)
                                   for r in rated], k)

    def path_info(self, cands: list[Candidate], sc: list, rated: list) -> dict[str, Any]:
        """The trace of a path-rated pruning: each community's score and its likeliest node path."""
        return {"scores": dc.scored_options([triple2text(_triples(self.kg, c.edges)) for c in cands], sc),
                "paths": [dc.path_text(max(r.values(), key=lambda v: (v[0], -len(v[1])))[1]) if r else None
                          for r in rated]}

    def extend(self, ch: Chain, c: Candidate, rated: dict[int, tuple[float, tuple]] | None = None) -> None:
        """The chain grows by ``c`` (added to the history H); with demos (``rated``) its nodes take their
        likeliest paths and each path's ends gain them."""
        ch.communities.append(c.nodes)
        ch.edges.append(c.edges)
        self.history.add(c.nodes)
        for n in sorted(rated or {}):
            ch.paths[n] = rated[n][1]
            ends = self.reach.setdefault(rated[n][1], [])
            if n not in ends:
                ends.append(n)

    def best_reached(self) -> tuple[tuple | None, float | None]:
        return self.book.best(self.reach)

    def names(self, c: frozenset[int]) -> list[str]:
        return self.kg.names(np.asarray(sorted(c)))

    def initial_pruning(self) -> Gen:
        """The W head communities around c0 by one multiple-choice pruning (by their paths with demos), each the
        start of a chain; returns the stop (``no_candidates``, ``pruned_all``) where no chain starts, else None."""
        params, kg, q, s, book, c0, W = self.params, self.kg, self.q, self.s, self.book, self.c0, self.params.width
        cands, info = lcs_candidates(kg, c0, set(c0), self.history, params, self.rng(0, 0), q.graph_id,
                                     known={t: () for t in c0} if book.active else None)
        opts = [triple2text(_triples(kg, c.edges)) for c in cands]
        init: CommunityChoice = {"lcs": info, "options": opts, "modularity": [c.modularity for c in cands]}
        self.init = init
        self.trace["initial"] = init
        if not cands:
            return "no_candidates"
        head_rated: list = []
        if book.active:  # demos: the W communities of the likeliest paths, within path_margin of the best
            n, ((sc, head_rated),) = yield from self.rate([(cands, {t: () for t in c0})])
            self.calls.extend(["prune_multi"] * n)
            ok = [x for x in sc if x is not None]
            chosen = [i for i in self.ranked(sc, head_rated, W)
                      if sc[i] is not None and sc[i] >= max(ok) - params.path_margin] if ok \
                else list(range(min(W, len(cands))))
            init.update(reply="", parsed=True, chosen=chosen, **self.path_info(cands, sc, head_rated))
        else:  # the paper's prompt lists "none of them" (a letter of its own); scoring does not offer it
            decider = self.pol.decide
            (rec,) = yield [decider.request(
                opts, ask=lambda: SCORE_MULTI.format(question=self.question, premise=self.start_text),
                paper=lambda: prune_request(PRUNE_PROMPT.format(
                    question=self.question, premise=self.start_text, options=option_lines(opts + [NONE_OPTION]),
                    instruction=PRUNE_MULTI.format(k=W, example=example_letters(W, len(opts)),
                                                   none=letters(len(opts) + 1)[-1])),
                    s, params.prune_tokens, PRUNE_SYSTEM, params.prune_temperature))]
            self.calls.append("prune_multi")
            got = decider.choose(rec, len(cands), W, none=not decider.scored)
            self.unparseable += int(not got.parsed)
            chosen = got.positions
            init.update(reply=got.reply, parsed=got.parsed, chosen=chosen, **self.scores_of(decider, opts, got))
        if not chosen:
            return "pruned_all"
        for i in chosen:
            self.chains.append(Chain())
            self.extend(self.chains[-1], cands[i], head_rated[i] if head_rated else None)
        return None

    def initial_phase(self) -> Gen:
        """The W head communities (:meth:`initial_pruning`), then the reasoning over them (the paper's "1 round of
        pruning and reasoning in the initial phase"): the Reasoning where the search ends here (depth 0), else
        None."""
        stop = yield from self.initial_pruning()
        if stop is not None:
            return (yield from self.finish(stop, 0))
        self.init["chains"] = [[self.names(c) for c in ch.communities] for ch in self.chains]
        if self.path_stop:
            self.path_state(self.init)
            return None
        answered, ans, _ = yield from self.text_and_reason(self.init, 0)
        return (yield from self.conclude("answered", 0, ans)) if answered else None

    def text_and_reason(self, rd: FastToGRound | CommunityChoice, depth: int) -> Gen:
        """Community2Text of every community not yet in text (one segment per chain), then one reasoning call
        over all chains; (answered, the generated answer or None, stale) — stale: the context is the last one
        reasoned over (no call). With the scored check, answered: "Yes" scored above "No". With stop: rank,
        rank's call over the chains' last communities instead (never answered; the best-scored depth is
        kept in ``best_depth``)."""
        params, kg, s, chains, question = self.params, self.kg, self.s, self.chains, self.question
        todo = [ci for ci, ch in enumerate(chains) if ch.converted < len(ch.communities)]
        segs = [[t for e in chains[ci].edges[chains[ci].converted:] for t in _triples(kg, e)] for ci in todo]
        reqs = self.converter.requests(segs, s)
        replies: list[str] = []
        if reqs:
            recs = yield reqs
            self.calls.extend(["graph2text"] * len(reqs))
            replies = [text_of(r) for r in recs]
        texts, bad = self.converter.texts(segs, replies)
        self.unparseable += bad
        for ci, t in zip(todo, texts):
            chains[ci].texts.append(t)
            chains[ci].converted = len(chains[ci].communities)
        context = "\n".join(f"Chain {i + 1}: " + " -> ".join(ch.texts) for i, ch in enumerate(chains))
        rd["context"] = context
        if context == self.last_context:
            return False, None, True
        self.last_context = context
        if self.rank_stop:
            got = yield from self.ranked_last(need_score=True)
            rd["reasoning"] = {"rank_top": got.top}
            if got.top and (not self.best_depth or got.top[0][1] > self.best_depth[0]):
                self.best_depth[:] = [got.top[0][1], depth, got]
            return False, None, False
        if self.pol.scored_check:
            (rec,) = yield [dc.enough_request("\n".join(self.chain_facts()), question, s)]
            self.calls.append("reason")
            yes, sc = dc.enough(rec)
            rd["reasoning"] = {"enough": yes, "scores": dc.scored_options(dc.ENOUGH_OPTIONS, sc)}
            return yes, None, False
        demo = (("user", separated(REASON_DEMO[0], s.separator)), ("assistant", REASON_DEMO[1])) if s.few_shot else ()
        user = separated(REASON_PROMPT, s.separator).format(start=self.start_text, chains=context, question=question)
        (rec,) = yield [LLMRequest(messages=(("system", separated(REASON_SYSTEM, s.separator)), *demo,
                                             ("user", user)),
                                   temperature=params.reason_temperature, top_p=s.top_p, max_tokens=s.max_tokens,
                                   seed=s.seed)]
        self.calls.append("reason")
        ans, ok = parse_reasoning(text_of(rec))
        self.unparseable += int(not ok)
        rd["reasoning"] = {"reply": text_of(rec), "parsed": ok, "answer": ans}
        return ans is not None, ans, False

    @staticmethod
    def scores_of(decider, options: list[str], got) -> dict[str, Any]:
        """A community pruning's ``scores`` trace field when it was scored (none when generated)."""
        return {"scores": dc.scored_options(options, got.scores)} if decider.scored else {}

    def path_state(self, rd: FastToGRound | CommunityChoice) -> None:
        """stop: path: the most likely whole path reached so far, in place of the reasoning call (no call)."""
        best, bs = self.best_reached()
        rd["reasoning"] = {"path": None if best is None else dc.path_text(best), "score": bs}

    def prune_round(self, rd: FastToGRound, it: int) -> Gen:
        """A round's pruning: LCS around each active chain's last community, one single-choice decision per chain
        (by their paths with demos, in one batch); a chain with no candidate, or whose choice is none, stops.
        Returns whether a chain grew (read by ``stop: path``)."""
        params, kg, q, book, chains = self.params, self.kg, self.q, self.book, self.chains
        asks: list[tuple[int, list[Candidate]]] = []
        for ci, ch in enumerate(chains):
            if not ch.active:
                continue
            cs, info = lcs_candidates(kg, ch.communities[-1], ch.visited(self.c0), self.history, params,
                                      self.rng(it + 1, ci), q.graph_id,
                                      known=ch.last_paths() if book.active else None)
            entry: CommunityChoice = {"chain": ci, "lcs": info,
                                      "options": [triple2text(_triples(kg, c.edges)) for c in cs],
                                      "modularity": [c.modularity for c in cs]}
            rd["pruning"].append(entry)
            if not cs:
                ch.active = False
                entry["stopped"] = "no_candidates"
                continue
            asks.append((ci, cs))
        if not asks:
            return False
        by_chain = {e["chain"]: e for e in rd["pruning"]}
        if book.active:  # demos: each chain's candidates rated by their nodes' paths
            return (yield from self.choose_by_paths(asks, by_chain))
        return (yield from self.choose_one(asks, by_chain))

    def choose_by_paths(self, asks: list[tuple[int, list[Candidate]]], by_chain: dict[int, CommunityChoice]) -> Gen:
        """demos: each asking chain's candidates rated by their nodes' paths (one call per chain, one batch); a
        chain grows by its best, or (``stop: path``) stops when no path through any candidate can beat the
        likeliest whole path reached. Returns whether a chain grew."""
        chains, grew = self.chains, False
        n, rated_groups = yield from self.rate([(cs, chains[ci].last_paths()) for ci, cs in asks])
        self.calls.extend(["prune"] * n)
        _, bs = self.best_reached()
        for (ci, cs), (sc, rated) in zip(asks, rated_groups):
            ok = any(x is not None for x in sc)
            got = self.ranked(sc, rated, 1) if ok else [0]
            by_chain[ci].update(reply="", parsed=True, chosen=got, **self.path_info(cs, sc, rated))
            if self.path_stop and ok and bs is not None and sc[got[0]] < bs:
                # no path through any candidate can score above the likeliest whole path reached
                chains[ci].active = False
                by_chain[ci]["stopped"] = "path_ends"
                continue
            self.extend(chains[ci], cs[got[0]], rated[got[0]])
            grew = True
        return grew

    def choose_one(self, asks: list[tuple[int, list[Candidate]]], by_chain: dict[int, CommunityChoice]) -> Gen:
        """Each asking chain's single-choice pruning by the Decider (one request per chain, one batch; "None of
        the above" listed or scored last); a chain whose choice is none stops. Returns False (only ``stop:
        path``, which needs demos, reads it)."""
        params, kg, s, chains = self.params, self.kg, self.s, self.chains
        decider, reqs = self.pol.decide, []
        for ci, cs in asks:
            premise = "; ".join([self.start_text] + [triple2text(_triples(kg, e)) for e in chains[ci].edges])
            opts = [triple2text(_triples(kg, c.edges)) for c in cs] + [NONE_OPTION]
            reqs.append(decider.request(opts, ask=lambda: SCORE_SINGLE.format(question=self.question,
                                                                               premise=premise),
                                        paper=lambda: prune_request(PRUNE_PROMPT.format(
                                            question=self.question, premise=premise, options=option_lines(opts),
                                            instruction=PRUNE_SINGLE.format(none=letters(len(opts))[-1])),
                                            s, params.prune_tokens, PRUNE_SYSTEM, params.prune_temperature)))
        recs = yield reqs
        self.calls.extend(["prune"] * len(reqs))
        for (ci, cs), r in zip(asks, recs):
            # "None of the above" is the last option: chosen first (by letter or best score), no candidate
            choice = decider.choose(r, len(cs), 1, none=True)
            self.unparseable += int(not choice.parsed)
            got = choice.positions
            by_chain[ci].update(reply=choice.reply, parsed=choice.parsed, chosen=got,
                                **self.scores_of(decider, by_chain[ci]["options"] + [NONE_OPTION], choice))
            if not got:
                chains[ci].active = False
                by_chain[ci]["stopped"] = "llm_none"
                continue
            self.extend(chains[ci], cs[got[0]])
        return False
