"""Relation label tables (issue 54, item 2): a relation named by an id (Wikidata ``P26``, an opaque ``r17``) reads
through a ``relation<TAB>name`` table (``relation_labels``, the ``triples`` and ``ntriples`` loaders): its label is
the relations table's ``name`` (what the zero-shot relation-path planner reads), its id stays in ``key``, its other
names are ``aliases``; a relation the table does not name keeps its own; malformed lines are quarantined with file,
line and reason; table ids the KG lacks are counted."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kgrag import schema as S
from kgrag.index import zeroshot as Z
from kgrag.kg.loaders.ntriples import load_ntriples
from kgrag.kg.loaders.triples import load_triples

# who married whom, who was born where: relations by Wikidata property id, plus one the table does not name
KB = "Q1\tP26\tQ2\nQ1\tP19\tQ3\nQ2\tP19\tQ4\nQ1\tr17\tQ4\n"
LABELS = ("P26\tspouse\nP26\thusband\nP26\twife\nP19\tplace of birth\nP19\tbirthplace\n"
          "P999\tnot a relation of the KG\n"
          "P19\n"  # line 7: one field
          "\tno id\n"  # line 8: empty id
          "P26\t \n"  # line 9: empty name
          "P26\tspouse\textra\n")  # line 10: three fields
BAD = {7: "relation labels file: expected 2 tab-separated fields (relation, name), got 1",
       8: "relation labels file: empty relation field",
       9: "relation labels file: empty name field",
       10: "relation labels file: expected 2 tab-separated fields (relation, name), got 3"}
WD = "http://www.wikidata.org/prop/direct/"


def relations(kg) -> dict[str, tuple[str, list[str] | None]]:
    """Relation id (``key``) -> (name, aliases)."""
    return {r[S.KEY]: (r[S.NAME], r[S.ALIASES]) for r in kg.relations.to_pylist()}


def quarantine(kg) -> dict[int, str]:
    """Line -> reason of the label table's quarantine rows."""
    return {r[S.ROW]: r[S.REASON] for r in kg.quarantine.to_pylist() if Path(r[S.TABLE]).name == "rel.tsv"}


def write_ntriples(folder: Path) -> Path:
    f = folder / "kg.nt"
    f.write_text("".join(f"<http://www.wikidata.org/entity/{h}> <{WD if r[0] == 'P' else 'http://ex.org/'}{r}> "
                         f"<http://www.wikidata.org/entity/{t}> .\n"
                         for h, r, t in (line.split("\t") for line in KB.splitlines())))
    return f


@pytest.mark.parametrize("engine", ["python", "vectorized"])
def test_triples_loader_reads_relation_ids_through_the_label_table(tmp_path, engine):
    kb, table = tmp_path / "kg.tsv", tmp_path / "rel.tsv"
    kb.write_text(KB)
    table.write_text(LABELS)
    plain = load_triples(path=str(kb), engine=engine)
    kg = load_triples(path=str(kb), relation_labels=str(table), engine=engine)
    assert kg.relations.schema.equals(S.RELATIONS_LABELLED)
    assert relations(kg) == {"P19": ("place of birth", ["birthplace"]), "P26": ("spouse", ["husband", "wife"]),
                             "r17": ("r17", None)}  # r17: not in the table, keeps its own name
    # ids and triples are those of the KG without the table; only the names change
    assert kg.relations[S.RELATION_ID].equals(plain.relations[S.RELATION_ID]) and kg.triples.equals(plain.triples)
    assert kg.relations[S.KEY].to_pylist() == plain.relations[S.NAME].to_pylist()
    assert quarantine(kg) == BAD
    assert kg.stats["relation_labels_relations"] == 2 and kg.stats["relation_labels_aliases"] == 3
    assert kg.stats["relation_labels_unknown"] == 1 and kg.stats["relation_labels_shared"] == 0
    names = [Z.relation_phrase(n) for n in kg.relations[S.NAME].to_pylist()]
    assert names == ["place of birth", "spouse", "r17"]


