"""The ``ppr`` extractor's push method (Andersen-Chung-Lang forward push) against exact PPR (igraph's
PRPACK, or power iteration to convergence): the per-node bound ``0 <= exact - score < eps * degree``, the
top-k agreement it implies, on random KGs and on real MetaQA 3-hop questions; determinism; the lego
retriever's whole-KG path and its neighbourhood fallback."""

from __future__ import annotations

import igraph
import numpy as np
import pytest

from kgrag.evaluation.evaluate import retrieval_recall
from kgrag.retrieval.lego import EXTRACTORS
from kgrag import ranking
from kgrag.retrieval.lego.extract_ppr import PPRParams, extract_from_kg, local_ppr, push_ppr, top_nodes, within_hops
from kgrag.retrieval.lego.types import LocalGraph
from kgrag.params import RetrieveParams
from kgrag.retrieval.run import retrieve_one
from kgrag.kg.store import KGStore, write_duckdb
from kgrag.types import Question
from tests.conftest import METAQA, tiny_tables, need

SLACK = 1e-9  # PRPACK's own error and float round-off, far below any eps tested


def random_kg(tmp_path, n, m, seed):
    rng = np.random.default_rng(seed)
    edges = [(f"n{a}", "r", f"n{b}") for a, b in rng.integers(0, n, size=(m, 2)) if a != b]
    edges += [(f"n{a}", "r", f"n{a + 1}") for a in range(n - 1) if rng.random() < 0.3]  # some multi-edges
    path = tmp_path / f"g{seed}.duckdb"
    write_duckdb(path, tiny_tables(edges))
    return KGStore(path)


def exact(kg, seeds, damping=0.8) -> np.ndarray:
    g = igraph.Graph(n=kg.num_entities, edges=list(zip(kg.heads.tolist(), kg.tails.tolist())), directed=False)
    return np.asarray(g.personalized_pagerank(reset_vertices=list(seeds), damping=damping, directed=False))


def push_on_kg(kg, seeds, eps, damping=0.8):
    indptr, nbr, _ = kg.question_adjacency(graph_id=None)
    degree = indptr[1:] - indptr[:-1]
    ids, est, _ = push_ppr(indptr=indptr, nbr=nbr, degree=degree, seeds=np.asarray(seeds), damping=damping,
                           eps=eps)
    full = np.zeros(kg.num_entities)
    full[ids] = est
    return full, degree, ids


def check_bound(full, ref, degree, eps):
    gap = ref - full
    assert gap.min() >= -SLACK, gap.min()  # a lower bound
    over = gap / (eps * np.maximum(degree, 1))
    assert over.max() < 1 + SLACK, over.max()  # ... missing less than eps * degree


def check_top(full, ref, degree, eps, seeds, k):
    """A node left out of the top k can beat the worst kept one in the exact PPR by less than its eps * degree."""
    top = top_nodes(full, seeds, k)
    kept = np.setdiff1d(top, seeds)
    out = np.ones(len(ref), dtype=bool)
    out[top] = False
    if len(kept):
        assert np.all(ref[out] - eps * np.maximum(degree[out], 1) < ref[kept].min() + SLACK)
    return top


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("eps", [1e-2, 1e-4, 1e-6])
def test_push_ppr_is_within_eps_degree_below_igraph(seed, eps, tmp_path):
    kg = random_kg(tmp_path, 60, 100, seed)
    seeds = [0] if seed % 2 else [0, 5, 9]
    ref = exact(kg, seeds)
    full, degree, ids = push_on_kg(kg, seeds, eps)
    check_bound(full, ref, degree, eps)
    assert np.all(np.diff(ids) > 0) and set(seeds) <= set(ids.tolist())
    check_top(full, ref, degree, eps, np.asarray(seeds), 10)


def test_push_ppr_converges_to_igraph_as_eps_shrinks(tmp_path):
    kg = random_kg(tmp_path, 200, 400, 7)
    ref = exact(kg, [3])
    errs = [np.abs(push_on_kg(kg, [3], eps)[0] - ref).max() for eps in (1e-3, 1e-5, 1e-7, 1e-9)]
    assert errs[-1] < 1e-8 and errs == sorted(errs, reverse=True) and errs[0] > 10 * errs[-1], errs
    # and the top 20 at a small eps is igraph's top 20 (by the same ranking rule)
    full = push_on_kg(kg, [3], 1e-9)[0]
    assert top_nodes(full, np.array([3]), 20).tolist() == top_nodes(ref, np.array([3]), 20).tolist()


