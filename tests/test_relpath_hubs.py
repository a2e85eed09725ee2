"""relpath's hub sampling (retrieve.relpath.hub_edges): on a tiny KG with one hub genre of 300 films, a step reads at
most hub_edges of the hub's edges of one relation and direction (counted from the steps, not timed), the answers are
those the sample holds, the same seed gives the same sample, and a bound above every group changes nothing. The tests
of the sample itself run with hub_budget 0 (every group over hub_edges sampled); hub_budget's own test runs the
default, under which this small KG's steps read every edge."""

from __future__ import annotations

import numpy as np
import pytest

from kgrag.index.embed import EmbeddingIndex, encode
from kgrag.kg.duckdb_io import write_duckdb
from kgrag.kg.store import KGStore
from kgrag.kg.store_duckdb import DuckKGStore
from kgrag.params import RetrieveParams
from kgrag.retrieval.retrievers import relpath
from kgrag.retrieval.retrievers.relpath import RelPathParams, retrieve_relpath
from kgrag.retrieval.run import key_hash
from kgrag.types import Question
from tests.conftest import tiny_tables

MODEL = "all-MiniLM-L6-v2"
FILMS = 300  # the hub: Noir has 300 films (has_genre, walked back from Noir)
HUB = 20


def _edges() -> list[tuple[str, str, str]]:
    out = []
    for i in range(FILMS):
        f = f"Film {i:03d}"
        out += [(f, "has_genre", "Noir"), (f, "directed_by", f"Director {i % 60:02d}"),
                (f, "release_year", str(1950 + i % 3))]
    for i in range(5):  # a small genre beside the hub
        out += [(f"Western {i}", "has_genre", "Western"), (f"Western {i}", "directed_by", f"Director {i:02d}")]
    return out


@pytest.fixture(scope="module")
def kg(tmp_path_factory) -> KGStore:
    path = tmp_path_factory.mktemp("hubkg") / "kg.duckdb"
    write_duckdb(path, tiny_tables(_edges()))
    return KGStore(path)


@pytest.fixture(scope="module")
def index(kg) -> EmbeddingIndex:
    rel = encode([str(r).replace("_", " ") for r in kg.relation_names], model=MODEL)
    return EmbeddingIndex(model=MODEL, entity_vectors=np.zeros((0, rel.shape[1]), np.float32), relation_vectors=rel)


def _run(kg, index, **params):
    q = Question(question_id="q", text="who directed the films with genre [Noir]?", topic_ids=kg.ids_of(["Noir"]))
    params.setdefault("hub_budget", 0)
    p = RelPathParams(plan=None, paths=1, max_triples=1000, max_hops=2, fallback=None, **params)
    return retrieve_relpath(question=q, query_vec=index.encode([q.text])[0], kg=kg, index=index, params=p, hops=0,
                            max_edges=0)


def _recorded(monkeypatch) -> list[dict]:
    """Every step relpath takes, recorded as it returns it."""
    steps: list[dict] = []
    real = relpath._step

    def spy(*a, **k):
        out = real(*a, **k)
        steps.append(out)
        return out

    monkeypatch.setattr(relpath, "_step", spy)
    return steps


def _at(steps: list[dict], node: int) -> dict:
    """The most edges any step read from ``node`` per (relation, forward)."""
    most: dict = {}
    for st in steps:
        for key, (e, src, _) in st.items():
            most[key] = max(most.get(key, 0), int((src == node).sum()))
    return most


def _sampled_films(kg, seed: int) -> set[int]:
    """The films the hub sample keeps, computed from the hub's edges (by edge id) and the documented draw."""
    noir, genre = kg.ids_of(["Noir"])[0], int(np.flatnonzero(kg.relation_names == "has_genre")[0])
    edges = np.flatnonzero((kg.tails == noir) & (kg.relations == genre))  # by edge id
    pos = relpath._hub_sample(len(edges), HUB, seed, noir, genre, False)
    return set(kg.heads[edges[pos]].tolist())