def test_relation_label_table_and_entity_label_table_together_and_through_the_store(tmp_path):
    """Both tables on one KG; the planner's ``kg.relation_names`` (read from the DuckDB file) are the labels."""
    from kgrag.kg.duckdb_io import write_tables
    from kgrag.kg.store import KGStore
    from kgrag.kg.store_duckdb import DuckKGStore

    kb, table, names = tmp_path / "kg.tsv", tmp_path / "rel.tsv", tmp_path / "names.tsv"
    kb.write_text(KB)
    table.write_text(LABELS)
    names.write_text("Q1\tAda\nQ2\tBob\n")
    kg = load_triples(path=str(kb), names=str(names), relation_labels=str(table))
    assert kg.entities[S.NAME].to_pylist() == ["Ada", "Bob", "Q3", "Q4"]
    db = write_tables(tmp_path / "out", {"entities": kg.entities, "relations": kg.relations, "triples": kg.triples,
                                         "questions": kg.questions})
    for store in (KGStore(db), DuckKGStore(db)):
        assert [str(store.relation_names[i]) for i in range(3)] == ["place of birth", "spouse", "r17"]
        assert store.named_triples([0], [1], [1]) == [("Ada", "spouse", "Bob")]


def test_a_label_two_relations_would_share_keeps_names_unique(tmp_path):
    """Relations are looked up by name (a relation plan's sequences): a label another relation also has (or is
    named) is written with its id."""
    kb, table = tmp_path / "kg.tsv", tmp_path / "rel.tsv"
    kb.write_text("a\tP26\tb\na\tP451\tc\na\tspouse\td\n")
    table.write_text("P26\tspouse\nP451\tspouse\n")
    kg = load_triples(path=str(kb), relation_labels=str(table))
    assert relations(kg) == {"P26": ("spouse (P26)", None), "P451": ("spouse (P451)", None), "spouse": ("spouse", None)}
    assert kg.stats["relation_labels_shared"] == 2 and kg.quarantine.num_rows == 0


def test_ntriples_loader_reads_relation_ids_through_the_label_table(tmp_path):
    """Keyed by the predicate's local name (``P26``) or by its full IRI; an unnamed predicate keeps its local name."""
    f = write_ntriples(tmp_path)
    table = tmp_path / "rel.tsv"
    table.write_text(LABELS.replace("P19\tplace of birth", f"{WD}P19\tplace of birth"))
    kg = load_ntriples(path=str(f), relation_labels=str(table))
    assert relations(kg) == {"P19": ("place of birth", ["birthplace"]), "P26": ("spouse", ["husband", "wife"]),
                             "r17": ("r17", None)}
    assert quarantine(kg) == BAD
    assert kg.stats["relation_labels_unknown"] == 1 and kg.stats["statements"] == 4
    assert load_ntriples(path=str(f)).relations[S.NAME].to_pylist() == ["P19", "P26", "r17"]


def test_relation_labels_is_a_param_of_both_loaders_and_an_input_file():
    from kgrag.params import DataParams

    for loader in ("triples", "ntriples"):
        d = DataParams(dataset=loader, input="in", **{loader: {"path": "in/kg", "relation_labels": "in/rel.tsv"}})
        assert d.input_paths()[f"data.{loader}.relation_labels"] == "in/rel.tsv"
        with pytest.raises(ValueError, match="relation_labels"):
            DataParams(dataset=loader, input="in", **{loader: {"path": "in/kg", "relation_labels": "out/rel.tsv"}})


def test_the_zero_shot_planner_reads_the_labels(tmp_path, index):
    """Relations ``P26`` / ``P19`` labelled spouse / place of birth: the zero-shot planner's features and scores
    (default Weights) rank the one-step sequence of the relation the question names first. Read by their ids
    instead, the planner ranks the P26 step first for all three questions (it cannot tell the relations apart)."""
    kb, table = tmp_path / "kg.tsv", tmp_path / "rel.tsv"
    kb.write_text("Ada\tP26\tBob\nAda\tP19\tLondon\nBob\tP19\tParis\n")
    table.write_text("P26\tspouse\nP19\tplace of birth\n")
    kg = load_triples(path=str(kb), relation_labels=str(table))
    rel = {k: i for i, k in enumerate(kg.relations[S.KEY].to_pylist())}
    names = kg.relations[S.NAME].to_pylist()
    assert [names[rel["P26"]], names[rel["P19"]]] == ["spouse", "place of birth"]
    seqs = [((rel["P19"], True),), ((rel["P26"], True),), ((rel["P26"], True), (rel["P19"], True))]
    ends = [np.asarray([2]), np.asarray([1]), np.asarray([3])]
    vecs = Z.PhraseVectors(index.encode)
    for question, best in (("who is the spouse of Ada", 1), ("where was Ada born", 0),
                           ("where was the spouse of Ada born", 2)):
        feats = Z.features(question=question, topic_names=["Ada"], seqs=seqs, ends=ends, relation_names=names,
                           vecs=vecs)
        s = Z.scores(feats, Z.Weights())
        assert int(np.argmax(s)) == best and sorted(s)[-1] > sorted(s)[-2], (question, s.tolist())


