"""The synthetic KG generator: seeded, typed, skewed, streamed in blocks, and its 1-3-hop answers match an
independent computation (a plain Python walk over the written triples)."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from kgrag.kg.synth import NOTICE, generate_kg, generate_questions, plan_kg, write_synth

SMALL = dict(n_triples=30_000, entities_per_triple=0.25, n_relations=10, n_types=4, skew=1.0, relation_skew=1.0,
             questions=60, hops=(1, 2, 3), max_answers=20, graph_extra=5, bad_lines=0)


@pytest.fixture(scope="module")
def synth_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("synth") / "s"
    write_synth(out=out, seed=7, **SMALL)
    return out


def read_triples(path: Path) -> list[tuple[str, str, str]]:
    rows = []
    for line in path.read_text().splitlines():
        h, r, t = line.split("\t")
        rows.append((h, r, t))
    return rows


def entity_type(name: str) -> str:
    prefix, typ, num = name.rsplit("_", 2)
    assert prefix == "synth" and num.isdigit(), name
    return typ


def test_same_seed_same_files_other_seed_other_files(tmp_path, synth_dir):
    write_synth(out=tmp_path / "a", seed=7, **SMALL)
    write_synth(out=tmp_path / "b", seed=8, **SMALL)
    for f in ("triples.tsv", "questions.jsonl", "questions_graphs.jsonl", "manifest.json"):
        assert (tmp_path / "a" / f).read_bytes() == (synth_dir / f).read_bytes(), f
    assert (tmp_path / "b" / "triples.tsv").read_bytes() != (synth_dir / "triples.tsv").read_bytes()


def test_exact_count_distinct_no_self_loops_labelled_synthetic(synth_dir):
    rows = read_triples(synth_dir / "triples.tsv")
    assert len(rows) == SMALL["n_triples"] == len(set(rows))
    assert all(h != t for h, _, t in rows)
    assert all(h.startswith("synth_") and r.startswith("synth_r") and t.startswith("synth_") for h, r, t in rows)
    m = json.loads((synth_dir / "manifest.json").read_text())
    assert m["synthetic"] is True and m["notice"] == NOTICE and m["seed"] == 7
    assert m["entities"] == len({x for h, _, t in rows for x in (h, t)})


def test_relations_respect_their_types(synth_dir):
    rows = read_triples(synth_dir / "triples.tsv")
    m = json.loads((synth_dir / "manifest.json").read_text())
    seen: dict[str, set[tuple[str, str]]] = defaultdict(set)
    for h, r, t in rows:
        seen[r].add((entity_type(h), entity_type(t)))
    assert set(seen) <= set(m["relation_types"])
    for r, pairs in seen.items():
        assert pairs == {tuple(m["relation_types"][r])}, r  # every edge of r joins A_r -> B_r
        _, _, a, b = r.split("_", 3)
        assert (a, b) == tuple(m["relation_types"][r])  # and the name says so


def _top_share(kg) -> float:
    deg = np.bincount(np.concatenate([kg.heads, kg.tails]))
    deg = np.sort(deg[deg > 0])[::-1]
    return deg[: max(1, len(deg) // 100)].sum() / deg.sum()


def test_degree_skew_follows_the_exponent():
    kw = dict(n_triples=50_000, entities_per_triple=0.25, n_relations=8, n_types=4, relation_skew=1.0, seed=1)
    skewed, flat = generate_kg(skew=1.0, **kw), generate_kg(skew=0.0, **kw)
    assert _top_share(skewed) > 0.2  # the top 1% of entities hold a fifth of the edge ends: hubs
    assert _top_share(flat) < 0.05  # uniform popularity: no hubs
    deg = np.bincount(np.concatenate([skewed.heads, skewed.tails]))
    deg = deg[deg > 0]
    assert deg.max() > 50 * np.median(deg)
    # heavy tail: the degree complementary CDF falls roughly as a power law (log-log slope between -3 and -0.5)
    xs = np.unique(np.logspace(0, np.log10(deg.max() / 2), 12).astype(int))
    ccdf = np.array([(deg >= x).mean() for x in xs])
    slope = np.polyfit(np.log(xs), np.log(ccdf), 1)[0]
    assert -3.0 < slope < -0.5


def _answers(rows, topic: str, chain: list[str]) -> set[str]:
    out_edges: dict[tuple[str, str], set[str]] = defaultdict(set)
    for h, r, t in rows:
        out_edges[(h, r)].add(t)
    frontier = {topic}
    for r in chain:
        frontier = {t for x in frontier for t in out_edges.get((x, r), ())}
    return frontier - {topic}


def test_answers_match_an_independent_computation(synth_dir):
    rows = read_triples(synth_dir / "triples.tsv")
    qs = [json.loads(x) for x in (synth_dir / "questions.jsonl").read_text().splitlines()]
    assert len(qs) == SMALL["questions"] and {q["hops"] for q in qs} == {1, 2, 3}
    for q in qs:
        (topic,) = q["topic_entities"]
        assert f"[{topic}]" in q["question"]
        assert len(q["relations"]) == q["hops"]
        expected = _answers(rows, topic, q["relations"])
        assert set(q["answers"]) == expected and 1 <= len(expected) <= SMALL["max_answers"], q["id"]
        # the chain is typed end to end: each relation's tail type is the next one's head type
        for r1, r2 in zip(q["relations"], q["relations"][1:]):
            assert r1.split("_", 3)[3] == r2.split("_", 3)[2]
        # the text names the path in words: each relation's number and types, the last one's tail type asked for
        for r in q["relations"]:
            _, num, a, b = r.split("_", 3)
            assert f"synth relation {num} ({a} {b})" in q["question"], q["question"]
        assert q["question"].startswith(f"which {q['relations'][-1].split('_', 3)[3]} is linked by")


def test_question_graphs_hold_their_answers(synth_dir):
    rows = set(read_triples(synth_dir / "triples.tsv"))
    for line in (synth_dir / "questions_graphs.jsonl").read_text().splitlines():
        q = json.loads(line)
        graph = [tuple(t) for t in q["graph"]]
        assert set(graph) <= rows  # every graph triple is a KG triple
        assert _answers(graph, q["topic_entities"][0], q["relations"]) == set(q["answers"])


def test_impossible_sizes_fail_clearly():
    with pytest.raises(ValueError, match="distinct triples"):
        generate_kg(n_triples=5_000, entities_per_triple=0.001, n_relations=1, n_types=1, skew=1.0,
                    relation_skew=1.0, seed=0)


def test_the_file_is_the_in_memory_kg_streamed_block_by_block(synth_dir):
    """write_synth streams the blocks of plan_kg; generate_kg gathers the same blocks: same triples, same order."""
    kw = {k: SMALL[k] for k in ("n_triples", "entities_per_triple", "n_relations", "n_types", "skew", "relation_skew")}
    kg = generate_kg(seed=7, **kw)
    names = kg.entity_names().to_pylist()
    rels = kg.relation_names()
    want = [(names[h], rels[r], names[t]) for h, r, t in zip(kg.heads.tolist(), kg.relations.tolist(),
                                                              kg.tails.tolist())]
    assert read_triples(synth_dir / "triples.tsv") == want
    spec = plan_kg(seed=7, **kw, block_triples=2_000)  # small blocks: each holds about that many triples
    sizes = [len(h) for h, _, _ in spec.blocks()]
    assert sum(sizes) == SMALL["n_triples"] and len(sizes) > 10
    assert max(sizes) <= 2_000 + max(int(d.max()) for d in spec.out_degree)  # one head's triples stay in one block
    # a block made again (a question's walk reads it so) is the same block
    r, b = (int(x) for x in spec.block_order[3])
    assert np.array_equal(spec.block_groups(r, b), spec.block_groups(r, b))


def test_questions_from_the_plan_equal_questions_from_the_kg_in_memory():
    """The question walk over blocks made again (bounded memory) gives the questions of the walk over the whole KG
    in memory, 3-hop chains included."""
    kw = dict(n_triples=20_000, entities_per_triple=0.25, n_relations=8, n_types=4, skew=1.0, relation_skew=1.0,
              seed=3)
    kg = generate_kg(**kw)
    q = dict(n_questions=24, hops=(1, 2, 3), max_answers=20, seed=3, graph_extra=4)
    mem = generate_questions(kg=kg, **q)
    assert generate_questions(kg=kg.spec, **q) == mem
    assert generate_questions(kg=plan_kg(**kw), **q) == mem
    assert sum(x["hops"] == 3 for x in mem) == 8


def test_hubs_grow_with_the_kg():
    """Hubs scale with the KG (the top entity holds about 1 / ln(type size) of its type's edge ends, less where a
    head can link it once per relation): 4x the triples gives a top degree over 2x as large (2.5x here), while the
    median degree stays put."""
    kw = dict(entities_per_triple=0.25, n_relations=8, n_types=4, skew=1.0, relation_skew=1.0, seed=1)
    deg = {}
    for n in (25_000, 100_000):
        kg = generate_kg(n_triples=n, **kw)
        d = np.bincount(np.concatenate([kg.heads, kg.tails]))
        deg[n] = (int(d.max()), float(np.median(d[d > 0])))
    assert deg[100_000][0] > 2 * deg[25_000][0]
    assert deg[100_000][1] <= 2 * deg[25_000][1]


def test_dense_types_are_sampled_exactly_without_repeats():
    """Heads that take most of their tail type (few entities per triple) get their tails by exact sampling without
    replacement: still exactly n_triples distinct triples, no self-loop, every relation typed."""
    kg = generate_kg(n_triples=6_000, entities_per_triple=0.03, n_relations=5, n_types=2, skew=1.2,
                     relation_skew=0.5, seed=4)
    trip = set(zip(kg.heads.tolist(), kg.relations.tolist(), kg.tails.tolist()))
    assert len(trip) == 6_000 and not (kg.heads == kg.tails).any()
    assert (kg.entity_type[kg.heads] == kg.relation_types[kg.relations, 0]).all()
    assert (kg.entity_type[kg.tails] == kg.relation_types[kg.relations, 1]).all()
    per_head = np.bincount(kg.heads * 5 + kg.relations)
    sizes = np.bincount(kg.entity_type)
    assert per_head.max() > sizes.min() // 8  # some head did take a large share of its tail type
