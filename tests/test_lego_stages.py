"""LEGO stages: contract tests of every extractor, filter, refiner and scorer; local PPR against igraph."""

from __future__ import annotations

import json

import igraph
import numpy as np
import pytest

from kgrag.retrieval.lego import EXTRACTORS, FILTERS, REFINERS, SCORERS
from kgrag.retrieval.lego.extract_ppr import local_ppr
from kgrag.retrieval.lego.filter_shortest import shortest_path_dag
from kgrag.retrieval.lego.presets import PRESETS
from kgrag.retrieval.lego.types import Context, Extracted, LocalGraph, Path, path_text
from kgrag.llm.calls import LLMClient, LLMReply
from kgrag.params import RetrieveParams
from kgrag.llm import clients as llm_clients
from kgrag.retrieval.run import retrieve_one
from kgrag.kg.store import KGStore, write_duckdb
from kgrag.types import Question
from tests.conftest import tiny_tables

MODEL = "all-MiniLM-L6-v2"
QUESTION = "who directed the movies starred by Al Pacino"


class Scripted:
    """LLM backend replying with a function of the prompt."""

    model_id = "scripted"

    def __init__(self, reply):
        self.reply = reply
        self.calls = 0

    def generate(self, requests):
        self.calls += len(requests)
        return [LLMReply(text=self.reply(r.messages[-1][1])) for r in requests]


def first_paths_reply(prompt: str) -> str:
    """Select the last two listed paths (lines with arrows)."""
    lines = [ln for ln in prompt.splitlines() if "->" in ln or "<-" in ln]
    return "\n".join(reversed(lines[-2:]))


def scores_reply(prompt: str) -> str:
    """Rate item i as 1/i."""
    items = [ln for ln in prompt.splitlines() if ln[:1].isdigit()]
    return "\n".join(f"{i + 1}: {1 / (i + 1):.3f}" for i in range(len(items)))


def whole(kg) -> LocalGraph:
    nb = kg.neighbourhood(np.arange(kg.num_entities), 1, 10**9)
    return LocalGraph.build(kg=kg, nodes=nb.nodes, edges=nb.edges)


def ctx_for(kg, index, llm=None) -> Context:
    return Context(question=QUESTION, query_vec=index.encode([QUESTION])[0], kg=kg, index=index,
                   topic_names=("Al Pacino",), llm=llm)


def seed_of(kg, graph, name):
    return graph.local(kg.find_entities(f"[{name}]"))


def snapshot(graph: LocalGraph) -> dict:
    return {k: v.copy() for k, v in vars(graph).items() if isinstance(v, np.ndarray)}


def same(a: dict, graph: LocalGraph) -> bool:
    return all(np.array_equal(a[k], getattr(graph, k)) for k in a)


# ---------------------------------------------------------------- extractors

@pytest.mark.parametrize("name", EXTRACTORS.names())
def test_extractor_contract(name, kg, index):
    g = whole(kg)
    ctx = ctx_for(kg, index)
    entry = EXTRACTORS.get(name)
    params = entry.params()
    seeds = seed_of(kg, g, "Al Pacino")
    before = snapshot(g)
    a = entry.impl(graph=g, seeds=seeds, hops=2, params=params, ctx=ctx)
    b = entry.impl(graph=g, seeds=seeds, hops=2, params=params, ctx=ctx)
    assert same(before, g) and np.array_equal(seeds, seed_of(kg, g, "Al Pacino"))  # inputs untouched
    assert isinstance(a, Extracted)
    assert np.array_equal(a.nodes, b.nodes) and np.array_equal(a.edges, b.edges) and np.allclose(a.scores, b.scores)
    assert a.nodes.dtype == np.int64 and len(set(a.nodes.tolist())) == len(a.nodes) == len(a.scores)
    assert a.nodes[0] == seeds[0]
    inside = set(a.nodes.tolist())
    assert all(g.src[e] in inside and g.dst[e] in inside for e in a.edges.tolist())
    assert len(a.edges) > 0 and "Island A" not in kg.names(g.nodes[a.nodes])
    # no seeds (topic absent) → nothing
    empty = entry.impl(graph=g, seeds=np.zeros(0, dtype=np.int64), hops=2, params=params, ctx=ctx)
    assert len(empty.nodes) == 0 and len(empty.edges) == 0
    # a topic in a two-node component: nothing else leaks in
    island = entry.impl(graph=g, seeds=seed_of(kg, g, "Island A"), hops=2, params=params, ctx=ctx)
    assert set(kg.names(g.nodes[island.nodes])) <= {"Island A", "Island B"}
    # an empty neighbourhood (the topic alone, no edges)
    lone = LocalGraph.build(kg=kg, nodes=g.nodes[seeds], edges=np.zeros(0, dtype=np.int64))
    got = entry.impl(graph=lone, seeds=np.array([0]), hops=2, params=params, ctx=ctx)
    assert got.nodes.tolist() == [0] and len(got.edges) == 0


