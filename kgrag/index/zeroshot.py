"""Zero-shot relation-path scoring: which relation sequence a question asks for, read from the question and the KG.

Without labelled questions, the ``relpath`` retriever must still rank relation sequences of every length
1..``max_hops`` so that the right length wins. One cosine of the question against the sequence's relation names
cannot: a sequence that repeats the right relation ("starred actors, starred actors, starred actors") scores as
high as the right one-hop sequence, and longer sequences collect more words that resemble the question. This
module scores a sequence with a few features that each say one thing about how the question could have been
written from it (:func:`features`), combined linearly (:class:`Weights`):

``ll``
    Log-likelihood of the question's content words under the sequence (IBM model 1, Brown et al. 1993): each word
    is written by one of the sequence's *units*, each unit equally likely, or by a background; a word's
    likelihood under a unit is ``exp((sim - 1) / T)``, ``sim`` the cosine of the word and the unit's phrase
    (the index's sentence transformer), raised to ``STEM_SIM`` when they share a 4-letter stem. An extra
    unit no word mentions dilutes the words the others explain, so a sequence is as long as the question asks.
``support``
    ``sum(min(0, best word similarity of a unit - SUPPORT))``: every unit must be mentioned by some word (with a
    lexicon, a word labelled questions used for the unit, ``LEXICON_SUPPORT``, supports it too: "where is the
    club" says "is in country" in WorldCup's wording, not in MiniLM's).
``count``
    The mention count of each relation against the sequence's steps of that relation: words whose most similar
    relation is ``r`` (similarity at least ``MENTION``) mention ``r``, those on different words of a phrase once
    ("notable ... types"; :func:`_mentions`); a sequence loses one per mention
    it lacks or has too many of ``r``, a step counting one mention and a co-step two ("films directed by the
    director of X"), or one or two with a sharing word in the question ("films that share actors", "directed by the
    same director").
``cue``
    -1 when the question has a *sharing word* (``CUES``: same, share, also, together, co-, both) and the sequence
    has no co-step; -0.5 when its co-steps walk no relation mentioned within two words of a sharing word
    ("films that *share actors* ... directed by": the co-step is on "starred actors").
``type``
    Cosine of the question's answer phrase (its wh-word and the next word: "which films", "who", "what
    language") with the mean name vector of the sequence's end entities (the index's entity vectors): the
    answer type, read from the entities the sequence reaches, not from any type list. With ``type_nouns`` (WordNet
    on), a ``TYPE_NOUN`` share of it is the cosine with the noun that names the last step's range instead
    ("which films" against "movie" or "actor": :func:`kgrag.index.answer_types.noun_types`).
``length`` / ``ends``
    The number of steps, and log of the number of end entities.
``order``
    Whether the sequence walks its units in the order the question says them: English attaches the first step
    to the topic ("films *starred by* X") and the last to the wh-word ("*who directed* ..."). Each unit's word
    (the one most likely to have written it) is placed on the axis from the topic's mention to the wh-word
    (distance to the topic minus distance to the wh-word; the topic alone without a wh-word); the feature is the
    mean sign over unit pairs, +1 when every later step's word lies further along (walked in the said order),
    -1 when reversed: "who directed the movies starred by X" is "starred actors, then directed by", not the
    reverse, though both use the same words. 0 for one unit, no topic mention, or words that tie; then taken
    relative to the mean over the candidates walking the same relations in other orders (0 for a sequence with
    no such sibling), so that it only decides between orders.

A *unit* is one step, or a *co-step*: a relation walked forward then back (or back then forward), which reaches
the entities that share a neighbour with the start ("films that share actors with X", "co-directed with").
A word's similarity to it is the larger of its similarity to the relation's phrase and to ``"same <relation>"``. A relation's phrase is its name's last segment (Freebase
``__film__film__genre`` -> "genre"), split at ``_``, ``.``, ``/`` and camel case; a relation with aliases (a relation
label table's other names, ``relation_aliases``) is said by any of their phrases too (:func:`relation_phrases`).

Everything here comes from the KG (relation names, entity names) and generic English (stop words, the
sharing words, wh-words); nothing names a dataset's relations or templates. With labelled questions,
:class:`Lexicon` adds what they say about each unit's wording (compositional: a sequence no labelled question
had is scored from its units).

References
----------
Brown et al., "The Mathematics of Statistical Machine Translation: Parameter Estimation", Computational
Linguistics 19(2), 1993 (model 1: word-to-unit alignment likelihood). Luo et al., "Reasoning on Graphs", ICLR 2024
(relation paths as plans). Yih et al., "Semantic Parsing via Staged Query Graph Generation", ACL 2015 (lexical
relation matching with answer-type constraints).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Callable, Iterable, Sequence

import numpy as np

from kgrag import schema as S

if TYPE_CHECKING:
    from kgrag.index.wordnet import Matcher

Step = tuple[int, bool]  # (relation id, walked along the edge's direction)
Encode = Callable[[list[str]], np.ndarray]

#: generic English words that carry no relation (never a mention)
STOP = frozenset(
    "a an the of in on at to for from by with and or is are was were be been do does did what which who whom "
    "whose when where how that this these those it its as than then there their they them he she his her about "
    "into over under other any some all has have had can could would should will s name x".split())
#: generic English words that ask for what shares a neighbour with the topic: the sign of a co-step
CUES = frozenset("same share shares shared sharing also together co both".split())
#: cosine of a word and a relation phrase that share a 4-letter stem ("directed" / "director")
STEM_SIM = 0.8
#: IBM-1 temperature of the word-unit similarity, and the background's weight
TEMPERATURE = 0.1
BACKGROUND = 0.2
BACKGROUND_SIM = 0.3
#: a unit's best word similarity below this costs (support); a word this similar to a relation mentions it
SUPPORT = 0.6
MENTION = 0.65
#: a lexicon share at least this large supports a unit as a word this similar would (labelled questions used it)
LEXICON_SUPPORT = 0.05
#: WordNet links (:mod:`kgrag.index.wordnet`, off unless ``features`` gets a matcher): the link kinds that count,
#: the similarity a linked word-phrase pair is raised to (as a shared stem's), and the senses read per word
WORDNET_KINDS = ("synonym", "derivation", "hypernym", "sibling")
WORDNET_SIM = 0.8
WORDNET_SENSES = 1
WORDNET_HEADS = True  # a compound hypernym or synonym links its head noun too ("club" -> "baseball_team" -> "team")
WORDNET_CHAINS = True  # a link to a derivation of the other word links it ("screenwriter" -> "writer" ~ "written")
#: share of the ``type`` feature read from the answer type's noun where ``features`` gets ``type_nouns``
TYPE_NOUN = 0.5
WORD = re.compile(r"[A-Za-z0-9]+")
WH = re.compile(r"\b(what|which|who|whom|when|where|whose|how many|name)\b(\s+\w+)?", re.I)
FEATURES = ("ll", "support", "count", "cue", "type", "length", "ends", "order")


@dataclass(frozen=True)
class Weights:
    """Weights of :data:`FEATURES` (chosen on the dev parts of MetaQA, WC2014 and PathQuestion-Large by
    ``bench/planner_dev.py``; docs/retrieval.md "The relation-path planner")."""

    ll: float = 8.068
    support: float = 89.909
    count: float = 4.419
    cue: float = 58.584
    type: float = 27.17
    length: float = 0.175
    ends: float = -2.576
    order: float = 2.0

    def vector(self) -> np.ndarray:
        return np.asarray([getattr(self, f) for f in FEATURES], dtype=np.float64)


def relation_phrase(name: str) -> str:
    """A relation name as words: its last segment ("__people__person__nationality" -> "nationality"), split at
    ``_``, ``.``, ``/`` and camel case ("plays_in_club" -> "plays in club", "birthPlace" -> "birth Place")."""
    segs = [s for s in re.split(r"__|\.|/|#|:", str(name)) if s]
    last = segs[-1] if segs else str(name)
    last = re.sub(r"([a-z])([A-Z])", r"\1 \2", last)
    words = [w for w in re.split(r"[^0-9A-Za-z]+", last) if w]
    return " ".join(words) if words else str(name)


def mask(text: str, names: Iterable[str]) -> str:
    """``text`` with every topic name (case-insensitive, longest first) written ``X``, MetaQA's brackets removed
    and underscores read as spaces (so that ``Alan_PULIDO`` and "Alan PULIDO" mask alike)."""
    text = text.replace("[", "").replace("]", "")
    for name in sorted({str(n) for n in names if n}, key=len, reverse=True):
        for form in dict.fromkeys((name, name.replace("_", " "))):
            text = re.sub(re.escape(form), " X ", text, flags=re.IGNORECASE)
    return re.sub(r"\s+", " ", text).strip()


def content_words(masked: str) -> tuple[list[str], bool]:
    """The masked question's content words (lower case; not ``STOP``, not a sharing word) and whether it has a
    sharing word (``CUES``)."""
    words = [w.lower() for w in WORD.findall(masked)]
    return [w for w in words if w not in STOP and w not in CUES], any(w in CUES for w in words)


def answer_phrase(masked: str) -> str | None:
    """The question's wh-word with the words that name what it asks for: after the wh-word, up to two stop words
    are skipped ("what is the genre" -> "what genre") and up to three content words kept ("which professional
    football team", "what films"); "who" / "when" / "where" alone; None when the question has no wh-word."""
    m = WH.search(masked)
    if not m:
        return None
    w = m.group(1).lower()
    if w in ("who", "whom", "when", "where"):
        return w
    rest = [x.lower() for x in WORD.findall(masked[m.end(1):])]
    i = 0
    while i < len(rest) and i < 2 and rest[i] in STOP:
        i += 1
    head = []
    for x in rest[i:]:
        if x in STOP or x in CUES or len(head) == 3:
            break
        head.append(x)
    return " ".join([w, *head])


def entity_text(name: str) -> str:
    """An entity name as the index embeds it: underscores read as spaces ("Tigres_UANL" -> "Tigres UANL")."""
    return str(name).replace("_", " ")


def units(seq: Sequence[Step]) -> list[tuple[str, int, bool]]:
    """The units of a sequence: ``("one", r, fwd)`` per step, ``("co", r, fwd)`` for a relation walked one way
    then back (two steps); a step with a negative relation id separates two walks and is no unit."""
    out, i = [], 0
    while i < len(seq):
        r, f = seq[i]
        if r < 0:  # a separator between two walks scored as one sequence (relpath's pairs): no unit
            i += 1
            continue
        if i + 1 < len(seq) and seq[i + 1][0] == r and seq[i + 1][1] != f:
            out.append(("co", int(r), bool(f)))
            i += 2
        else:
            out.append(("one", int(r), bool(f)))
            i += 1
    return out


def _stem(w: str) -> str:
    return w.lower()[:4]


def name_stems(name: str) -> set[str]:
    """The 4-letter stems of every word of a relation name, all its segments ("__people__person__nationality"
    -> peop, pers, nati; "placeOfBirth" -> plac, birt): what a question echoes when it reuses the name."""
    parts = re.split(r"[^0-9A-Za-z]+|(?<=[a-z])(?=[A-Z])", str(name))
    return {_stem(w) for w in parts if len(w) >= 4}


def echoes(question: str, topic_names: Iterable[str], relation_names: Iterable[str]) -> bool:
    """Whether a content word of the question (topics masked) shares a 4-letter stem with a word of one of
    ``relation_names`` (the relations of the question's gold path). A question that echoes none is in a dev
    set's *paraphrase subset*: there the planner must read the wording, not match the KG's names."""
    stems = set().union(*(name_stems(n) for n in relation_names)) if relation_names else set()
    words, _ = content_words(mask(question, topic_names))
    return any(_stem(w) in stems for w in words if len(w) >= 4)


@dataclass
class Lexicon:
    """What labelled questions say about the wording of each unit: word counts per unit key
    (kind, relation name, forward), from questions whose relation sequence is known. ``prob(word, key)`` is the
    share of the unit's words that are ``word``; 0 for a unit no labelled question had (the zero-shot score
    alone then decides)."""

    counts: dict[tuple[str, str, bool], dict[str, float]] = field(default_factory=dict)

    def add(self, words: Sequence[str], keys: Sequence[tuple[str, str, bool]]) -> None:
        """Count ``words`` for each unit key of one labelled question (each word shared among the units)."""
        if not keys:
            return
        for k in keys:
            d = self.counts.setdefault(k, {})
            for w in words:
                d[w] = d.get(w, 0.0) + 1.0 / len(keys)

    def prob(self, word: str, key: tuple[str, str, bool]) -> float:
        """Share of unit ``key``'s counted words that are ``word`` (0 for a unit never counted)."""
        d = self.counts.get(key)
        if not d:
            return 0.0
        return d.get(word, 0.0) / sum(d.values())

    def to_rows(self) -> list[dict]:
        """Rows of ``schema.LEXICON``."""
        return [{S.UNIT_KIND: k[0], S.RELATION: k[1], S.FORWARD: k[2], S.WORD: w, S.COUNT: c}
                for k, d in sorted(self.counts.items()) for w, c in sorted(d.items())]

    @staticmethod
    def from_rows(rows: Iterable[dict]) -> "Lexicon":
        """The lexicon of ``schema.LEXICON`` rows."""
        lex = Lexicon()
        for r in rows:
            key = (r[S.UNIT_KIND], r[S.RELATION], bool(r[S.FORWARD]))
            lex.counts.setdefault(key, {})[r[S.WORD]] = float(r[S.COUNT])
        return lex


class PhraseVectors:
    """Unit vectors of short texts (words, relation phrases), each encoded once per process."""

    def __init__(self, encode: Encode) -> None:
        self._encode = encode
        self._vecs: dict[str, np.ndarray] = {}

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        todo = [t for t in dict.fromkeys(texts) if t not in self._vecs]
        if todo:
            for t, v in zip(todo, self._encode(list(todo))):
                self._vecs[t] = np.asarray(v, dtype=np.float32)
        if not texts:
            return np.zeros((0, 1), dtype=np.float32)
        return np.stack([self._vecs[t] for t in texts])


def wordnet_matcher(kinds: Iterable[str] = WORDNET_KINDS, sim: float = WORDNET_SIM,
                    senses: int = WORDNET_SENSES, hyper_pos: Iterable[str] = ("noun",),
                    heads: bool = WORDNET_HEADS, chains: bool = WORDNET_CHAINS) -> "Matcher":
    """The :class:`kgrag.index.wordnet.Matcher` for :func:`features` (WordNet's files from
    :func:`kgrag.index.wordnet.find`; FileNotFoundError naming where it looked when they are missing). The planner's
    stop words and sharing words are not matched in a relation phrase."""
    from kgrag.index import wordnet as W

    wn = W.load(None, int(senses), tuple(sorted(hyper_pos)), bool(heads), bool(chains))
    return W.Matcher(wn, frozenset(kinds), float(sim), stop=STOP | CUES)


@lru_cache(maxsize=1)
def default_wordnet_matcher() -> "Matcher":
    """:func:`wordnet_matcher` with its defaults, once per process (its links are cached across questions): the
    matcher of a plan fitted with ``relplan.wordnet``."""
    return wordnet_matcher()


def _similarity(words: list[str], phrases: list[str], vecs: PhraseVectors, wordnet: "Matcher | None" = None
                ) -> np.ndarray:
    """Cosine of each word with each phrase, raised to ``STEM_SIM`` where they share a 4-letter stem, and to
    ``wordnet.sim`` where WordNet links the word to a word of the phrase (:class:`kgrag.index.wordnet.Matcher`)."""
    s = vecs(words).astype(np.float64) @ vecs(phrases).astype(np.float64).T
    stems = [{_stem(w) for w in p.split() if len(w) >= 3} for p in phrases]
    for i, w in enumerate(words):
        if len(w) >= 3:
            for j, st in enumerate(stems):
                if _stem(w) in st and s[i, j] < STEM_SIM:
                    s[i, j] = STEM_SIM
    if wordnet is not None:
        for i, w in enumerate(words):
            if len(w) >= 3:
                for j, p in enumerate(phrases):
                    if s[i, j] < wordnet.sim and wordnet.linked(w, p):
                        s[i, j] = wordnet.sim
    return s


def relation_phrases(r: int, relation_names: Sequence[str], aliases: Sequence | None = None) -> list[str]:
    """Every phrase relation ``r`` may be said by: its name's (:func:`relation_phrase`), then each of its aliases
    (a relation label table's other names, e.g. Wikidata's "wife, husband, married to" for P26), read alike."""
    out = [relation_phrase(relation_names[r])]
    extra = aliases[r] if aliases is not None and r < len(aliases) else None
    for a in extra if extra is not None else ():
        ph = relation_phrase(a) if a else ""
        if ph and ph not in out:
            out.append(ph)
    return out


def _relation_similarity(words: list[str], rels: Sequence[int], relation_names: Sequence[str], vecs: PhraseVectors,
                         wordnet: "Matcher | None" = None, aliases: Sequence | None = None, prefix: str = ""
                         ) -> np.ndarray:
    """:func:`_similarity` of each word with each relation of ``rels``: the largest over the relation's phrases
    (:func:`relation_phrases`; ``prefix`` before each, e.g. "same ")."""
    phrases = [[prefix + p for p in relation_phrases(r, relation_names, aliases)] for r in rels]
    if all(len(p) == 1 for p in phrases):
        return _similarity(words, [p[0] for p in phrases], vecs, wordnet)
    flat = [p for ps in phrases for p in ps]
    s = _similarity(words, flat, vecs, wordnet)
    at = np.cumsum([0] + [len(p) for p in phrases])
    return np.stack([s[:, a:b].max(1) for a, b in zip(at[:-1], at[1:])], axis=1)


def _mentions(words: list[str], rels: list[int], best: np.ndarray, strong: np.ndarray,
              relation_names: Sequence[str], vecs: PhraseVectors, wordnet: "Matcher | None" = None) -> dict[int, int]:
    """How many times the question says each relation: its words whose most similar relation it is (``best``,
    ``strong``) are shared among the words of the relation's phrase (each word to the phrase word it is most
    similar to); the count is the largest number on one phrase word, so that "notable ... types" or "year ...
    released" say "notable types" / "release year" once, and "director ... directed" say "directed by" twice."""
    out = {}
    for j, r in enumerate(rels):
        mine = [w for w, b, ok in zip(words, best, strong) if b == j and ok]
        parts = relation_phrase(relation_names[r]).split()
        if len(mine) < 2 or len(parts) < 2:
            out[r] = len(mine)
            continue
        pick = _similarity(mine, parts, vecs, wordnet).argmax(1)
        out[r] = int(np.bincount(pick, minlength=len(parts)).max())
    return out


def _near_cue(masked: str, words: list[str], relation_of: list[int | None], window: int = 2) -> set[int]:
    """Relations mentioned within ``window`` words of a sharing word ("films that *share actors*", "the *same
    director*", "*co-directed*", "acted *together*"): the relation a co-step should walk there and back."""
    tokens = [w.lower() for w in WORD.findall(masked)]
    cues = [i for i, w in enumerate(tokens) if w in CUES]
    rel = dict(zip(words, relation_of))
    return {rel[w] for i, w in enumerate(tokens) if rel.get(w) is not None
            and any(abs(i - c) <= window for c in cues)}


def _axis(masked: str) -> list[float | None]:
    """Each content word's place on the axis from the topic's mention (``X``) to the wh-word: its distance to
    the nearest ``X`` minus its distance to the wh-word (to ``X`` alone without a wh-word), in tokens; None for
    every word when the question does not mention its topic."""
    tokens = [w.lower() for w in WORD.findall(masked)]
    xs = [i for i, w in enumerate(tokens) if w == "x"]
    if not xs:
        return [None] * sum(1 for w in tokens if w not in STOP and w not in CUES)
    m = WH.search(masked)
    wh = len(WORD.findall(masked[:m.start(1)])) if m else None
    return [float(min(abs(i - x) for x in xs) - (abs(i - wh) if wh is not None else 0))
            for i, w in enumerate(tokens) if w not in STOP and w not in CUES]


def features(*, question: str, topic_names: Sequence[str], seqs: Sequence[Sequence[Step]],
             ends: Sequence[np.ndarray], relation_names: Sequence[str], vecs: PhraseVectors,
             entity_vectors: Callable[[np.ndarray], np.ndarray] | None = None,
             lexicon: Lexicon | None = None, lexicon_weight: float = 1.0,
             wordnet: "Matcher | None" = None, relation_aliases: Sequence | None = None,
             end_types: Callable[[Sequence[Step]], np.ndarray | None] | None = None,
             type_nouns: Callable[[Sequence[Step]], np.ndarray | None] | None = None) -> np.ndarray:
    """The :data:`FEATURES` of each candidate sequence of one question: an array (sequences x features).

    Parameters
    ----------
    question, topic_names
        The question as asked and its topic entities' names (masked out: the words left are about relations).
    seqs, ends
        Candidate sequences (steps from the topics) and the entity ids each reaches.
    relation_names
        Names by relation id (the KG's).
    vecs
        The phrase encoder (the index's sentence transformer).
    entity_vectors
        Unit name vectors of entity ids (the index's), for ``type``; None: the feature is 0.
    lexicon, lexicon_weight
        Labelled questions' word counts per unit (:class:`Lexicon`), added to the zero-shot likelihood of a word
        under a unit with this weight.
    wordnet
        WordNet links between question words and relation-name words (:class:`kgrag.index.wordnet.Matcher`):
        a linked pair's similarity is raised to its ``sim`` everywhere a word meets a relation phrase; None
        (the default): off.
    relation_aliases
        Other names by relation id (a relation label table's aliases; None or an empty entry: none): a word's
        similarity to a relation is the largest over its name's phrase and its aliases' (:func:`relation_phrases`).
    end_types
        A sequence's answer-type vector (the mean of unit name vectors) read from its relations alone, e.g. from
        its last step's range sample (``relpath.answer_type: relation``), or None where it has none; when given,
        ``type`` reads it instead of the ends' names (``entity_vectors`` is then not read).
    type_nouns
        A sequence's answer-type noun (a unit vector; :func:`kgrag.index.answer_types.noun_types`) or None; where
        given, ``type`` is the ``TYPE_NOUN``-weighted mean of its cosine with the answer phrase and the cosine
        above (:func:`noun_type`).
    """
    n = len(seqs)
    out = np.zeros((n, len(FEATURES)), dtype=np.float64)
    if not n:
        return out
    out[:, 5] = [sum(1 for r, _ in s if r >= 0) for s in seqs]
    out[:, 6] = [math.log(max(len(e), 1)) for e in ends]
    masked = mask(question, topic_names)
    words, cue = content_words(masked)
    all_units = [units(s) for s in seqs]
    if words:
        keys = sorted({u for us in all_units for u in us})
        sim = _relation_similarity(words, [r for _, r, _ in keys], relation_names, vecs, wordnet, relation_aliases)
        co = [j for j, (k, _, _) in enumerate(keys) if k == "co"]
        if co:  # a co-step says its relation as a step does, or with a sharing word ("same <relation>")
            sim[:, co] = np.maximum(sim[:, co], _relation_similarity(
                words, [keys[j][1] for j in co], relation_names, vecs, wordnet, relation_aliases, prefix="same "))
        like = np.exp((sim - 1.0) / TEMPERATURE)
        support = sim.max(0)
        if lexicon is not None and lexicon.counts:
            for j, (k, r, f) in enumerate(keys):
                key = (k, str(relation_names[r]), f)
                probs = np.asarray([lexicon.prob(w, key) for w in words])
                like[:, j] += lexicon_weight * probs
                if probs.max(initial=0.0) >= LEXICON_SUPPORT:  # labelled questions used these words for it
                    support[j] = max(support[j], SUPPORT)
        background = BACKGROUND * math.exp((BACKGROUND_SIM - 1.0) / TEMPERATURE)
        col = {u: j for j, u in enumerate(keys)}
        rels = sorted({r for us in all_units for _, r, _ in us})
        rsim = _relation_similarity(words, rels, relation_names, vecs, wordnet, relation_aliases)
        best, top = rsim.argmax(1), rsim.max(1)
        mentions = _mentions(words, rels, best, top >= MENTION, relation_names, vecs, wordnet)
        near_cue = _near_cue(masked, words, [rels[b] if ok else None for b, ok in zip(best, top >= MENTION)])
        axis = _axis(masked)
        said = like.argmax(0)  # each unit's word: the one most likely to have written it
        place = [axis[said[j]] if support[j] >= SUPPORT else None for j in range(len(keys))]
        for i, us in enumerate(all_units):
            cols = [col[u] for u in us]
            out[i, 0] = float(np.log(like[:, cols].mean(1) + background).sum())
            out[i, 1] = float(np.minimum(0.0, support[cols] - SUPPORT).sum())
            low: dict[int, int] = {}
            high: dict[int, int] = {}
            for k, r, _ in us:  # a co-step is said once with a sharing word ("share actors"), else twice; with
                # one, twice is fine too ("directed by the same director", "actors who acted together")
                low[r] = low.get(r, 0) + (1 if k == "one" or cue else 2)
                high[r] = high.get(r, 0) + (1 if k == "one" else 2)
            out[i, 2] = -float(sum(max(0, low.get(r, 0) - mentions[r]) + max(0, mentions[r] - high.get(r, 0))
                                   for r in rels))
            cos = [r for k, r, _ in us if k == "co"]
            if cue and not cos:
                out[i, 3] = -1.0
            elif cue and not any(r in near_cue for r in cos):
                out[i, 3] = -0.5  # a co-step, but on another relation than the one the sharing word is next to
            at = [place[c] for c in cols]
            pairs = [(a, b) for k, a in enumerate(at) for b in at[k + 1:] if a is not None and b is not None]
            if pairs:
                out[i, 7] = float(np.mean([np.sign(b - a) for a, b in pairs]))
        _relative_order(out, seqs)
    _type_column(out, answer_phrase(masked), seqs, ends, vecs, entity_vectors, end_types, type_nouns)
    return out


def _relative_order(out: np.ndarray, seqs: Sequence[Sequence[Step]]) -> None:
    """The ``order`` column (7) of :func:`features` taken relative to the mean over the candidates walking the same
    relations (in place): it tells reversed sequences apart, and does not weigh a sequence against one of other
    relations (whose words the other features compare)."""
    groups: dict[tuple, list[int]] = {}
    for i, s in enumerate(seqs):
        groups.setdefault(tuple(sorted(r for r, _ in s if r >= 0)), []).append(i)
    for members in groups.values():
        out[members, 7] -= out[members, 7].mean()


def noun_type(out: np.ndarray, phrase: str | None, seqs: Sequence[Sequence[Step]], vecs: PhraseVectors,
              type_nouns: Callable[[Sequence[Step]], np.ndarray | None] | None) -> None:
    """Blend into the ``type`` column (4) of :func:`features` rows the cosine of the answer ``phrase`` with each
    sequence's answer-type noun (``type_nouns``), at ``TYPE_NOUN``: in place; nothing without a phrase or nouns,
    and a sequence with no noun keeps its column."""
    if phrase is None or type_nouns is None:
        return
    q = vecs([phrase])[0].astype(np.float64)
    for i, s in enumerate(seqs):
        v = type_nouns(s)
        if v is not None:
            out[i, 4] = (1.0 - TYPE_NOUN) * out[i, 4] + TYPE_NOUN * _type_cosine(np.asarray(v, np.float64), q)


def _type_column(out: np.ndarray, phrase: str | None, seqs: Sequence[Sequence[Step]], ends: Sequence[np.ndarray],
                 vecs: PhraseVectors, entity_vectors, end_types, type_nouns=None) -> None:
    """The ``type`` feature (column 4) of :func:`features`: the answer ``phrase`` against each sequence's
    ``end_types`` vector where given, else against its ends' names (``entity_vectors``); 0 without either; then
    the answer-type nouns blended in (:func:`noun_type`, where ``type_nouns`` is given)."""
    if phrase is not None and end_types is not None:
        q = vecs([phrase])[0].astype(np.float64)
        for i, s in enumerate(seqs):
            c = end_types(s)
            out[i, 4] = _type_cosine(np.asarray(c, dtype=np.float64), q) if c is not None else 0.0
    elif phrase is not None and entity_vectors is not None:
        _answer_type(out, vecs([phrase])[0].astype(np.float64), ends, entity_vectors)
    noun_type(out, phrase, seqs, vecs, type_nouns)


def _answer_type(out: np.ndarray, q: np.ndarray, ends: Sequence[np.ndarray],
                 entity_vectors: Callable[[np.ndarray], np.ndarray]) -> None:
    """The ``type`` feature (column 4) of each sequence: the cosine of the question's answer phrase ``q`` and the
    mean name vector of (up to 32 of) the entities it reaches."""
    picks = {}
    for i, e in enumerate(ends):
        e = np.asarray(e, dtype=np.int64)
        if len(e):
            picks[i] = e if len(e) <= 32 else e[np.linspace(0, len(e) - 1, 32).astype(np.int64)]
    if picks:  # one read for all candidates (a lazy index encodes the names it has not seen in one batch)
        at = np.cumsum([0] + [len(p) for p in picks.values()])
        allv = np.asarray(entity_vectors(np.concatenate(list(picks.values()))), dtype=np.float64)
        for (i, _), a, b in zip(picks.items(), at[:-1], at[1:]):
            out[i, 4] = _type_cosine(allv[a:b].mean(0), q)


def _type_cosine(c: np.ndarray, q: np.ndarray) -> float:
    """The ``type`` feature of a mean of unit name vectors ``c`` and the answer phrase's unit vector ``q``: their
    cosine (0 for a zero mean)."""
    norm = float(np.linalg.norm(c))
    return float(c @ q) / norm if norm > 0 else 0.0


def scores(feats: np.ndarray, weights: Weights) -> np.ndarray:
    """The linear score of each row of :func:`features`."""
    return feats @ weights.vector()