def test_push_ppr_expands_a_hub_seed_whatever_eps(tmp_path):
    """A topic of degree 300 at eps 0.01 (its residual 1 < eps * degree) is still pushed once: its neighbours
    get mass and the bound holds."""
    edges = [("hub", "r", f"leaf{i}") for i in range(300)] + [("leaf0", "r", "far")]
    path = tmp_path / "star.duckdb"
    write_duckdb(path, tiny_tables(edges))
    kg = KGStore(path)
    hub = kg.ids_of(["hub"])[0]
    full, degree, ids = push_on_kg(kg, [hub], 1e-2)
    assert len(ids) == 301 and full[hub] >= 0.2 - 1e-12
    check_bound(full, exact(kg, [hub]), degree, 1e-2)


def test_push_ppr_isolated_seed_keeps_its_mass():
    indptr = np.zeros(3, dtype=np.int64)
    ids, est, expanded = push_ppr(indptr=indptr, nbr=np.zeros(0, dtype=np.int64), degree=np.zeros(2, dtype=np.int64),
                                  seeds=np.array([0]), damping=0.8, eps=1e-6)
    ref = igraph.Graph(n=2).personalized_pagerank(reset_vertices=[0], damping=0.8)
    assert ids.tolist() == [0] and expanded.tolist() == [True] and abs(est[0] - ref[0]) < 1e-6 and ref[1] == 0.0


def test_push_ppr_with_an_isolated_seed_among_others_follows_igraph(tmp_path):
    edges = [("a", "r", "b"), ("b", "r", "c"), ("c", "r", "a"), ("c", "r", "d"), ("lone", "r", "lone2")]
    path = tmp_path / "k.duckdb"
    write_duckdb(path, tiny_tables(edges))
    kg = KGStore(path)
    a, lone = kg.ids_of(["a", "lone"])
    ref = exact(kg, [a, lone])
    full = push_on_kg(kg, [a, lone], 1e-10)[0]
    assert np.allclose(full, ref, atol=1e-8)


@pytest.mark.parametrize("hops", [1, 2])
def test_push_ppr_stage_on_a_neighbourhood_is_within_eps_degree_below_power_iteration(hops, tmp_path):
    """On a neighbourhood (rows shorter than the whole-KG degree) push approximates the restricted PPR that
    power iteration computes, with the same bound."""
    kg = random_kg(tmp_path, 200, 400, 11)
    nb = kg.neighbourhood([3], hops, 10**9)
    g = LocalGraph.build(kg=kg, nodes=nb.nodes, edges=nb.edges)
    seeds = g.local([3])
    want = local_ppr(graph=g, seeds=seeds, damping=0.8, tol=1e-14, max_iter=10_000)
    eps = 1e-4
    ids, est, _ = push_ppr(indptr=g.indptr, nbr=g.nbr, degree=g.degree, seeds=seeds, damping=0.8, eps=eps)
    full = np.zeros(g.n)
    full[ids] = est
    check_bound(full, want, g.degree, eps)
    entry = EXTRACTORS.get("ppr")
    ex = entry.impl(graph=g, seeds=seeds, hops=hops, params=PPRParams(eps=eps, max_ent=15), ctx=None)
    assert ex.nodes.tolist() == top_nodes(full, seeds, 15).tolist()
    assert np.array_equal(ex.scores, full[ex.nodes])


def test_extract_from_kg_graph_is_the_kept_entities_and_every_edge_among_them(tmp_path):
    kg = random_kg(tmp_path, 300, 700, 5)
    p = PPRParams(max_ent=40, eps=1e-5, within_hops=False)
    graph, ex = extract_from_kg(kg=kg, seeds=np.array([4, 17]), hops=2, params=p)
    assert graph.n == len(ex.nodes) == 40 and np.array_equal(np.sort(ex.nodes), np.arange(40))
    assert graph.nodes[ex.nodes[:2]].tolist() == [4, 17]  # seeds first
    inside = np.isin(kg.heads, graph.nodes) & np.isin(kg.tails, graph.nodes)
    assert graph.edges.tolist() == np.flatnonzero(inside).tolist()
    assert np.array_equal(ex.edges, np.arange(len(graph.edges)))
    assert np.array_equal(graph.degree, kg.degree(graph.nodes))  # whole-KG degrees, as the stages expect
    # the same entities and order as push + top_nodes on the whole KG
    full = push_on_kg(kg, [4, 17], 1e-5)[0]
    assert graph.nodes[ex.nodes].tolist() == top_nodes(full, np.array([4, 17]), 40).tolist()
    assert extract_from_kg(kg=kg, seeds=np.array([4]), hops=2, params=PPRParams(method="power")) is None


