"""ToG and FastToG reasoners: control flow with a scripted LLM on the tiny movie KG, FastToG's call bound,
seeded neighbour sampling, Community2Text (LLM and a local seq2seq model), then each reasoner end to end
with the embedded SmolLM2 on real MetaQA 2-hop questions over the real KB."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from kgrag.kg.duckdb_io import write_duckdb
from kgrag.llm.calls import LLMClient, LLMReply
from kgrag.reasoning.reasoners import REASONERS, ReasonInput, Sampling, rows_of, run_batched
from kgrag.reasoning.reasoners.fasttog import (
    FastToGParams, LLMGraph2Text, Seq2SeqGraph2Text, call_bound, implementation_bound, linearize, local_subgraph,
    triple2text,
)
from kgrag.reasoning.reasoners.tog import ToGParams, parse_reasoning
from kgrag.reporting.report import render, render_trace
from kgrag.kg.store import KGStore
from kgrag.types import Question
from tests.conftest import MOVIES, ROOT, metaqa_sample_store, tiny_tables

QUESTION = "who directed the movies starred by [Al Pacino]"
MODEL = "all-MiniLM-L6-v2"


class Scripted:
    """Replies with ``reply(kind, user_message)``; records every prompt with its kind."""

    model_id = "scripted"

    def __init__(self, reply):
        self.reply, self.seen = reply, []

    def generate(self, requests):
        out = []
        for r in requests:
            user = r.messages[-1][1]
            k = kind(r)
            self.seen.append((k, user))
            out.append(LLMReply(text=self.reply(k, user), tokens_in=5, tokens_out=2))
        return out


def kind(req) -> str:
    """Which step of which reasoner a request is."""
    user, system = req.messages[-1][1], req.messages[0][1]
    if "Relations of the current entities" in user:
        return "relation"
    if "Candidate facts" in user:
        return "entity"
    if "Knowledge graph paths" in user:
        return "tog_reason"
    if "Selection:" in user:
        return "prune_multi" if "up to" in user else "prune"
    if "Rewrite these facts" in user:
        return "g2t"
    if user.startswith("Context:"):
        return "fast_reason"
    return "cot" if "step by step" in system else "io"


def letter_of(user: str, needle: str) -> str:
    """``{X}`` of the first option line containing ``needle`` ("" when none does)."""
    for m in re.finditer(r"^\{([A-Z])\} (.*)$", user, re.M):
        if needle in m.group(2):
            return "{" + m.group(1) + "}"
    return ""


def none_letter(user: str) -> str:
    return letter_of(user, "None of the above")


def random_kg(tmp_path: Path, n: int, m: int, seed: int) -> KGStore:
    rng = np.random.default_rng(seed)
    edges = sorted({(f"n{a}", f"r{(a + b) % 3}", f"n{b}") for a, b in rng.integers(0, n, size=(m, 2)) if a != b})
    path = tmp_path / f"rand{seed}.duckdb"
    write_duckdb(path, tiny_tables(edges))
    return KGStore(path)


def q_of(kg, text=QUESTION, topics=("Al Pacino",), qid="q0") -> Question:
    return Question(qid, text, kg.ids_of(list(topics)))


def run(name, kg, reply, question=None, index=None, sampling=Sampling(), **params):
    b = Scripted(reply)
    entry = REASONERS.get(name)
    job = entry.impl(inp=ReasonInput(question=question or q_of(kg), context="", kg=kg, index=index, sampling=sampling),
                     params=entry.params(**params))
    (res, calls), = run_batched(jobs=[job], client=LLMClient(b, cache=None))
    json.dumps(res.trace, default=str)  # the trace is serializable (it goes into the generations table)
    return res, calls, b


# ---------------------------------------------------------------------------------------------- ToG

def tog_script(k: str, user: str) -> str:
    """Follows starred_actors → Heat → directed_by → Michael Mann; answers once Michael Mann is in the paths."""
    if k == "relation":
        return letter_of(user, "directed_by") or letter_of(user, "starred_actors")
    if k == "entity":
        return letter_of(user, "Michael Mann") or letter_of(user, "(Heat,")
    if k == "tog_reason":
        return "Answer: Michael Mann" if "Michael Mann" in user else "Answer: Unknown"
    return "Answer: fallback"


def test_tog_follows_the_llm_choices(kg):
    res, calls, b = run("tog", kg, tog_script, width=1, depth=3)
    assert res.answer == "Michael Mann" and res.depth == 2 and res.fallback is None and res.unparseable == 0
    assert [k for k, _ in b.seen] == ["relation", "entity", "tog_reason"] * 2 and len(calls) == 6
    d1, d2 = res.trace["depths"]
    assert d1["relations"]["chosen"] == ["(?, starred_actors, Al Pacino)"]
    assert d1["entities"]["chosen"] == ["(Heat, starred_actors, Al Pacino)"]
    assert d2["relations"]["chosen"] == ["(Heat, directed_by, ?)"]
    assert d2["chains"] == [["(Heat, starred_actors, Al Pacino)", "(Heat, directed_by, Michael Mann)"]]
    assert res.trace["stop"] == "answered" and res.trace["depth_reached"] == 2 and res.trace["llm_requests"] == 6
    # the reasoning prompt of depth 2 shows the whole path
    assert "(Heat, starred_actors, Al Pacino)\n(Heat, directed_by, Michael Mann)" in b.seen[-1][1]


def test_tog_width_keeps_w_chains(kg):
    res, _, _ = run("tog", kg, lambda k, u: "{A} {B} {C}" if k in ("relation", "entity") else "Answer: Unknown",
                    width=2, depth=1, fallback="io")
    (d1,) = res.trace["depths"]
    assert len(d1["chains"]) == 2 and {c[0] for c in d1["chains"]} == {
        "(Heat, starred_actors, Al Pacino)", "(The Irishman, starred_actors, Al Pacino)"}


@pytest.mark.parametrize("fallback", ["io", "cot"])
def test_tog_falls_back_when_the_llm_never_answers(kg, fallback):
    def reply(k, u):
        if k in ("relation", "entity"):
            return "{A}"
        return "Answer: Unknown" if k == "tog_reason" else "Step one.\nAnswer: Michael Mann"

    res, calls, b = run("tog", kg, reply, width=3, depth=2, fallback=fallback)
    assert res.fallback == fallback and b.seen[-1][0] == fallback
    assert res.answer == ("Step one.\nAnswer: Michael Mann" if fallback == "io" else "Michael Mann")
    assert res.depth == 2 and res.trace["stop"] == "max_depth" and len(calls) == 3 * 2 + 1


def test_tog_dead_end_falls_back_with_the_depth_reached(kg):
    q = Question("q", "what is [Island B] tagged with", kg.ids_of(["Island B"]))
    res, calls, _ = run("tog", kg, lambda k, u: "{A}" if k in ("relation", "entity") else "Answer: Unknown",
                        question=q, width=2, depth=3)
    # Island B -> Island A, then nothing new: the search stops after depth 1
    assert res.trace["stop"] == "dead_end" and res.depth == 1 and res.fallback == "cot" and len(calls) == 4


def test_tog_unparseable_replies_are_counted_and_handled(kg):
    res, calls, _ = run("tog", kg, lambda k, u: "I am not sure what you mean." if k != "cot" else "no marker",
                        width=1, depth=2)
    # per depth: relation + entity (pre-rank taken) + reasoning (treated as Unknown); then CoT without Answer:
    assert res.unparseable == 3 * 2 + 1 and res.fallback == "cot" and res.answer == "no marker"
    d1 = res.trace["depths"][0]
    assert d1["relations"]["parsed"] is False and d1["relations"]["chosen"] == ["(?, starred_actors, Al Pacino)"]
    assert res.depth == 2 and len(calls) == 7


@pytest.mark.parametrize("topics", [(), (10_000,), None])
def test_tog_without_topic_entity_goes_to_the_fallback(kg, topics):
    q = Question("q", "who directed [Nothing]", topics or ())
    b = Scripted(lambda k, u: "Answer: X" if k == "cot" else "{A}")
    entry = REASONERS.get("tog")
    job = entry.impl(inp=ReasonInput(question=q, context="", kg=None if topics is None else kg),
                     params=entry.params())
    (res, calls), = run_batched(jobs=[job], client=LLMClient(b, cache=None))
    assert res.answer == "X" and res.depth == 0 and res.fallback == "cot" and len(calls) == 1
    assert res.trace["stop"] == "no_topic_entity"


@pytest.mark.parametrize("prune", ["bm25", "st"])
def test_tog_scorer_pruning_makes_no_pruning_call(kg, index, prune):
    q = q_of(kg, "which person directed [Heat]", ("Heat",))
    res, calls, b = run("tog", kg, lambda k, u: "Answer: D" if "directed_by" in u else "Answer: Unknown",
                        question=q, index=index, prune=prune, width=1, depth=3)
    assert {k for k, _ in b.seen} == {"tog_reason"} and res.trace["scorer"] == prune
    # "directed" ranks directed_by first among Heat's relations (BM25: shared word; ST: closest meaning)
    assert res.trace["depths"][0]["relations"]["chosen"] == ["(Heat, directed_by, ?)"]
    assert res.trace["depths"][0]["chains"] == [["(Heat, directed_by, Michael Mann)"]]
    assert res.answer == "D" and res.depth == 1 and len(calls) == 1


def test_tog_st_without_index_uses_bm25(kg):
    res, _, _ = run("tog", kg, lambda k, u: "Answer: Unknown", prune="st", width=1, depth=1)
    assert res.trace["scorer"] == "bm25"


# ---------------------------------------------------------------------------------------------- FastToG

def fast_script(k: str, user: str) -> str:
    """Heads: the community with Michael Mann; then always the first candidate; answers once the context
    holds 'directed by Michael Mann'."""
    if k == "prune_multi":
        return letter_of(user, "Michael Mann") or "{A}"
    if k == "prune":
        return "{A}"
    if k == "fast_reason":
        return "Answer: Michael Mann" if "directed by Michael Mann" in user else "Answer: Unknown"
    return "Answer: fallback"


def test_fasttog_follows_the_llm_choices(kg):
    res, calls, b = run("fasttog", kg, fast_script, width=1, d_max=3)
    init = res.trace["initial"]
    assert "Michael Mann" in init["options"][init["chosen"][0]]
    # the head community already says who directed: the initial phase's reasoning answers (depth 0)
    assert res.answer == "Michael Mann" and res.depth == 0 and res.fallback is None
    assert res.trace["llm_requests"] == ["prune_multi", "reason"] and len(calls) == 2
    assert [k for k, _ in b.seen] == ["prune_multi", "fast_reason"] and res.trace["depths"] == []
    assert res.trace["call_bound"] == {"calls": 2, "bound": call_bound(1, 3), "holds": True}
    ctx = b.seen[-1][1]
    assert ctx.startswith("Context:\nS: Al Pacino\nChain 1: ") and "directed by Michael Mann" in ctx
    # a chain never revisits its nodes, and every chosen community joins the history
    nodes = [n for c in init["chains"][0] for n in c]
    assert len(nodes) == len(set(nodes)) and "Al Pacino" not in nodes


@pytest.mark.parametrize("fallback", ["io", "cot"])
def test_fasttog_falls_back_when_the_llm_never_answers(kg, fallback):
    res, calls, b = run("fasttog", kg, lambda k, u: "{A} {B}" if "prune" in k else (
        "Answer: Unknown" if k == "fast_reason" else "Answer: Robert De Niro"), width=2, d_max=2, fallback=fallback)
    assert res.fallback == fallback and res.trace["stop"] in ("max_depth", "exhausted")
    assert res.answer == ("Answer: Robert De Niro" if fallback == "io" else "Robert De Niro")
    assert res.trace["llm_requests"][0] == "prune_multi" and res.trace["llm_requests"][-1] == "fallback"
    assert len(calls) == len(res.trace["llm_requests"]) <= call_bound(2, 2) and res.depth >= 0
    assert res.trace["llm_requests"][:2] == ["prune_multi", "reason"]  # the initial phase reasons once


def test_fasttog_chain_stops_when_the_llm_says_none(kg):
    def reply(k, u):
        if k == "prune_multi":
            return "{A}"
        if k == "prune":
            return none_letter(u)
        return "Answer: Unknown"

    res, calls, _ = run("fasttog", kg, reply, width=1, d_max=3)
    p = res.trace["depths"][0]["pruning"][0]
    assert p["stopped"] == "llm_none" and p["chosen"] == []
    # the initial phase reasons over the head; round 1 adds nothing new: no second reasoning call
    assert res.trace["stop"] == "exhausted" and res.depth == 0
    assert res.trace["llm_requests"] == ["prune_multi", "reason", "prune", "fallback"]


def test_fasttog_none_in_the_initial_phase_falls_back(kg):
    res, calls, _ = run("fasttog", kg, lambda k, u: none_letter(u) if k == "prune_multi" else "Answer: X")
    assert res.trace["stop"] == "pruned_all" and res.depth == 0 and len(calls) == 2 and res.answer == "X"


def test_fasttog_unparseable_replies_are_counted_and_handled(kg):
    res, calls, _ = run("fasttog", kg, lambda k, u: "hmm" if k != "cot" else "Answer: X", width=2, d_max=2)
    init = res.trace["initial"]
    # the initial pruning took the top-W by modularity, each round's single choice the top one
    assert init["parsed"] is False and init["chosen"] == [0, 1]
    prunes = [p for d in res.trace["depths"] for p in d["pruning"] if "parsed" in p]
    reasons = [d for d in [init, *res.trace["depths"]] if "reasoning" in d]
    assert all(p["parsed"] is False and p["chosen"] == [0] for p in prunes) and init["reasoning"]["parsed"] is False
    assert res.unparseable == 1 + len(prunes) + len(reasons) and res.answer == "X"


@pytest.mark.parametrize("topics", [(), (10_000,), None])
def test_fasttog_without_topic_entity_goes_to_the_fallback(kg, topics):
    q = Question("q", "who directed [Nothing]", topics or ())
    b = Scripted(lambda k, u: "Answer: X")
    entry = REASONERS.get("fasttog")
    job = entry.impl(inp=ReasonInput(question=q, context="", kg=None if topics is None else kg),
                     params=entry.params())
    (res, calls), = run_batched(jobs=[job], client=LLMClient(b, cache=None))
    assert res.answer == "X" and res.depth == 0 and len(calls) == 1 and res.trace["stop"] == "no_topic_entity"
    assert res.trace["call_bound"]["holds"]


@pytest.fixture(scope="module")
def dense(tmp_path_factory) -> KGStore:
    return random_kg(tmp_path_factory.mktemp("dense"), 120, 480, 3)


@pytest.mark.parametrize("width", [1, 2, 3])
@pytest.mark.parametrize("d_max", [1, 2, 3])
def test_fasttog_call_bound_holds(dense, width, d_max):
    """Adversarial LLM: picks every option it can, never answers; graph2text by the LLM (the costliest)."""
    q = Question("q", "what is related to [n0]", dense.ids_of(["n0"]))
    res, calls, b = run("fasttog", dense, lambda k, u: "{A} {B} {C}" if "prune" in k else "Answer: Unknown",
                        question=q, width=width, d_max=d_max, text="graph2text", graph2text="llm", rho=1.0)
    # graph2text by the LLM: the paper's bound plus the head communities' W texts and the fallback
    bound = implementation_bound(width, d_max, True)
    assert bound == call_bound(width, d_max) + width + 1
    assert len(calls) <= bound and res.trace["call_bound"] == {"calls": len(calls), "bound": bound, "holds": True}
    assert res.trace["llm_requests"].count("prune") <= width * d_max
    assert res.trace["llm_requests"].count("graph2text") <= width * (d_max + 1)
    assert res.trace["llm_requests"].count("reason") == d_max + 1
    # on this graph every chain keeps growing: the worst case is reached exactly
    assert len(calls) == bound and res.depth == d_max


def test_fasttog_bound_is_counted_in_the_generations_row(kg):
    res, calls, _ = run("fasttog", kg, fast_script, width=2, d_max=2)
    (row,) = rows_of(question_ids=["q0"], results=[(res, calls)], reasoner="fasttog", separator="|", seed=0,
                     per_q_ms=1.0)
    assert row["requests"] == len(calls) <= call_bound(2, 2) and row["depth"] == res.depth


def test_trace_lists_every_call_with_its_reply_and_the_report_renders_it(kg):
    res, calls, _ = run("fasttog", kg, fast_script, width=2, d_max=2)
    (row,) = rows_of(question_ids=["q0"], results=[(res, calls)], reasoner="fasttog", separator="|", seed=0,
                     per_q_ms=1.0)
    trace = json.loads(row["trace"])
    assert [c["reply"] for c in trace["calls"]] == [c.reply.text for c in calls]
    md = render_trace({**row, "question": "q?", "gold": ["g"], "prediction": res.answer})
    lines = [ln for ln in md if ln.startswith("| ") and ln.split("|")[1].strip().isdigit()]
    assert len(lines) == len(calls)  # one table row per LLM call
    assert any(ln.startswith("| depths |") for ln in md) and any(ln.startswith("| call_bound |") for ln in md)
    rendered = render(metrics={"setup": {}}, rows=[{**row, "question": "q?", "gold": ["g"], "qtype": "t",
                      "hit_at_1": 0, "hit_any": 0, "f1": 0, "retrieval_recall": None}], figure="f.png",
                      examples=0, validation=None, traces=1)
    assert "## Reasoner traces" in rendered and "| call_bound |" in rendered
    assert "## Reasoner traces" not in render(metrics={"setup": {}}, rows=[], figure="f.png", examples=0,
                                              validation=None, traces=1)


def test_fasttog_raises_when_the_bound_is_exceeded(kg, monkeypatch):
    import kgrag.reasoning.reasoners.fasttog as ft

    monkeypatch.setattr(ft, "call_bound", lambda width, d_max: 1)
    with pytest.raises(AssertionError, match="LLM requests"):
        run("fasttog", kg, fast_script, width=1, d_max=1)


@pytest.mark.parametrize("detector", ["louvain", "girvan_newman", "hierarchical", "spectral", "random"])
def test_fasttog_runs_with_every_detector_within_max_size(dense, detector):
    q = Question("q", "what is related to [n0]", dense.ids_of(["n0"]))
    res, calls, _ = run("fasttog", dense, lambda k, u: "{A} {B}" if "prune" in k else "Answer: Unknown", question=q,
                        width=2, d_max=2, detector=detector, max_size=3)
    assert res.trace["detector"] == detector and res.trace["call_bound"]["holds"]
    assert all(len(c) <= 3 for d in res.trace["depths"] for ch in d["chains"] for c in ch)


def test_neighbour_sampling_decays_with_hops_and_is_seeded(dense):
    start = frozenset(dense.ids_of(["n0"]))
    kw = dict(r_max=2, max_nodes=10_000, max_edges=10_000, graph_id=None)
    full, _, hops_full = local_subgraph(dense, start, rho=1.0, rng=np.random.default_rng(0), **kw)
    one, _, hops_one = local_subgraph(dense, start, rho=1e-12, rng=np.random.default_rng(0), **kw)
    # hop 1 is always kept (rho^0 = 1); with rho ~ 0 nothing at hop 2 survives
    assert hops_one[1] == hops_full[1] and hops_one[2] == 0 and hops_full[2] > 20
    half = [local_subgraph(dense, start, rho=0.5, rng=np.random.default_rng(s), **kw) for s in range(6)]
    assert all(0 < h[2][2] < hops_full[2] for h in half)
    assert len({tuple(h[0].tolist()) for h in half}) > 1
    again = local_subgraph(dense, start, rho=0.5, rng=np.random.default_rng(0), **kw)
    assert np.array_equal(again[0], half[0][0]) and np.array_equal(again[1], half[0][1])


def test_fasttog_is_deterministic_under_a_seed(dense):
    q = Question("q7", "what is related to [n0]", dense.ids_of(["n0"]))
    script = lambda k, u: "{B}" if "prune" in k else "Answer: Unknown"  # noqa: E731

    def sampled(seed):
        res, _, b = run("fasttog", dense, script, question=q, width=2, d_max=2, seed=seed)
        return json.dumps(res.trace["initial"]["lcs"]) + json.dumps(res.trace["depths"]), [u for _, u in b.seen]

    a, b = sampled(0), sampled(0)
    assert a == b
    assert len({sampled(s)[0] for s in (1, 2, 3)} | {a[0]}) > 1


# ---------------------------------------------------------------------------------------------- Community2Text

def test_triple2text_and_llm_graph2text(kg):
    tr = [("Heat", "directed_by", "Michael Mann"), ("Heat", "release_year", "1995")]
    assert triple2text(tr) == "Heat directed by Michael Mann, Heat release year 1995"
    g = LLMGraph2Text(32)
    reqs = g.requests([tr, tr[:1]], Sampling())
    assert len(reqs) == 2 and "Heat directed by Michael Mann" in reqs[0].messages[-1][1]
    texts, bad = g.texts([tr, tr[:1]], ["Heat, from 1995, was directed by Michael Mann.", "  "])
    assert texts == ["Heat, from 1995, was directed by Michael Mann.", "Heat directed by Michael Mann"] and bad == 1


def test_fasttog_graph2text_llm_puts_the_sentences_in_the_reasoning_prompt(kg):
    def reply(k, u):
        if k == "g2t":
            return "SENTENCE about " + u.split("Facts (head relation tail): ")[1].split(",")[0]
        return fast_script(k, u) if k != "fast_reason" else "Answer: Unknown"

    res, calls, b = run("fasttog", kg, reply, width=1, d_max=2, text="graph2text", graph2text="llm")
    kinds = [k for k, _ in b.seen]
    assert kinds[:6] == ["prune_multi", "g2t", "fast_reason", "prune", "g2t", "fast_reason"]
    assert kinds.count("g2t") <= 3
    reason = [u for k, u in b.seen if k == "fast_reason"][0]
    assert "Chain 1: SENTENCE about" in reason and res.trace["text"] == "graph2text-llm"
    assert len(calls) <= implementation_bound(1, 2, True)


@pytest.fixture(scope="module")
def tiny_t5(tmp_path_factory) -> Path:
    """A tiny randomly initialised T5 (T5Config, no downloaded weights) with a word-level tokenizer built on
    the movie KG's words, saved as a local folder: it exercises the seq2seq path, its text is noise."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import AutoModelForSeq2SeqLM, PreTrainedTokenizerFast, T5Config

    words = sorted({w for t in MOVIES for x in t for w in re.findall(r"\w+|[^\w\s]", x.replace("_", " "))}
                   | {"translate", "Graph", "to", "Text", ":", "<", ">", "H", "R", "T", "directed", "by"})
    vocab = {"<pad>": 0, "</s>": 1, "<unk>": 2, **{w: i + 3 for i, w in enumerate(words)}}
    tk = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="<pad>", eos_token="</s>", unk_token="<unk>")
    torch.manual_seed(0)
    cfg = T5Config(vocab_size=len(vocab), d_model=16, d_ff=32, d_kv=8, num_layers=1, num_decoder_layers=1,
                   num_heads=2, pad_token_id=0, eos_token_id=1, decoder_start_token_id=0)
    model = AutoModelForSeq2SeqLM.from_config(cfg)
    path = tmp_path_factory.mktemp("t5") / "tiny-t5"
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def test_seq2seq_graph2text_runs_a_local_model_folder(tiny_t5):
    g = Seq2SeqGraph2Text(str(tiny_t5), max_tokens=8)
    tr = [("Heat", "directed_by", "Michael Mann")]
    assert g.requests([tr], Sampling()) == [] and linearize(tr).startswith("translate Graph to Text: <H> Heat")
    communities = [tr, tr + [("Heat", "starred_actors", "Al Pacino")]]
    texts, bad = g.texts(communities, [])
    assert len(texts) == 2 and all(isinstance(t, str) and t for t in texts)
    # an empty output is counted unusable and replaced by Triple2Text: `bad` counts exactly those texts
    assert bad == sum(t == triple2text(c) for t, c in zip(texts, communities))
    assert g.texts([tr], [])[0] == texts[:1]  # greedy decoding: deterministic