def test_a_step_reads_at_most_hub_edges_of_a_hubs_relation(kg, index, monkeypatch):
    steps = _recorded(monkeypatch)
    sub = _run(kg, index, hub_edges=HUB)
    noir, genre = kg.ids_of(["Noir"])[0], int(np.flatnonzero(kg.relation_names == "has_genre")[0])
    assert _at(steps, noir)[(genre, False)] == HUB
    assert all(n <= HUB for st in steps for n in _per_node_group(st).values())  # every node, every group
    assert sub.trace["hub_groups_sampled"] >= 1 and sub.trace["hub_edges_read"] > 0
    steps.clear()
    off = _run(kg, index, hub_edges=None)
    assert _at(steps, noir)[(genre, False)] == FILMS  # off: every edge of the hub
    assert "hub_edges_read" not in off.trace  # the trace with sampling off is as before it existed
    assert sub.trace["hub_edges_read"] < sum(len(e) for st in steps for e, _, _ in st.values())


def _per_node_group(step: dict) -> dict:
    out: dict = {}
    for key, (_, src, _) in step.items():
        for n, c in zip(*np.unique(src, return_counts=True)):
            out[(int(n), key)] = int(c)
    return out


def test_the_answers_are_those_the_sample_holds(kg, index):
    sub = _run(kg, index, hub_edges=HUB)
    assert sub.trace["relations"] == [["has_genre", "directed_by"]] and sub.trace["directions"] == [[0, 1]]
    films = _sampled_films(kg, 0)
    direct = int(np.flatnonzero(kg.relation_names == "directed_by")[0])
    want = {int(t) for h, r, t in zip(kg.heads, kg.relations, kg.tails) if r == direct and int(h) in films}
    assert set(sub.trace["ends"]) == want and len(want) < 60  # a sampled film's director is kept, no other
    off = _run(kg, index, hub_edges=None)
    assert len(set(off.trace["ends"])) == 60  # off: every Noir film's director


def test_same_seed_same_sample_other_seed_another(kg, index):
    a, b = _run(kg, index, hub_edges=HUB), _run(kg, index, hub_edges=HUB)
    assert a.trace == b.trace and np.array_equal(a.tails, b.tails) and np.array_equal(a.heads, b.heads)
    c = _run(kg, index, hub_edges=HUB, hub_seed=1)
    assert set(c.trace["ends"]) != set(a.trace["ends"]) and _sampled_films(kg, 1) != _sampled_films(kg, 0)


def test_the_sample_depends_on_the_hub_alone_and_both_paths_agree(kg, monkeypatch, tmp_path):
    """A hub's sample does not depend on the rest of the frontier; the step from the edge groups (built in memory for
    a KG held as arrays, memory-mapped from disk on the DuckDB store) and the step that fetches and groups the
    frontier's edges (per-question graphs) give the same edges."""
    noir, western = kg.ids_of(["Noir", "Western"])
    films = np.asarray(kg.ids_of([f"Film {i:03d}" for i in range(0, FILMS, 7)]), dtype=np.int64)
    alone = relpath._step(kg, np.array([noir]), None, frozenset(), 10**6, HUB, 0)
    both = relpath._step(kg, np.array([noir, western]), None, frozenset(), 10**6, HUB, 0)
    for key, (e, src, _) in alone.items():
        assert set(e.tolist()) == set(both[key][0][both[key][1] == noir].tolist())
    frontiers = [np.array([noir]), np.array([noir, western]), films, np.concatenate([films, [noir]])]
    skip = frozenset({int(np.flatnonzero(kg.relation_names == "release_year")[0])})
    counted = [relpath._step(kg, f, None, s, 10**6, HUB, 3) for f in frontiers for s in (frozenset(), skip)]
    duck = DuckKGStore(kg.path, cache_dir=tmp_path / "duck")  # its edge groups, memory-mapped from disk
    fetched = [relpath._step(duck, f, None, s, 10**6, HUB, 3) for f in frontiers for s in (frozenset(), skip)]
    monkeypatch.setattr(relpath, "_groups_of", lambda kg, graph_id: None)
    fetched += [relpath._step(kg, f, None, s, 10**6, HUB, 3) for f in frontiers for s in (frozenset(), skip)]
    for c, f in zip(counted + counted, fetched):
        assert c.keys() == f.keys()
        for key in c:
            assert all(np.array_equal(x, y) for x, y in zip(c[key], f[key])), key