def test_rwr_seed_changes_the_walks_not_the_contract(kg, index):
    g = whole(kg)
    entry = EXTRACTORS.get("rwr")
    seeds = seed_of(kg, g, "Al Pacino")
    runs = [entry.impl(graph=g, seeds=seeds, hops=3, params=entry.params(path_num=8, seed=s), ctx=ctx_for(kg, index))
            for s in range(6)]
    assert len({tuple(r.nodes.tolist()) for r in runs}) > 1


def test_ego_radius(kg, index):
    g = whole(kg)
    entry = EXTRACTORS.get("ego")
    seeds = seed_of(kg, g, "Al Pacino")
    one = entry.impl(graph=g, seeds=seeds, hops=2, params=entry.params(hops=1), ctx=ctx_for(kg, index))
    assert set(kg.names(g.nodes[one.nodes])) == {"Al Pacino", "Heat", "The Irishman"}


# ---------------------------------------------------------------- PPR vs igraph

def random_kg(tmp_path, n, m, seed, isolated=False):
    rng = np.random.default_rng(seed)
    edges = [(f"n{a}", "r", f"n{b}") for a, b in rng.integers(0, n, size=(m, 2)) if a != b]
    edges += [(f"n{a}", "r", f"n{a + 1}") for a in range(n - 1) if rng.random() < 0.3]  # some multi-edges
    if isolated:
        edges.append(("lonely", "r", "lonely2"))
    path = tmp_path / f"g{seed}.duckdb"
    write_duckdb(path, tiny_tables(edges))
    return KGStore(path)


def igraph_of(kg) -> igraph.Graph:
    return igraph.Graph(n=kg.num_entities, edges=list(zip(kg.heads.tolist(), kg.tails.tolist())), directed=False)


@pytest.mark.parametrize("seed", range(5))
def test_local_ppr_equals_igraph_on_the_whole_component(seed, tmp_path):
    kg = random_kg(tmp_path, 40, 70, seed)
    ig = igraph_of(kg)
    seeds = [0] if seed % 2 else [0, 5]
    ref = np.array(ig.personalized_pagerank(reset_vertices=seeds, damping=0.8, directed=False))
    nb = kg.neighbourhood(seeds, 50, 10**9)  # the whole component
    g = LocalGraph.build(kg=kg, nodes=nb.nodes, edges=nb.edges)
    got = local_ppr(graph=g, seeds=g.local(seeds), damping=0.8, tol=1e-12, max_iter=1000)
    full = np.zeros(kg.num_entities)
    full[g.nodes] = got
    assert np.allclose(full, ref, atol=1e-8)