@pytest.mark.parametrize("hops", [1, 2, 3])
def test_extract_from_kg_within_hops_keeps_the_best_entities_near_the_topics(hops, tmp_path):
    kg = random_kg(tmp_path, 300, 500, 8)
    seeds = np.array([4, 17])
    p = PPRParams(max_ent=60, eps=1e-6)
    graph, ex = extract_from_kg(kg=kg, seeds=seeds, hops=hops, params=p)
    near = kg.neighbourhood(seeds, hops, 10**9).nodes  # the true k-hop ball
    assert set(graph.nodes.tolist()) <= set(near.tolist())
    # at this small eps every node of the ball that matters is expanded: the best of the ball by PPR
    full = push_on_kg(kg, seeds, 1e-6)[0]
    ball = np.zeros(kg.num_entities)
    ball[near] = full[near]
    assert graph.nodes[ex.nodes].tolist() == top_nodes(ball, seeds, 60).tolist()
    wide, wex = extract_from_kg(kg=kg, seeds=seeds, hops=hops, params=PPRParams(max_ent=60, eps=1e-6,
                                                                                 within_hops=False))
    assert wide.n == 60 and (hops == 3 or not set(wide.nodes.tolist()) <= set(near.tolist()))


def test_within_hops_leaves_through_expanded_nodes_only():
    # path 0-1-2-3 and 0-4-3: node 4 not expanded, so 3 is 3 hops away (through 1, 2), not 2
    edges = np.array([[0, 1], [1, 2], [2, 3], [0, 4], [4, 3]])
    g = LocalGraph(nodes=np.arange(5), edges=np.arange(5), src=edges[:, 0], dst=edges[:, 1],
                   relations=np.zeros(5, dtype=np.int64), degree=np.full(5, 2))
    got = [within_hops(indptr=g.indptr, nbr=g.nbr, seeds=np.array([0]), expanded=np.array([0, 1, 2]), hops=h)
           for h in (1, 2, 3)]
    assert [np.flatnonzero(x).tolist() for x in got] == [[0, 1, 4], [0, 1, 2, 4], [0, 1, 2, 3, 4]]


def test_extract_from_kg_keeps_self_loops_and_multi_edges_once_each(tmp_path):
    edges = [("a", "r", "a"), ("a", "r", "b"), ("a", "s", "b"), ("b", "r", "c"), ("c", "r", "c"), ("c", "r", "d")]
    path = tmp_path / "loops.duckdb"
    write_duckdb(path, tiny_tables(edges))
    kg = KGStore(path)
    graph, ex = extract_from_kg(kg=kg, seeds=np.array(kg.ids_of(["a"])), hops=3, params=PPRParams(eps=1e-8))
    assert graph.n == 4 and graph.edges.tolist() == list(range(6))
    ref = exact(kg, kg.ids_of(["a"]))
    assert np.allclose(ex.scores, ref[graph.nodes[ex.nodes]], atol=1e-6)


def test_push_ppr_is_deterministic_and_ignores_seed_order(tmp_path):
    kg = random_kg(tmp_path, 300, 700, 6)
    p = PPRParams(max_ent=50, eps=1e-5)
    runs = [extract_from_kg(kg=kg, seeds=np.array(s), hops=2, params=p)
            for s in ([8, 2, 30], [30, 8, 2, 2], [8, 2, 30])]
    g0, e0 = runs[0]
    for g, e in runs[1:]:
        assert np.array_equal(g.nodes[e.nodes], g0.nodes[e0.nodes]) and np.array_equal(e.scores, e0.scores)
        assert np.array_equal(g.edges, g0.edges)


# ---------------------------------------------------------------- real MetaQA 3-hop questions

@pytest.fixture(scope="module")
def metaqa3(tmp_path_factory):
    from kgrag.kg.loaders.metaqa import load_metaqa
    from kgrag.kg.store import questions_from_table

    need((METAQA / "kb.txt").exists(), "real MetaQA data not found")
    t = load_metaqa(path=str(METAQA), hops=3, split="test", sample=4, seed=0)
    path = tmp_path_factory.mktemp("metaqa3") / "kg.duckdb"
    write_duckdb(path, {"entities": t.entities, "relations": t.relations, "triples": t.triples,
                        "questions": t.questions})
    kg = KGStore(path)
    return kg, [q for q in questions_from_table(t.questions) if q.topic_ids]