def test_fasttog_graph2text_seq2seq_makes_no_text_call(kg, tiny_t5):
    res, calls, b = run("fasttog", kg, fast_script, width=1, d_max=2, text="graph2text", graph2text="seq2seq",
                        seq2seq_path=str(tiny_t5))
    assert "g2t" not in [k for k, _ in b.seen] and res.trace["text"] == "graph2text-seq2seq"
    assert res.trace["initial"]["context"].startswith("Chain 1: ") and len(calls) <= call_bound(1, 2)


# ---------------------------------------------------------------------------------------------- params

def test_params_validate_and_the_sections_in_params_yaml_are_the_defaults():
    with pytest.raises(Exception):
        ToGParams(widht=3)
    with pytest.raises(Exception):
        FastToGParams(detector="leiden")
    with pytest.raises(Exception, match="seq2seq_path"):
        FastToGParams(text="graph2text", graph2text="seq2seq")
    with pytest.raises(Exception, match="resolutoin"):
        FastToGParams(detector_params={"resolutoin": 2.0})  # the detector's own model validates its params
    assert FastToGParams(detector_params={"resolution": 2.0}).detector_model().resolution == 2.0
    for name, model in (("tog", ToGParams), ("fasttog", FastToGParams)):
        for f, info in model.model_fields.items():
            assert info.description, f"{name}.{f} undocumented"
    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    for name, model in (("tog", ToGParams), ("fasttog", FastToGParams)):
        assert model.model_validate(raw["reason"][name]) == model()  # the values in params.yaml are the defaults