@pytest.mark.parametrize("hops", [1, 2])
def test_local_ppr_on_a_neighbourhood_is_a_lower_bound_with_the_same_leaders(hops, tmp_path):
    kg = random_kg(tmp_path, 200, 400, 7)
    ref = np.array(igraph_of(kg).personalized_pagerank(reset_vertices=[3], damping=0.8, directed=False))
    nb = kg.neighbourhood([3], hops, 10**9)
    g = LocalGraph.build(kg=kg, nodes=nb.nodes, edges=nb.edges)
    got = local_ppr(graph=g, seeds=g.local([3]), damping=0.8, tol=1e-12, max_iter=1000)
    assert np.all(got <= ref[g.nodes] + 1e-12)
    top = np.argsort(-ref[g.nodes])[:5]
    assert set(np.argsort(-got)[:3].tolist()) <= set(top.tolist())


def test_local_ppr_isolated_topic_keeps_all_mass():
    z = np.zeros(0, dtype=np.int64)
    lone = LocalGraph(np.array([0, 1]), z, z, z, z, np.array([0, 0]))
    got = local_ppr(graph=lone, seeds=np.array([0]), damping=0.8, tol=1e-12, max_iter=100)
    ref = igraph.Graph(n=2).personalized_pagerank(reset_vertices=[0], damping=0.8)
    assert np.allclose(got, ref) and np.allclose(got, [1.0, 0.0])


# ---------------------------------------------------------------- filters

def check_paths(paths, g, extracted, seeds):
    allowed = set(extracted.edges.tolist())
    for p in paths:
        assert isinstance(p, Path) and len(p.edges) == len(p.nodes) - 1 >= 1
        assert p.nodes[0] in set(seeds.tolist()) and len(set(p.nodes)) == len(p.nodes)
        for i, e in enumerate(p.edges):
            assert e in allowed and {g.src[e], g.dst[e]} == {p.nodes[i], p.nodes[i + 1]}


def filter_params(name):
    entry = FILTERS.get(name)
    return entry.params(scorer={"name": "bm25"}) if name == "beam" else entry.params()


@pytest.mark.parametrize("name", FILTERS.names())
def test_filter_contract(name, kg, index):
    g = whole(kg)
    ctx = ctx_for(kg, index)
    seeds = seed_of(kg, g, "Al Pacino")
    ex = EXTRACTORS.get("ego").impl(graph=g, seeds=seeds, hops=2, params=EXTRACTORS.get("ego").params(), ctx=ctx)
    entry = FILTERS.get(name)
    params = filter_params(name)
    before = snapshot(g)
    a = entry.impl(graph=g, extracted=ex, seeds=seeds, hops=2, params=params, ctx=ctx)
    b = entry.impl(graph=g, extracted=ex, seeds=seeds, hops=2, params=params, ctx=ctx)
    assert same(before, g)
    assert a == b and len(a) > 0
    check_paths(a, g, ex, seeds)
    assert max(len(p.edges) for p in a) <= 2
    # extraction with no edges / no seeds → no paths
    bare = Extracted(seeds, np.ones(1), np.zeros(0, dtype=np.int64))
    assert entry.impl(graph=g, extracted=bare, seeds=seeds, hops=2, params=params, ctx=ctx) == []
    nothing = Extracted(*(np.zeros(0, dtype=np.int64),) * 3)
    assert entry.impl(graph=g, extracted=nothing, seeds=np.zeros(0, dtype=np.int64), hops=2, params=params, ctx=ctx) == []
    # isolated component
    isl = seed_of(kg, g, "Island A")
    ex_i = EXTRACTORS.get("ego").impl(graph=g, seeds=isl, hops=2, params=EXTRACTORS.get("ego").params(), ctx=ctx)
    got = entry.impl(graph=g, extracted=ex_i, seeds=isl, hops=2, params=params, ctx=ctx)
    assert {kg.entity_names[g.nodes[v]] for p in got for v in p.nodes} <= {"Island A", "Island B"}


