"""Entity linking: the topic entities of a question as people type it, without ``[brackets]``.

One rule for every KG store and for ingest (``data.link_entities``): a ``[bracketed]`` name when the question
has one; else every span of consecutive words that is an entity's name (case-insensitive), each span's entities
ranked by how well their relations fit the question's other words (the number of word stems shared by the
entity's relation names and the words outside the span), then by an exact-case match, the span's length and
the smallest id; a span inside a longer one that names an entity exactly as typed is dropped (longest match). The store supplies
two functions, so that a KG in memory, one in DuckDB and the tables of an ingest link alike:

- ``lookup(spans)``: {lower-cased span: [(entity id, name), ...]} for the spans that name an entity;
- ``relations_of(ids)``: {entity id: relation names of its edges}.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, Sequence

import numpy as np

WORD = re.compile(r"\w+", re.UNICODE)
BRACKETED = re.compile(r"\[([^\]]+)\]")
#: a span's text may end with one of these right after its last word ("Airplane!", "Mr.")
TRAILING = "!?.')"
#: a span's text may start with one of these right before its first word ("+1", "(500) Days of Summer")
LEADING = "+('\"#$"
#: longest span looked up, in words
MAX_WORDS = 12
#: words that say nothing about a relation (never a fit, never a name alone unless capitalized as the KG's)
STOP = frozenset(
    "a an the of in on at to for from by with and or is are was were be been do does did what which who whom "
    "whose when where how that this these those it its as also than then there their they them he she his her "
    "about into over under same other any some all has have had can could would should will".split())
#: characters of a word's stem ("director" and "directed" share "dire"); chosen on dev: `python bench/linking.py --split dev
#: --questions 1500 --seed 1` found 0.9987 at 4, 0.996 at 5
STEM = 4

Lookup = Callable[[Sequence[str]], Mapping[str, Sequence[tuple[int, str]]]]
RelationsOf = Callable[[Sequence[int]], Mapping[int, Iterable[str]]]


@dataclass(frozen=True)
class Link:
    """The linked topic entities (best first), how they were found (``bracketed`` | ``span`` | ``none``) and the
    question's text with the linked span, as the rule saw it."""

    ids: tuple[int, ...]
    how: str
    span: str = ""


def _stems(words: Iterable[str]) -> set[str]:
    return {w[:STEM] for w in (x.lower() for x in words) if len(w) >= 3 and w not in STOP}


def spans(text: str, max_words: int = MAX_WORDS) -> list[tuple[int, int, str]]:
    """Every span of 1..``max_words`` consecutive words of ``text``: (start, end, text), the text as typed
    between the first word's start and the last word's end (punctuation inside kept), plus the same span
    with up to three ``TRAILING`` characters after it and one ``LEADING`` character before it, when the text
    has them there."""
    words = [(m.start(), m.end()) for m in WORD.finditer(text)]
    out = []
    for i in range(len(words)):
        for j in range(i, min(len(words), i + max_words)):
            s, e = words[i][0], words[j][1]
            ends = [e] + [e + k for k in (1, 2, 3) if e + k <= len(text) and all(c in TRAILING for c in text[e:e + k])]
            starts = [s] + ([s - 1] if s > 0 and text[s - 1] in LEADING else [])
            out += [(a, b, text[a:b]) for a in starts for b in ends]
    return out


def link(text: str, *, lookup: Lookup, relations_of: RelationsOf, among: np.ndarray | None = None) -> Link:
    """The topic entities of ``text`` (see the module docstring for the rule); only entities of ``among`` when
    given (a question's own graph: ``question_nodes``).

    A ``[bracketed]`` name is resolved exactly as typed (a repeated name: its largest id, as ``ids_of``). A
    question naming no entity gets ``Link((), "none")``: the caller decides (``kgrag ask`` falls back to the
    nearest name by embedding; ingest keeps the question, unlinked, scored as a miss).

    References
    ----------
    Longest-match dictionary linking with a relation-compatibility tie-break, as in the entity linkers of
    KBQA pipelines (e.g. Yih et al., "Semantic Parsing via Staged Query Graph Generation", ACL 2015, section 3.1,
    where linked entities are scored jointly with the relations of the query graph).
    """
    if among is not None:
        keep = set(np.asarray(among, dtype=np.int64).tolist())
        inner = lookup

        def lookup(texts):  # noqa: F811 - the same lookup, restricted to the question's graph
            got = {t: [(i, n) for i, n in v if i in keep] for t, v in inner(texts).items()}
            return {t: v for t, v in got.items() if v}

    bracketed = BRACKETED.findall(text)
    if bracketed:
        found = lookup(sorted({b.lower() for b in bracketed}))
        got = {b: max((i for i, n in found.get(b.lower(), ()) if n == b), default=None) for b in bracketed}
        ids = tuple(dict.fromkeys(got[b] for b in bracketed if got[b] is not None))
        return Link(ids, "bracketed" if ids else "none", ", ".join(bracketed))
    cand = [(s, e, t) for s, e, t in spans(text) if len(t) >= 2]
    found = lookup(sorted({t.lower() for _, _, t in cand}))
    hits = [(s, e, t) for s, e, t in cand if found.get(t.lower())]
    # longest match: a span inside a longer span that names an entity exactly as typed is dropped ("Francis"
    # inside "Francis Edward Faragoh"; not "Hell" inside "in Hell", the film being "In Hell")
    exact = [(s, e) for s, e, t in hits if any(n == t for _, n in found[t.lower()])]
    hits = [(s, e, t) for s, e, t in hits if not any(s2 <= s and e <= e2 and (s2, e2) != (s, e) for s2, e2 in exact)]
    # a stop word alone names an entity only as typed in the KG, capitalized ("It", "Up")
    hits = [(s, e, t) for s, e, t in hits
            if t.lower() not in STOP or any(n == t and t[:1].isupper() for _, n in found[t.lower()])]
    if not hits:
        return Link((), "none")
    ids = sorted({i for _, _, t in hits for i, _ in found[t.lower()]})
    rels = relations_of(ids)
    best = None
    for s, e, t in hits:
        other = _stems(w.group() for w in WORD.finditer(text[:s] + " " + text[e:]))
        for i, name in found[t.lower()]:
            fit = len(other & _stems(w for r in rels.get(i, ()) for w in re.split(r"[^0-9A-Za-z]+", str(r))))
            key = (fit, name == t, e - s, -i)
            if best is None or key > best[0]:
                best = (key, i, t)
    return Link((best[1],), "span", best[2])