def test_parse_reasoning():
    assert parse_reasoning("Answer: A | B") == ("A | B", True)
    assert parse_reasoning("Answer: Unknown") == (None, True) and parse_reasoning("Unknown.") == (None, True)
    assert parse_reasoning("") == (None, True) and parse_reasoning("Heat is a film") == (None, False)


# ---------------------------------------------------------------------------------------------- real LLM, real KB

@pytest.fixture(scope="module")
def metaqa(tmp_path_factory):
    return metaqa_sample_store(tmp_path_factory.mktemp("metaqa"))


@pytest.fixture(scope="module")
def llm():
    from kgrag.llm.backends.llamacpp import LlamaCppBackend, LlamaCppParams

    return LLMClient(LlamaCppBackend(LlamaCppParams(n_ctx=2048)), cache=None)


def _real(name, metaqa, llm, **params):
    kg, questions = metaqa
    entry = REASONERS.get(name)
    p = entry.params(**params)
    jobs = [entry.impl(inp=ReasonInput(question=q, context="", kg=kg, sampling=Sampling(max_tokens=24)), params=p)
            for q in questions]
    t0 = time.perf_counter()
    results = run_batched(jobs=jobs, client=llm)
    rows = rows_of(question_ids=[q.question_id for q in questions], results=results, reasoner=name, separator="|",
                   seed=0, per_q_ms=0.0)
    print(f"\n{name}: {time.perf_counter() - t0:.1f}s for {len(questions)} questions")
    for q, (res, calls), row in zip(questions, results, rows):
        print(f"  {q.text!r} -> {res.answer!r} depth={res.depth} requests={len(calls)} fallback={res.fallback} "
              f"unparseable={res.unparseable} stop={res.trace.get('stop')}")
        assert not any(c.failed for c in calls), [c.reply.error for c in calls]  # every prompt fits n_ctx
        assert isinstance(res.answer, str) and res.answer.strip()
        assert row["depth"] == res.depth and row["requests"] == len(calls) >= 1
        assert res.trace["depth_reached"] == res.depth and 0 <= res.depth
        # the report shows the trace with every real call's reply
        md = "\n".join(render_trace({**row, "question": q.text, "gold": list(q.answers)}))
        assert md.count("\n| ") >= len(calls) and all(_cell(c.reply.text) in md for c in calls)
    return questions, results


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")[:40]


@pytest.mark.slow
def test_tog_end_to_end_on_real_metaqa(metaqa, llm):
    questions, results = _real("tog", metaqa, llm, width=2, depth=2, max_relations=6, max_entities=6, prune_tokens=8)
    for res, calls in results:
        assert res.depth <= 2 and len(calls) == res.trace["llm_requests"] <= 3 * 2 + 1
        assert res.trace["topic"]  # the topic entity was found in the real KB


@pytest.mark.slow
def test_fasttog_end_to_end_on_real_metaqa(metaqa, llm):
    questions, results = _real("fasttog", metaqa, llm, width=2, d_max=2, candidates=3, max_nodes=150,
                               max_community_triples=4, prune_tokens=8)
    for res, calls in results:
        assert res.depth <= 2 and len(calls) <= call_bound(2, 2)
        assert res.trace["call_bound"] == {"calls": len(calls), "bound": call_bound(2, 2), "holds": True}
        assert res.trace["initial"]["lcs"]["subgraph_nodes"] > 1