def test_shortest_matches_igraph_all_shortest_paths(tmp_path, index):
    kg = random_kg(tmp_path, 30, 45, 3)
    nb = kg.neighbourhood([0], 50, 10**9)
    g = LocalGraph.build(kg=kg, nodes=nb.nodes, edges=nb.edges)
    ex = Extracted(np.arange(g.n), np.zeros(g.n), np.arange(len(g.edges)))
    s = int(g.local([0])[0])
    entry = FILTERS.get("shortest")
    ctx = Context(question="q", query_vec=np.zeros(384, dtype=np.float32), kg=kg, index=index)
    paths = entry.impl(graph=g, extracted=ex, seeds=np.array([s]), hops=9, params=entry.params(max_per_target=10**6),
                       ctx=ctx)
    ig = igraph.Graph(n=g.n, edges=list(zip(g.src.tolist(), g.dst.tolist())), directed=False)
    ref = ig.get_all_shortest_paths(s)  # node sequences, one per edge-distinct path
    ours = [p.nodes for p in paths]
    assert sorted(ours) == sorted(tuple(r) for r in ref if len(r) > 1)
    dist, _ = shortest_path_dag(g, s)
    assert all(len(p.edges) == dist[p.nodes[-1]] for p in paths)


def test_complete_enumerates_all_simple_paths(kg, index):
    g = whole(kg)
    seeds = seed_of(kg, g, "Al Pacino")
    ex = Extracted(np.arange(g.n), np.zeros(g.n), np.arange(len(g.edges)))
    entry = FILTERS.get("complete")
    paths = entry.impl(graph=g, extracted=ex, seeds=seeds, hops=3, params=entry.params(), ctx=ctx_for(kg, index))
    ig = igraph.Graph(n=g.n, edges=list(zip(g.src.tolist(), g.dst.tolist())), directed=False)
    ref = {tuple(p) for p in ig.get_all_simple_paths(int(seeds[0]), maxlen=3)}
    assert {p.nodes for p in paths} == ref  # the tiny KG has no parallel edges
    capped = entry.impl(graph=g, extracted=ex, seeds=seeds, hops=3, params=entry.params(max_paths=3),
                        ctx=ctx_for(kg, index))
    assert [len(p.edges) for p in capped] == [1, 1, 2]  # level by level, cut inside level 2


def test_beam_width_and_scorer(kg, index):
    g = whole(kg)
    seeds = seed_of(kg, g, "Al Pacino")
    ex = Extracted(np.arange(g.n), np.zeros(g.n), np.arange(len(g.edges)))
    entry = FILTERS.get("beam")
    paths = entry.impl(graph=g, extracted=ex, seeds=seeds, hops=2, params=entry.params(beam_width=2),
                       ctx=ctx_for(kg, index))
    assert len(paths) == 4  # two kept per step
    texts = [path_text(p, g, kg) for p in paths]
    assert any("directed by" in t for t in texts)  # st scorer prefers the question's relation


# ---------------------------------------------------------------- refiners and scorers

def some_paths(kg, g, index):
    seeds = seed_of(kg, g, "Al Pacino")
    ex = Extracted(np.arange(g.n), np.zeros(g.n), np.arange(len(g.edges)))
    entry = FILTERS.get("complete")
    return entry.impl(graph=g, extracted=ex, seeds=seeds, hops=2, params=entry.params(), ctx=ctx_for(kg, index))


def refiner_cases():
    return [("random", {"top_k": 3, "seed": 1}), ("scored", {"top_k": 3, "scorer": {"name": "bm25"}}),
            ("scored", {"top_k": 3, "scorer": {"name": "st"}}), ("llm", {"top_k": 3})]