def test_push_ppr_on_real_metaqa_3hop_agrees_with_igraph_within_the_bound(metaqa3):
    kg, qs = metaqa3
    p = PPRParams()  # the defaults the retriever runs
    whole = igraph.Graph(n=kg.num_entities, edges=np.stack([kg.heads, kg.tails], axis=1), directed=False)
    ours_rec, ref_rec = [], []
    for q in qs:
        seeds = np.unique(np.asarray(q.topic_ids))
        ref = np.asarray(whole.personalized_pagerank(reset_vertices=seeds.tolist(), damping=p.damping,
                                                     directed=False))
        full, degree, ids = push_on_kg(kg, seeds, p.eps)
        assert len(ids) < kg.num_entities / 2  # local: most of the KG is never touched
        check_bound(full, ref, degree, p.eps)
        top = check_top(full, ref, degree, p.eps, seeds, p.max_ent)
        graph, ex = extract_from_kg(kg=kg, seeds=seeds, hops=3, params=p.model_copy(update={"within_hops": False}))
        assert graph.nodes[ex.nodes].tolist() == top.tolist()
        # the default keeps the best entities within the question's 3 hops
        graph, ex = extract_from_kg(kg=kg, seeds=seeds, hops=3, params=p)
        kept = graph.nodes[ex.nodes]
        assert set(kept.tolist()) <= set(kg.neighbourhood(seeds, 3, 10**9).nodes.tolist())
        assert np.all(np.diff(ranking.rounded(full[kept[len(seeds):]], ranking.MASS_DECIMALS)) <= 0)
        ours_rec.append(retrieval_recall(answer_ids=q.answer_ids, node_ids=kept.tolist()))
        ref_rec.append(retrieval_recall(answer_ids=q.answer_ids,
                                        node_ids=top_nodes(ref, seeds, p.max_ent).tolist()))
    assert np.mean(ours_rec) >= np.mean(ref_rec) - 0.05, (ours_rec, ref_rec)


# ---------------------------------------------------------------- the lego retriever

def lego_question(kg):
    return Question("q", "who directed the movies starred by Al Pacino", tuple(kg.find_entities("[Al Pacino]")),
                    tuple(kg.find_entities("[Michael Mann]") + kg.find_entities("[Martin Scorsese]")))


def test_lego_ppr_push_walks_no_neighbourhood(kg, index, monkeypatch):
    q = lego_question(kg)
    vec = index.encode([q.text])[0]

    def no_walk(*a, **k):
        raise AssertionError("push on the whole KG walks no neighbourhood")

    monkeypatch.setattr(kg, "question_neighbourhood", no_walk)
    sub, _ = retrieve_one(question=q, query_vec=vec, kg=kg, index=index,
                          params=RetrieveParams(method="lego", lego={"preset": "lego-00"}))
    stages = sub.trace["stages"]
    assert [s["stage"] for s in stages[:2]] == ["neighbourhood", "extract"] and stages[0]["module"] == "ppr"
    assert {"Michael Mann", "Martin Scorsese"} <= set(kg.names(sub.node_ids))
    assert "Island A" not in kg.names(sub.node_ids)


def test_lego_ppr_falls_back_to_the_neighbourhood_without_adjacency(kg, index, monkeypatch):
    q = lego_question(kg)
    vec = index.encode([q.text])[0]
    params = RetrieveParams(method="lego", lego={"preset": "lego-00"})
    direct, _ = retrieve_one(question=q, query_vec=vec, kg=kg, index=index, params=params)
    walks = []
    real = kg.question_neighbourhood

    def counted(*a, **k):
        walks.append(1)
        return real(*a, **k)

    monkeypatch.setattr(kg, "question_neighbourhood", counted)
    monkeypatch.setattr(kg, "question_adjacency", lambda **k: None)  # a store without an in-memory CSR
    fallback, _ = retrieve_one(question=q, query_vec=vec, kg=kg, index=index, params=params)
    assert walks == [1] and fallback.trace["stages"][0]["module"] == "kgstore"
    # both keep the 2-hop neighbourhood here (the seed first); without within_hops the whole-KG push reaches past
    # it (Collateral is 3 hops from Al Pacino)
    near = set(kg.neighbourhood(list(q.topic_ids), 2, 10**9).nodes.tolist())
    got_direct, got_fallback = (s.trace["stages"][1]["node_ids"] for s in (direct, fallback))
    assert set(got_fallback) == set(got_direct) == near and got_direct[0] == got_fallback[0] == q.topic_ids[0]
    monkeypatch.undo()
    wide = RetrieveParams(method="lego", lego={"preset": "lego-00", "extract": {
        "name": "ppr", "params": {"within_hops": False}}})
    sub, _ = retrieve_one(question=q, query_vec=vec, kg=kg, index=index, params=wide)
    assert kg.ids_of(["Collateral"])[0] in set(sub.trace["stages"][1]["node_ids"]) - near


@pytest.mark.parametrize("hops", [1, 2])
def test_extract_from_kg_graph_equals_localgraph_build(hops, tmp_path):
    kg = random_kg(tmp_path, 300, 700, 9)
    graph, _ = extract_from_kg(kg=kg, seeds=np.array([4, 17]), hops=hops, params=PPRParams(max_ent=50))
    ref = LocalGraph.build(kg=kg, nodes=graph.nodes, edges=graph.edges)
    for k in ("nodes", "edges", "src", "dst", "relations", "degree"):
        assert np.array_equal(getattr(graph, k), getattr(ref, k)) and getattr(graph, k).dtype == np.int64, k
