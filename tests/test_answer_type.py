"""relpath's answer type read from a relation's range sample (``retrieve.relpath.answer_type``, issue 55): the
range sample of each relation and direction is the same entities on both stores and equals a plain reference; under
``relation`` the planner reads the vectors of those samples only, however many questions it answers (under ``ends``
it reads the ends of every candidate of every question: a new KG's first run encodes them as they are met); ``auto``
is ``ends`` on a KG under ``AUTO_RELATION_TRIPLES``."""

from __future__ import annotations

import numpy as np
import pytest

from kgrag.index.embed import EmbeddingIndex, encode
from kgrag.kg.duckdb_io import write_duckdb
from kgrag.kg.kgview import range_order
from kgrag.kg.store import KGStore
from kgrag.kg.store_duckdb import DuckKGStore
from kgrag.index import answer_types
from kgrag.retrieval.retrievers.relpath import RelPathParams, retrieve_relpath
from kgrag.types import Question
from tests.conftest import tiny_tables

MODEL = "all-MiniLM-L6-v2"


def _edges(n: int, entities: int, relations: int, seed: int = 0) -> list[tuple[str, str, str]]:
    rng = np.random.default_rng(seed)
    rel = [f"r{int(x) % relations}" for x in rng.zipf(1.6, n)]  # skewed: a rare relation falls under the cut
    return [(f"e{h}", r, f"e{t}") for h, r, t in zip(rng.integers(0, entities, n), rel, rng.integers(0, entities, n))]


def _reference(kg, k: int, seed: int) -> dict[tuple[int, bool], list[int]]:
    """Each (relation, direction)'s k distinct ends first by ``range_order``, ties by id: one relation at a time."""
    heads, rels, tails = (np.asarray(x) for x in (kg.heads, kg.relations, kg.tails))
    out = {}
    for r in np.unique(rels).tolist():
        for fwd, col in ((True, tails), (False, heads)):
            ends = sorted(set(col[rels == r].tolist()), key=lambda e: (int(range_order(np.array([e]), seed)[0]), e))
            out[(r, fwd)] = ends[:k]
    return out


@pytest.mark.parametrize("entities", [300, 200_000])  # the second puts DuckDB's first pass under a cut
def test_range_samples_agree_on_both_stores_and_with_a_plain_reference(tmp_path, entities):
    db = tmp_path / "kg.duckdb"
    write_duckdb(db, tiny_tables(_edges(40_000, entities, 6)))
    mem, duck = KGStore(db), DuckKGStore(db, cache_dir=tmp_path / "cache")
    want = _reference(mem, 32, 3)
    for store in (mem, duck):
        got = store.range_sample(32, 3)
        assert {k: v.tolist() for k, v in got.items()} == want


class _Counted:
    """An entity-vector array that records which ids were read."""

    def __init__(self, vecs: np.ndarray) -> None:
        self.vecs, self.read = vecs, []

    def __len__(self) -> int:
        return len(self.vecs)

    def __getitem__(self, ids):
        self.read.extend(np.asarray(ids).ravel().tolist())
        return self.vecs[ids]


def test_relation_mode_reads_only_the_range_samples_and_auto_is_ends_on_a_small_kg(tmp_path):
    films = [(f"Film {i}", "directed_by", f"Director {i % 40}") for i in range(400)]
    films += [(f"Film {i}", "release_year", str(1950 + i % 30)) for i in range(400)]
    db = tmp_path / "kg.duckdb"
    write_duckdb(db, tiny_tables(films))
    kg = KGStore(db)
    names = kg.names(np.arange(kg.num_entities))
    rel = encode([str(r).replace("_", " ") for r in kg.relation_names], model=MODEL)
    qs = [Question(question_id=f"q{i}", text=f"who directed [Film {i}]?", topic_ids=kg.ids_of([f"Film {i}"]))
          for i in range(0, 400, 20)]
    out, read = {}, {}
    for mode in ("ends", "relation", "auto"):
        answer_types._RANGES.clear()
        ents = _Counted(encode(names, model=MODEL))
        index = EmbeddingIndex(model=MODEL, entity_vectors=ents, relation_vectors=rel)
        p = RelPathParams(plan=None, paths=1, max_triples=100, max_hops=2, fallback=None, answer_type=mode)
        out[mode] = [retrieve_relpath(question=q, query_vec=index.encode([q.text])[0], kg=kg, index=index, params=p,
                                      hops=0, max_edges=0) for q in qs]
        read[mode] = ents.read
    sample = kg.range_sample(answer_types.RANGE_K, answer_types.RANGE_SEED)
    assert sorted(read["relation"]) == sorted(np.concatenate(list(sample.values())).tolist())  # once, for the KG
    assert len(read["ends"]) > len(read["relation"])  # every question's candidates' ends
    for mode in ("ends", "relation"):  # "who directed" walks directed_by: the film's own director
        assert [s.tails.tolist() for s in out[mode]] == [list(kg.ids_of([f"Director {i % 40}"]))
                                                         for i in range(0, 400, 20)], mode
    assert kg.num_triples < answer_types.AUTO_RELATION_TRIPLES
    assert [s.tails.tolist() for s in out["auto"]] == [s.tails.tolist() for s in out["ends"]]
    assert read["auto"] == read["ends"]


def test_auto_reads_ranges_from_the_threshold_in_relpath_and_in_the_pseudo_question_fit(tmp_path, monkeypatch):
    """With the threshold under this KG's size (monkeypatched: a 5M-triple KG is too big for a unit test), ``auto``
    is ``relation`` in relpath, and relplan's pseudo-question fit (``fit_for_kg``) reads the same range samples, so
    the weights are fitted on the feature relpath will compute: no entity beyond the samples is read."""
    from kgrag.index.pseudo import fit_for_kg

    films = [(f"Film {i}", "directed_by", f"Director {i % 40}") for i in range(400)]
    films += [(f"Film {i}", "release_year", str(1950 + i % 30)) for i in range(400)]
    db = tmp_path / "kg.duckdb"
    write_duckdb(db, tiny_tables(films))
    kg = KGStore(db)
    monkeypatch.setattr(answer_types, "AUTO_RELATION_TRIPLES", kg.num_triples)
    answer_types._RANGES.clear()
    ents = _Counted(encode(kg.names(np.arange(kg.num_entities)), model=MODEL))
    weights, fit = fit_for_kg(kg, lambda t: encode(t, model=MODEL), {}, [], 40, 0, entity_vectors=ents)
    assert fit["pseudo_questions"] > 0 and weights is not None
    sample = kg.range_sample(answer_types.RANGE_K, answer_types.RANGE_SEED)
    assert sorted(ents.read) == sorted(np.concatenate(list(sample.values())).tolist())
