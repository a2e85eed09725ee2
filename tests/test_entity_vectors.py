"""Lazy entity vectors (``index.entities: lazy``): encoded when first read, kept on disk by text, and read by
every retriever as the eager index's matrix was."""

from __future__ import annotations

import json
import types

import numpy as np
import pytest

from kgrag.index import entity_vectors as EV
from kgrag.index.build import build_index
from kgrag.index.embed import EmbeddingIndex, encode, has_index
from kgrag.index.zeroshot import entity_text
from kgrag.params import RetrieveParams
from kgrag.registry import RETRIEVERS
from kgrag.retrieval.run import retrieve_rows
from tests.test_retrievers_contract import _output_bytes, _q

MODEL = "all-MiniLM-L6-v2"


def _names(*names):
    return types.SimpleNamespace(num_entities=len(names), entity_names=np.asarray(names, dtype=object))


def test_rows_are_the_names_vectors_and_a_nameless_entity_reads_zero(tmp_path):
    kg = _names("Heat", None, "Michael_Mann", "Al Pacino")
    vecs = EV.EntityVectors(kg, EV.VectorCache(MODEL, tmp_path))
    assert len(vecs) == 4 and vecs.shape == (4, 384)
    want = encode([entity_text(n) for n in ("Heat", "Michael_Mann", "Al Pacino")], model=MODEL)
    got = vecs[[0, 2, 3]]
    assert np.abs(got - want).max() < 1e-5  # the same model and text; only the batch differs
    assert not vecs[1].any() and vecs[1].shape == (384,)  # an entity without a name: a zero row, as the index held
    assert np.array_equal(vecs[np.array([[3, 0]])][0], vecs[[3, 0]])  # any index shape, rows in its order
    assert np.array_equal(vecs[1:3], vecs[[1, 2]])
    assert np.allclose(vecs @ want[0], np.asarray(vecs) @ want[0])  # a search over all entities encodes them all
    with pytest.raises(IndexError, match="out of range"):
        vecs[[4]]


def test_vectors_are_kept_on_disk_and_shared_by_later_readers(tmp_path):
    first = EV.VectorCache(MODEL, tmp_path)
    a = first.get(["Heat", "Al Pacino", "Heat"])
    assert first.encoded == 2 and np.array_equal(a[0], a[2])
    (folder,) = [p for p in tmp_path.iterdir()]
    assert folder.name == EV.model_key(MODEL) and MODEL in folder.name  # keyed by model and its package version
    assert len(list(folder.glob("*.parquet"))) == 1 and not list(folder.glob(".*tmp"))
    later = EV.VectorCache(MODEL, tmp_path)  # another process, run or Dask worker reading the same folder
    b = later.get(["Al Pacino", "Heat", "Michael Mann"])
    assert later.encoded == 1  # only the name not seen before
    assert np.array_equal(b[0], a[1]) and np.array_equal(b[1], a[0])  # the first encoding's vectors, bit for bit
    assert EV.VectorCache(MODEL, tmp_path / "other").get(["Heat"]).shape == (1, 384)


def test_many_parts_are_merged_and_no_vector_is_lost(tmp_path, monkeypatch):
    names = [f"entity {i}" for i in range(6)]
    for n in names:  # one writer each: six parts
        EV.VectorCache(MODEL, tmp_path).get([n])
    folder = tmp_path / EV.model_key(MODEL)
    assert len(list(folder.glob("part-*.parquet"))) == 6
    monkeypatch.setattr(EV, "MERGE_PARTS", 3)
    reader = EV.VectorCache(MODEL, tmp_path)
    got = reader.get(names + ["entity new"])  # a miss reads the parts, merges them, then encodes the new name
    assert reader.encoded == 1
    assert [p.name.split("-")[0] for p in folder.glob("*.parquet")].count("merged") == 1
    assert len(list(folder.glob("*.parquet"))) == 2  # the merged part and the new name's part
    again = EV.VectorCache(MODEL, tmp_path)
    assert np.array_equal(again.get(names + ["entity new"]), got) and again.encoded == 0


def test_a_local_model_folder_has_no_disk_cache(tmp_path):
    assert EV.model_key("/some/fine-tuned/model") is None
    assert EV.VectorCache("/some/fine-tuned/model", tmp_path).dir is None


def test_a_lazy_index_holds_no_entity_table_and_needs_its_kg(kg, tmp_path):
    meta = build_index(kg, tmp_path / "index", model=MODEL, entities="lazy")
    assert meta["entities"] == "lazy" and json.loads((tmp_path / "index" / "meta.json").read_text()) == meta
    assert not (tmp_path / "index" / "entities.parquet").exists() and has_index(tmp_path / "index")
    with pytest.raises(ValueError, match="holds no entity vectors.*kg="):
        EmbeddingIndex.load(tmp_path / "index", MODEL)
    lazy = EmbeddingIndex.load(tmp_path / "index", MODEL, kg)
    build_index(kg, tmp_path / "eager", model=MODEL, entities="all")
    eager = EmbeddingIndex.load(tmp_path / "eager", MODEL)
    assert np.array_equal(lazy.relation_vectors, eager.relation_vectors)
    q = lazy.encode(["the director of Heat"])[0]
    assert np.array_equal(lazy.search_entities(q, 3)[0], eager.search_entities(q, 3)[0])
    build_index(kg, tmp_path / "eager", model=MODEL, entities="lazy")  # rebuilt lazy: the old table goes
    assert not (tmp_path / "eager" / "entities.parquet").exists()


def test_the_index_stage_reads_relation_names_alone_for_a_lazy_index(kg, tmp_path):
    """``RelationNames`` (what the index stage reads for a lazy index without triples) holds the relation names of
    the KG's DuckDB file, no triple loaded: the same relation vectors file, byte for byte, as from the whole
    in-memory store."""
    from kgrag.index.build import RelationNames

    src = RelationNames(kg.path)
    assert list(src.relation_names) == list(kg.relation_names)
    build_index(src, tmp_path / "names", model=MODEL, entities="lazy")
    build_index(kg, tmp_path / "store", model=MODEL, entities="lazy")
    for f in ("relations.parquet", "meta.json"):
        assert (tmp_path / "names" / f).read_bytes() == (tmp_path / "store" / f).read_bytes(), f


@pytest.mark.parametrize("method", RETRIEVERS.names())
def test_every_retriever_reads_a_lazy_index_as_the_eager_one(method, movies, tmp_path):
    """Agreement: the same output bytes from the index stage's eager matrix and from names encoded when first read
    (in other batches, so other last float bits: below what every ranking rounds to)."""
    names = [entity_text(n) for n in movies.names(np.arange(movies.num_entities))]
    rel = encode([str(r).replace("_", " ") for r in movies.relation_names], model=MODEL)
    eager = EmbeddingIndex(model=MODEL, entity_vectors=encode(names, model=MODEL), relation_vectors=rel)
    lazy = EmbeddingIndex(model=MODEL, entity_vectors=EV.EntityVectors(movies, EV.VectorCache(MODEL, tmp_path)),
                          relation_vectors=rel)
    params = RetrieveParams(method=method)
    qs = [_q(movies, "who directed the movies starred by [Al Pacino]", "Al Pacino", ["Michael Mann"]),
          _q(movies, "which films did [Michael Mann] direct", "Michael Mann", ["Heat"])]
    a = retrieve_rows(questions=qs, kg=movies, index=eager, params=params)
    b = retrieve_rows(questions=qs, kg=movies, index=lazy, params=params)
    assert _output_bytes(a, tmp_path / "a.parquet") == _output_bytes(b, tmp_path / "b.parquet")