# a US-geography KG whose relations are named after database columns (issue 54's held-out failure modes)
GEO = ("Texas\tborder\tOklahoma\nTexas\tborder\tNew Mexico\nTexas\tarea\t268596\nTexas\tdensity\t108\n"
       "Oklahoma\tarea\t69899\nOklahoma\tdensity\t57\n")
GEO_LABELS = "border\tborder\nborder\tnext to\nborder\tneighbour\narea\tarea\narea\tsize\narea\thow large\n"


@pytest.mark.parametrize("store", ["memory", "duckdb"])
def test_relpath_reads_a_relations_aliases_from_the_label_table(tmp_path, store):
    """A label table's other names of a relation are its aliases, and the zero-shot planner reads them as it reads
    the name (a word's similarity to a relation is its largest over the name and the aliases): through the triples
    loader, the DuckDB file and either store, relpath answers "how large is Texas" by ``area`` (by ``density``
    without the table: MiniLM puts "large" nearer to density) and "which states are next to Texas" by ``border``
    (by ``area`` without it). The same KG with no label table has no aliases (None)."""
    from kgrag.index.embed import EmbeddingIndex, encode
    from kgrag.kg.duckdb_io import write_tables
    from kgrag.kg.store import KGStore
    from kgrag.kg.store_duckdb import DuckKGStore
    from kgrag.retrieval.retrievers.relpath import RelPathParams, retrieve_relpath
    from kgrag.types import Question

    kb, table = tmp_path / "kg.tsv", tmp_path / "rel.tsv"
    kb.write_text(GEO)
    table.write_text(GEO_LABELS)
    open_store = KGStore if store == "memory" else DuckKGStore
    picked = {}
    for labelled in (True, False):
        kg = load_triples(path=str(kb), relation_labels=str(table) if labelled else None)
        db = write_tables(tmp_path / f"out-{labelled}", {"entities": kg.entities, "relations": kg.relations,
                                                         "triples": kg.triples, "questions": kg.questions})
        s = open_store(db)
        names = [str(s.relation_names[i]) for i in range(len(s.relation_names))]
        if labelled:
            assert {names[i]: s.relation_aliases[i] for i in range(len(names))} == {
                "border": ["next to", "neighbour"], "area": ["size", "how large"], "density": None}
        else:
            assert s.relation_aliases is None
        index = EmbeddingIndex(model="all-MiniLM-L6-v2", entity_vectors=np.zeros((0, 384), np.float32),
                               relation_vectors=encode(names, model="all-MiniLM-L6-v2"))
        params = RelPathParams(plan=None, paths=1, max_triples=100, max_hops=1, fallback=None, hub_budget=0)
        for text in ("how large is Texas", "which states are next to Texas"):
            q = Question(question_id="q", text=text, topic_ids=s.ids_of(["Texas"]))
            got = retrieve_relpath(question=q, query_vec=index.encode([text])[0], kg=s, index=index, params=params,
                                   hops=0, max_edges=0)
            rels = {str(s.relation_names[int(r)]) for r in got.relations}
            picked[(labelled, text)] = rels
    assert picked[(True, "how large is Texas")] == {"area"}
    assert picked[(True, "which states are next to Texas")] == {"border"}
    assert picked[(False, "how large is Texas")] == {"density"}
    assert picked[(False, "which states are next to Texas")] == {"area"}