@pytest.mark.parametrize("name,kw", refiner_cases())
def test_refiner_contract(name, kw, kg, index):
    assert {n for n, _ in refiner_cases()} == set(REFINERS.names())
    g = whole(kg)
    paths = some_paths(kg, g, index)
    texts = [path_text(p, g, kg) for p in paths]
    backend = Scripted(first_paths_reply)
    ctx = ctx_for(kg, index, llm=lambda: LLMClient(backend, cache=None))
    entry = REFINERS.get(name)
    params = entry.params(**kw)
    snap = (list(paths), list(texts))
    a = entry.impl(paths=paths, texts=texts, params=params, ctx=ctx)
    b = entry.impl(paths=paths, texts=texts, params=params, ctx=ctx)
    assert (list(paths), list(texts)) == snap
    assert np.array_equal(a, b) and a.dtype == np.int64
    assert len(a) <= 3 and len(set(a.tolist())) == len(a) and all(0 <= i < len(paths) for i in a)
    assert len(entry.impl(paths=[], texts=[], params=params, ctx=ctx)) == 0
    if name == "llm":  # the scripted LLM picked the last two paths shown, last first
        assert a.tolist() == [len(paths) - 1, len(paths) - 2]
    if kw.get("scorer", {}).get("name") == "bm25":  # the top path mentions both question words
        assert "directed" in texts[a[0]] and "starred" in texts[a[0]]


def test_random_refiner_seed(kg, index):
    g = whole(kg)
    paths = some_paths(kg, g, index)
    entry = REFINERS.get("random")
    draws = {tuple(entry.impl(paths=paths, texts=[], params=entry.params(top_k=3, seed=s), ctx=None).tolist())
             for s in range(5)}
    assert len(draws) > 1


def test_llm_refiner_falls_back_on_failure(kg, index):
    g = whole(kg)
    paths = some_paths(kg, g, index)
    texts = [path_text(p, g, kg) for p in paths]

    class Failing:
        model_id = "failing"

        def generate(self, requests):
            return [LLMReply(error="down") for _ in requests]

    ctx = ctx_for(kg, index, llm=lambda: LLMClient(Failing(), cache=None, retries=0))
    got = REFINERS.get("llm").impl(paths=paths, texts=texts, params=REFINERS.get("llm").params(top_k=2), ctx=ctx)
    assert got.tolist() == [0, 1]


DOCS = ["Heat directed by Michael Mann", "Top Gun release year 1986", "Heat starred actors Al Pacino"]


@pytest.mark.parametrize("name", SCORERS.names())
def test_scorer_contract(name, kg, index):
    backend = Scripted(scores_reply)
    ctx = ctx_for(kg, index, llm=lambda: LLMClient(backend, cache=None))
    entry = SCORERS.get(name)
    a = entry.impl(query=QUESTION, docs=list(DOCS), params=entry.params(), ctx=ctx)
    b = entry.impl(query=QUESTION, docs=list(DOCS), params=entry.params(), ctx=ctx)
    assert a.shape == (3,) and np.all(np.isfinite(a)) and np.allclose(a, b)
    assert len(entry.impl(query=QUESTION, docs=[], params=entry.params(), ctx=ctx)) == 0
    if name == "bm25":
        assert np.argmax(a) in (0, 2) and a[1] == 0.0
    if name == "llm":
        assert np.allclose(a, [1, 0.5, 1 / 3], atol=1e-3)


def test_reranker_from_the_packaged_minilm_is_deterministic_across_loads(kg, index):
    from kgrag.retrieval.scorers.reranker import load_cross_encoder

    entry = SCORERS.get("reranker")
    a = entry.impl(query=QUESTION, docs=DOCS, params=entry.params(), ctx=ctx_for(kg, index))
    load_cross_encoder.cache_clear()
    b = entry.impl(query=QUESTION, docs=DOCS, params=entry.params(), ctx=ctx_for(kg, index))
    assert np.allclose(a, b)


def test_llm_scorer_batches_and_parses(kg, index):
    backend = Scripted(scores_reply)
    ctx = ctx_for(kg, index, llm=lambda: LLMClient(backend, cache=None))
    entry = SCORERS.get("llm")
    got = entry.impl(query=QUESTION, docs=DOCS * 3, params=entry.params(batch=4), ctx=ctx)
    assert backend.calls == 3 and got.shape == (9,)
    assert np.allclose(got[:4], [1, 0.5, 1 / 3, 0.25], atol=1e-3)


# ---------------------------------------------------------------- the lego retriever on the tiny KG