def test_a_bound_above_every_group_changes_nothing(kg, index):
    """hub_edges at the largest (node, relation, direction) group (the hub's 300 films) samples nothing: the same
    subgraph and trace as off, as MetaQA's default experiment keeps with any bound above its largest group, 4,176."""
    noir = kg.ids_of(["Noir"])[0]
    for frontier in (np.array([noir]), np.arange(kg.num_entities)):
        old = relpath._step(kg, frontier, None, frozenset(), 20_000)
        new = relpath._step(kg, frontier, None, frozenset(), 20_000, FILMS, 0)
        assert old.keys() == new.keys()
        for key in old:
            assert sorted(old[key][0].tolist()) == sorted(new[key][0].tolist())
    off, wide = _run(kg, index, hub_edges=None), _run(kg, index, hub_edges=FILMS)
    assert np.array_equal(off.heads, wide.heads) and np.array_equal(off.tails, wide.tails)
    assert {k: v for k, v in wide.trace.items() if not k.startswith("hub_")} == off.trace
    assert wide.trace["hub_groups_sampled"] == 0


def test_a_step_under_the_budget_reads_every_edge_and_one_over_it_samples(kg, index, monkeypatch):
    """hub_budget: the first step, from Noir, holds its 300 has_genre edges and nothing else. With a budget of
    10,000 (the default) or of exactly 300 it reads them all: no group sampled, the answers every Noir film's
    director, the subgraph the one with sampling off; with 299 it samples the hub as hub_budget 0 does."""
    steps = _recorded(monkeypatch)
    off = _run(kg, index, hub_edges=None)
    noir, genre = kg.ids_of(["Noir"])[0], int(np.flatnonzero(kg.relation_names == "has_genre")[0])
    assert sum(len(e) for e, _, _ in steps[0].values()) == FILMS
    for budget in (10_000, FILMS):
        steps.clear()
        sub = _run(kg, index, hub_edges=HUB, hub_budget=budget)
        assert _at(steps, noir)[(genre, False)] == FILMS and sub.trace["hub_groups_sampled"] == 0
        assert len(set(sub.trace["ends"])) == 60 and set(sub.trace["ends"]) == set(off.trace["ends"])
        assert np.array_equal(sub.heads, off.heads) and np.array_equal(sub.tails, off.tails)
    steps.clear()
    low = _run(kg, index, hub_edges=HUB, hub_budget=FILMS - 1)
    assert _at(steps, noir)[(genre, False)] == HUB and low.trace["hub_groups_sampled"] >= 1
    assert low.trace == _run(kg, index, hub_edges=HUB, hub_budget=0).trace
    assert RelPathParams().hub_budget == 10_000


def test_the_shard_key_changes_through_the_params_and_the_default_is_100():
    """The sample depends on the KG and on hub_edges / hub_seed alone, so those params are what moves relpath's
    shard key (kgrag.retrieval.run.key_hash); the committed experiment and the model's default sample at 100."""
    from kgrag.params import load
    from tests.conftest import ROOT

    base = key_hash(RetrieveParams(relpath={"hub_edges": None}))
    assert key_hash(RetrieveParams(relpath={"hub_edges": HUB})) != base
    assert key_hash(RetrieveParams(relpath={"hub_edges": HUB, "hub_seed": 1})) != \
        key_hash(RetrieveParams(relpath={"hub_edges": HUB}))
    assert key_hash(RetrieveParams(relpath={"hub_edges": HUB, "hub_budget": 0})) != \
        key_hash(RetrieveParams(relpath={"hub_edges": HUB}))
    rp = load(ROOT / "params.yaml").retrieve.module_params()
    assert rp.hub_edges == 100 and RelPathParams().hub_edges == 100