def names_by_lower(entity_names: Sequence) -> dict[str, list[tuple[int, str]]]:
    """{lower-cased name: [(id, name), ...]} of names indexed by entity id (``lookup``'s table)."""
    out: dict[str, list[tuple[int, str]]] = {}
    for i, n in enumerate(entity_names):
        if n is not None:
            out.setdefault(str(n).lower(), []).append((i, str(n)))
    return out


class ArrayKG:
    """``lookup`` / ``relations_of`` over plain arrays (ingest's tables): entity names by id, the triples' head /
    relation / tail ids and the relation names by id."""

    def __init__(self, entity_names: Sequence, heads: np.ndarray, relations: np.ndarray, tails: np.ndarray,
                 relation_names: Sequence) -> None:
        self._by_lower = names_by_lower(entity_names)
        h, t = np.asarray(heads, dtype=np.int64), np.asarray(tails, dtype=np.int64)
        nodes = np.concatenate([h, t])
        self._order = np.argsort(nodes, kind="stable")
        self._sorted = nodes[self._order]
        self._rel = np.concatenate([np.asarray(relations, dtype=np.int64)] * 2)
        self._relation_names = relation_names

    def lookup(self, texts: Sequence[str]) -> dict[str, list[tuple[int, str]]]:
        """{lower-cased text: [(id, name)]} of the texts naming an entity."""
        return {x: self._by_lower[x] for x in texts if x in self._by_lower}

    def relations_of(self, ids: Sequence[int]) -> dict[int, set[str]]:
        """{id: names of the relations of its edges, either direction}."""
        out = {}
        for i in ids:
            lo, hi = np.searchsorted(self._sorted, [i, i + 1])
            out[int(i)] = {str(self._relation_names[r]) for r in np.unique(self._rel[self._order[lo:hi]]).tolist()}
        return out

    def link(self, text: str) -> Link:
        """``link`` with this KG's functions."""
        return link(text, lookup=self.lookup, relations_of=self.relations_of)


def link_questions(kg):
    """``data.link_entities``: the questions of a loader's tables (``kgrag.types.KGTables``) as people type them,
    linked by this module's rule. Each question's ``[brackets]`` are removed from its text and its topic ids
    replaced by the linked entity (a question with its own graph: among that graph's nodes); a question naming
    no entity keeps an empty topic list (it stays, and is scored as the miss it is). Returns the new tables and
    counts: {"linked": n, "unlinked": n, "changed": n (linked to another entity than the loader's topic)}."""
    from dataclasses import replace

    import pyarrow as pa

    from kgrag import schema as S
    t = kg.triples
    arr = ArrayKG(kg.entities[S.NAME].to_pylist(), t[S.HEAD].to_numpy(), t[S.RELATION].to_numpy(),
                  t[S.TAIL].to_numpy(), kg.relations[S.NAME].to_pylist())
    graphs: dict = {}
    if S.GRAPH_ID in t.column_names:
        for g, h, tl in zip(t[S.GRAPH_ID].to_pylist(), t[S.HEAD].to_pylist(), t[S.TAIL].to_pylist()):
            if g is not None:
                graphs.setdefault(g, set()).update((h, tl))
    rows = kg.questions.to_pylist()
    counts = {"linked": 0, "unlinked": 0, "changed": 0}
    for r in rows:
        text = BRACKETED.sub(lambda m: m.group(1), r[S.TEXT] or "")
        g = r.get(S.GRAPH_ID)
        among = None if g is None else np.asarray(sorted(graphs.get(g, ())), dtype=np.int64)
        got = link(text, lookup=arr.lookup, relations_of=arr.relations_of, among=among)
        counts["linked" if got.ids else "unlinked"] += 1
        counts["changed"] += bool(got.ids) and list(got.ids) != [i for i in (r[S.TOPIC_IDS] or [])][:len(got.ids)]
        r[S.TEXT], r[S.TOPIC_IDS] = text, list(got.ids)
    questions = pa.Table.from_pylist(rows, schema=kg.questions.schema)
    return replace(kg, questions=questions), counts