@pytest.fixture(scope="module")
def finetuned_home(tmp_path_factory):
    """A project folder holding data/finetune/st_model (a copy of the packaged MiniLM stands in for it)."""
    import shutil

    from kgrag.index.embed import model_path
    from kgrag.io import ST_MODEL

    home = tmp_path_factory.mktemp("proj")
    shutil.copytree(model_path(MODEL), home / ST_MODEL)
    return home


@pytest.mark.parametrize("preset", list(PRESETS))
def test_every_preset_runs_on_the_tiny_kg(preset, kg, index, monkeypatch, finetuned_home):
    monkeypatch.chdir(finetuned_home)  # presets 5, 12, 18 read the fine-tuned ST from the project folder
    params = RetrieveParams(method="lego", lego={"preset": preset, "trace_ms": True})
    lp = params.module_params()
    key = json.dumps(lp.llm.model_dump(mode="json"), sort_keys=True)
    monkeypatch.setitem(llm_clients._SETTINGS_CLIENTS, key, LLMClient(Scripted(first_paths_reply), cache=None))
    q = Question("q", QUESTION, tuple(kg.find_entities("[Al Pacino]")),
                 tuple(kg.find_entities("[Michael Mann]") + kg.find_entities("[Martin Scorsese]")))
    sub, _ = retrieve_one(question=q, query_vec=index.encode([q.text])[0], kg=kg, index=index, params=params)
    stages = sub.trace["stages"]
    assert [s["stage"] for s in stages][0] == "neighbourhood" and stages[-1]["stage"] == "refine"
    assert all("node_ids" in s and "ms" not in s for s in stages)  # wall times: sub.stage_ms (a run record)
    assert len(sub.stage_ms) == len(stages) and all(ms >= 0 for ms in sub.stage_ms)
    assert len(sub) > 0 and set(sub.heads.tolist()) | set(sub.tails.tolist()) <= set(sub.node_ids.tolist())


def test_preset_stage_override_and_unknown_preset():
    p = RetrieveParams(method="lego", lego={"preset": "lego-09", "refine": {"name": "scored", "params": {}}})
    lp = p.module_params()
    assert lp.filter.name == "beam" and lp.refine.name == "scored"
    with pytest.raises(ValueError, match="lego-00"):
        RetrieveParams(method="lego", lego={"preset": "lego-99"})
    with pytest.raises(ValueError, match="max_ent"):
        RetrieveParams(method="lego", lego={"extract": {"name": "ppr", "params": {"max_ent": 0}}})


@pytest.mark.parametrize("granularity", ["triple", "edge", "node"])
def test_pruning_granularity(granularity, kg, index):
    from kgrag.retrieval.lego.prune import PruneParams, prune_extracted

    g = whole(kg)
    seeds = seed_of(kg, g, "Al Pacino")
    ext = Extracted(nodes=np.arange(g.n), scores=np.ones(g.n), edges=np.arange(len(g.edges)))
    before = snapshot(g)
    p = PruneParams(scorer={"name": "bm25"}, granularity=granularity, window=2)
    out = prune_extracted(graph=g, extracted=ext, seeds=seeds, params=p, ctx=ctx_for(kg, index))
    assert same(before, g) and set(seeds.tolist()) <= set(out.nodes.tolist())
    ends = set(g.src[out.edges].tolist()) | set(g.dst[out.edges].tolist())
    assert ends <= set(out.nodes.tolist())
    rel = {str(kg.relation_names[r]) for r in g.relations[out.edges]}
    if granularity == "triple":
        assert len(out.edges) == 2
    if granularity == "edge":  # "who directed ..." : BM25 on relation names keeps directed_by edges
        assert rel == {"directed_by"} and len(out.edges) == 2
    if granularity == "node":  # 2 best-named nodes + the seed, and only edges among them
        assert len(out.nodes) <= 3
        assert all(a in set(out.nodes.tolist()) and b in set(out.nodes.tolist())
                   for a, b in zip(g.src[out.edges].tolist(), g.dst[out.edges].tolist()))
