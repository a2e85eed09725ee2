"""Entity linking: the topic entities of a question as people type it, without ``[brackets]``.

One rule for every KG store and for ingest (``data.link_entities``): the ``[bracketed]`` names when the question
has some; else the entities named by spans of consecutive words of the question, one entity per span and no two
spans overlapping, best first. The rule:

1. **Names.** A span names an entity when its *key* equals the key of the entity's name or of one of its aliases
   (``name_key``: lower-cased, underscores read as spaces, runs of white space as one space), so that
   ``Tigres UANL``, ``tigres_uanl`` and ``Tigres_UANL`` name the KG's ``Tigres_UANL``. Words are runs of letters
   and digits (an underscore separates words, so ``Real_Madrid_CF`` also holds the span ``Real_Madrid``).
   Aliases come from a label table (the ``triples`` loader's ``names`` file, the ``ntriples`` loader's other
   ``rdfs:label`` values): an entity named by an id links by any of its labels.
2. **Longest match.** A span inside a longer span that names an entity exactly as typed is dropped ("Francis"
   inside "Francis Edward Faragoh"; not "Hell" inside "in Hell", the film being "In Hell"); a stop word alone
   names an entity only as the KG writes it, capitalized ("It", "Up").
3. **A span's entity.** The entities a span names (homonyms, sharing a name) are ranked by ``(exact, fit,
   degree, -id)``: whether the span is one of the entity's names exactly as typed (case, underscores read as
   spaces); the relation fit (word stems shared by the names of the entity's relations and the question's words
   outside the span); the entity's degree (the popularity prior: the one with more edges); the smallest id.
4. **Topics.** Spans are ranked by their entity's ``(exact, fit, length, -id)`` (the span's length in
   characters) and taken best first; a span overlapping one already taken is skipped; after the first, a span
   is taken only when its entity is named exactly as typed and its relations fit the question (``fit >= 1``),
   so that a common word that happens to name an entity ("album", "director" as a tag) does not become a second
   topic ("which player in Tigres_UANL is from Mexico ?" links both).

The choices (the orders, the popularity prior after the fit, the second topics' condition, ``MAX_WORDS``) were
made on dev parts: ``python -m bench.linking --part dev`` (MetaQA dev files, the transfer KGs' dev halves, a
synthetic labelled KG of another seed; ``reports/bench/linking_dev.json``); ``reports/bench/linking.json``
reports the test parts, measured once.

The store supplies three functions, so that a KG in memory, one in DuckDB and the tables of an ingest link
alike:

- ``lookup(keys)``: {key: [(entity id, name or alias as the KG writes it), ...]} for the keys that name an entity;
- ``relations_of(ids)``: {entity id: relation names of its edges};
- ``degree_of(ids)``: the degrees of ``ids`` (edges either direction), aligned with them (optional: no prior).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, Sequence

import numpy as np

from kgrag import arrays

#: a word: letters and digits (``\w`` without the underscore, which KG names use for spaces)
WORD = re.compile(r"[^\W_]+", re.UNICODE)
BRACKETED = re.compile(r"\[([^\]]+)\]")
#: a span's text may end with one of these right after its last word ("Airplane!", "Mr.")
TRAILING = "!?.')"
#: a span's text may start with one of these right before its first word ("+1", "(500) Days of Summer")
LEADING = "+('\"#$"
#: longest span looked up, in words (MetaQA's longest names have 14; 12 missed one on dev)
MAX_WORDS = 16
#: words that say nothing about a relation (never a fit, never a name alone unless capitalized as the KG's)
STOP = frozenset(
    "a an the of in on at to for from by with and or is are was were be been do does did what which who whom "
    "whose when where how that this these those it its as also than then there their they them he she his her "
    "about into over under same other any some all has have had can could would should will".split())
#: characters of a word's stem ("director" and "directed" share "dire"); chosen on dev: `python -m bench.linking --split dev
#: --questions 1500 --seed 1` found 0.9987 at 4, 0.996 at 5
STEM = 4
#: the order spans are ranked by (step 4), chosen on dev (``bench/linking.py --part dev``): exact case first
#: (PathQuestion's "Believe" over "BELIEVE": transfer KGs' gold sets 0.9997 against 0.9991 with the fit first, MetaQA
#: alike); the length before the fit adds wrong second topics to MetaQA (0.973)
ORDER = "exact,fit,length"
#: the popularity prior among homonyms (step 3), after the relation fit; chosen on dev: with it the synthetic KG's
#: homonym questions drawn by popularity are found 0.976 against 0.714 without (0.918 against 0.939, one question
#: of 49, when drawn uniformly); MetaQA and the transfer KGs alike
PRIOR = True
#: what a span after the first needs to be a topic too (step 4), chosen on dev: "exact+fit" keeps every WC-C
#: second topic and adds none to MetaQA's questions (linked set = gold set: 0.9993, against 0.967 with "fit"
#: alone and 0.533 with "exact" alone)
SECOND = "exact+fit"

Lookup = Callable[[Sequence[str]], Mapping[str, Sequence[tuple[int, str]]]]
RelationsOf = Callable[[Sequence[int]], Mapping[int, Iterable[str]]]
DegreeOf = Callable[[Sequence[int]], Sequence[int]]


@dataclass(frozen=True)
class Link:
    """The linked topic entities (best first), how they were found (``bracketed`` | ``span`` | ``none``), the
    question's text of the linked spans joined by ", " (``span``) and one by one (``spans``, aligned with
    ``ids``), as the rule saw them."""

    ids: tuple[int, ...]
    how: str
    span: str = ""
    spans: tuple[str, ...] = ()


def _written(text: str) -> str:
    """``text`` with underscores read as spaces and runs of white space as one space (case kept)."""
    return " ".join(str(text).replace("_", " ").split())


def name_key(text: str) -> str:
    """The key a name and a span are matched by: ``_written`` lower-cased (``"Tigres_UANL"`` → ``"tigres uanl"``)."""
    return _written(text).lower()


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


def _key(exact: bool, fit: int, length: int, i: int, order: str) -> tuple:
    parts = {"exact": exact, "fit": fit, "length": length}
    return tuple(parts[p] for p in order.split(",")) + (-i,)


def _second_ok(exact: bool, fit: int, rule: str) -> bool:
    if rule == "all":
        return True
    if rule == "none":
        return False
    need = set(rule.split("+"))
    return ("exact" not in need or exact) and ("fit" not in need or fit >= 1)


def link(text: str, *, lookup: Lookup, relations_of: RelationsOf, degree_of: DegreeOf | None = None,
         among: np.ndarray | None = None, order: str | None = None, prior: bool | None = None,
         second: str | None = None) -> Link:
    """The topic entities of ``text``, best first (see the module docstring for the rule); only entities of
    ``among`` when given (a question's own graph: ``question_nodes``).

    ``[bracketed]`` names are resolved exactly as typed (a repeated name: its largest id, as ``ids_of``). A
    question naming no entity gets ``Link((), "none")``: the caller decides (``kgrag ask`` falls back to the
    nearest name by embedding; ingest keeps the question, unlinked, and validate marks it not answerable: a
    miss). ``order`` / ``prior`` / ``second`` override ``ORDER`` / ``PRIOR`` / ``SECOND`` (the dev bench compares
    them); without ``degree_of`` there is no prior.

    References
    ----------
    Longest-match dictionary linking with a relation-compatibility tie-break, as in the entity linkers of
    KBQA pipelines (e.g. Yih et al., "Semantic Parsing via Staged Query Graph Generation", ACL 2015, section 3.1,
    where linked entities are scored jointly with the relations of the query graph); the popularity prior
    among entities sharing a name as in the commonness / link-prior features of entity linkers (Milne & Witten,
    "Learning to Link with Wikipedia", CIKM 2008, section 3; here the KG degree stands in for link counts).
    """
    order, second = order or ORDER, second or SECOND
    prior = PRIOR if prior is None else prior
    if among is not None:
        keep = set(np.asarray(among, dtype=np.int64).tolist())
        inner = lookup

        def lookup(keys):  # noqa: F811 - the same lookup, restricted to the question's graph
            got = {k: [(i, n) for i, n in v if i in keep] for k, v in inner(keys).items()}
            return {k: v for k, v in got.items() if v}

    bracketed = BRACKETED.findall(text)
    if bracketed:
        found = lookup(sorted({name_key(b) for b in bracketed}))
        got = {b: max((i for i, n in found.get(name_key(b), ()) if n == b), default=None) for b in bracketed}
        ids = tuple(dict.fromkeys(got[b] for b in bracketed if got[b] is not None))
        names = tuple(dict.fromkeys(b for b in bracketed if got[b] is not None))
        return Link(ids, "bracketed" if ids else "none", ", ".join(bracketed), names)
    cand = [(s, e, t, name_key(t)) for s, e, t in spans(text) if len(t) >= 2]
    found = lookup(sorted({k for *_, k in cand}))
    hits = [c for c in cand if found.get(c[3])]
    # longest match: a span inside a longer span that names an entity exactly as typed is dropped ("Francis"
    # inside "Francis Edward Faragoh"; not "Hell" inside "in Hell", the film being "In Hell")
    typed = {t: _written(t) for _, _, t, _ in hits}
    exact = [(s, e) for s, e, t, k in hits if any(_written(n) == typed[t] for _, n in found[k])]
    hits = [h for h in hits if not any(s2 <= h[0] and h[1] <= e2 and (s2, e2) != h[:2] for s2, e2 in exact)]
    # a stop word alone names an entity only as typed in the KG, capitalized ("It", "Up")
    hits = [(s, e, t, k) for s, e, t, k in hits
            if k not in STOP or any(_written(n) == typed[t] and t[:1].isupper() for _, n in found[k])]
    if not hits:
        return Link((), "none")
    ids = sorted({i for *_, k in hits for i, _ in found[k]})
    rels = relations_of(ids)
    degree = dict(zip(ids, (int(d) for d in degree_of(ids)))) if degree_of is not None and prior else {}
    rel_stems = {i: _stems(w for r in rels.get(i, ()) for w in re.split(r"[^0-9A-Za-z]+", str(r))) for i in ids}
    scored = []  # (key, exact, fit, entity, span text, start, end): each span's best entity
    for s, e, t, k in hits:
        other = _stems(w.group() for w in WORD.finditer(text[:s] + " " + text[e:]))
        best = None  # the span's entity: (exact, fit, degree, -id), homonyms told apart by the prior after the fit
        for i in sorted({i for i, _ in found[k]}):
            ex = any(_written(n) == typed[t] for j, n in found[k] if j == i)
            fit = len(other & rel_stems[i])
            if best is None or (ex, fit, degree.get(i, 0), -i) > best[0]:
                best = ((ex, fit, degree.get(i, 0), -i), ex, fit, i)
        _, ex, fit, i = best
        scored.append((_key(ex, fit, e - s, i, order), ex, fit, i, t, s, e))
    scored.sort(key=lambda x: x[0], reverse=True)
    taken: list[tuple[int, str, int, int]] = []
    for _, ex, fit, i, t, s, e in scored:
        if any(s < e2 and s2 < e for _, _, s2, e2 in taken) or any(i == j for j, *_ in taken):
            continue
        if taken and not _second_ok(ex, fit, second):
            continue
        taken.append((i, t, s, e))
    return Link(tuple(i for i, *_ in taken), "span", ", ".join(t for _, t, *_ in taken),
                tuple(t for _, t, *_ in taken))


def names_by_key(entity_names: Sequence, aliases: Sequence | None = None) -> dict[str, list[tuple[int, str]]]:
    """{``name_key``: [(id, name or alias), ...]} of the names (and, when given, the aliases: a list of names
    per entity, or None) indexed by entity id: ``lookup``'s table. An entity appears once per distinct name."""
    out: dict[str, list[tuple[int, str]]] = {}
    for i, key, n in name_rows(range(len(entity_names)), entity_names, aliases):
        out.setdefault(key, []).append((i, n))
    return out


def name_rows(ids: Iterable[int], names: Iterable, aliases: Iterable | None = None) -> list[tuple[int, str, str]]:
    """(id, ``name_key``, name) of every name and alias of entities ``ids`` (nulls and repeats skipped), in
    id order: the rows of the DuckDB ``name_lookup`` table and of ``names_by_key``."""
    out = []
    als = aliases if aliases is not None else iter(lambda: None, 0)
    for i, n, extra in zip(ids, names, als):
        seen = set()
        for x in [n, *(extra if extra is not None else ())]:
            if x is None or str(x) in seen or not name_key(x):
                continue
            seen.add(str(x))
            out.append((int(i), name_key(x), str(x)))
    return out


class ArrayKG:
    """``lookup`` / ``relations_of`` / ``degree_of`` over plain arrays (ingest's tables): entity names by id, the
    triples' head / relation / tail ids, the relation names by id and, optionally, each entity's aliases."""

    def __init__(self, entity_names: Sequence, heads: np.ndarray, relations: np.ndarray, tails: np.ndarray,
                 relation_names: Sequence, aliases: Sequence | None = None) -> None:
        self._by_key = names_by_key(entity_names, aliases)
        h, t = np.asarray(heads, dtype=np.int64), np.asarray(tails, dtype=np.int64)
        nodes = np.concatenate([h, t])
        self._order = np.argsort(nodes, kind="stable")
        self._sorted = nodes[self._order]
        self._rel = np.concatenate([np.asarray(relations, dtype=np.int64)] * 2)
        self._relation_names = relation_names

    def lookup(self, keys: Sequence[str]) -> dict[str, list[tuple[int, str]]]:
        """{key: [(id, name)]} of the ``name_key`` keys naming an entity."""
        return {x: self._by_key[x] for x in keys if x in self._by_key}

    def relations_of(self, ids: Sequence[int]) -> dict[int, set[str]]:
        """{id: names of the relations of its edges, either direction}."""
        out = {}
        for i in ids:
            lo, hi = np.searchsorted(self._sorted, [i, i + 1])
            out[int(i)] = {str(self._relation_names[r]) for r in arrays.unique(self._rel[self._order[lo:hi]]).tolist()}
        return out

    def degree_of(self, ids: Sequence[int]) -> np.ndarray:
        """Undirected degree of each id (a self-loop counts twice, as ``KGStore.degree``)."""
        ids = np.asarray(ids, dtype=np.int64)
        return np.searchsorted(self._sorted, ids + 1) - np.searchsorted(self._sorted, ids)

    def link(self, text: str, **kw) -> Link:
        """``link`` with this KG's functions."""
        return link(text, lookup=self.lookup, relations_of=self.relations_of, degree_of=self.degree_of, **kw)


def link_questions(kg):
    """``data.link_entities``: the questions of a loader's tables (``kgrag.types.KGTables``) as people type them,
    linked by this module's rule. Each question's ``[brackets]`` are removed from its text and its topic ids
    replaced by the linked entities (a question with its own graph: among that graph's nodes); a question naming
    no entity keeps an empty topic list (it stays: validate marks it not answerable, a miss). Returns the new
    tables and counts: {"linked": n, "unlinked": n, "changed": n (the linked entities differ from the loader's
    topics), "topics": n (topic entities linked in all)}."""
    from dataclasses import replace

    import pyarrow as pa

    from kgrag import schema as S
    t = kg.triples
    ent = kg.entities
    arr = ArrayKG(ent[S.NAME].to_pylist(), t[S.HEAD].to_numpy(), t[S.RELATION].to_numpy(), t[S.TAIL].to_numpy(),
                  kg.relations[S.NAME].to_pylist(),
                  ent[S.ALIASES].to_pylist() if S.ALIASES in ent.column_names else None)
    graphs: dict = {}
    if S.GRAPH_ID in t.column_names:
        for g, h, tl in zip(t[S.GRAPH_ID].to_pylist(), t[S.HEAD].to_pylist(), t[S.TAIL].to_pylist()):
            if g is not None:
                graphs.setdefault(g, set()).update((h, tl))
    rows = kg.questions.to_pylist()
    counts = {"linked": 0, "unlinked": 0, "changed": 0, "topics": 0}
    for r in rows:
        text = BRACKETED.sub(lambda m: m.group(1), r[S.TEXT] or "")
        g = r.get(S.GRAPH_ID)
        among = None if g is None else np.asarray(sorted(graphs.get(g, ())), dtype=np.int64)
        got = arr.link(text, among=among)
        counts["linked" if got.ids else "unlinked"] += 1
        counts["topics"] += len(got.ids)
        counts["changed"] += bool(got.ids) and set(got.ids) != {i for i in (r[S.TOPIC_IDS] or []) if i is not None}
        r[S.TEXT], r[S.TOPIC_IDS] = text, list(got.ids)
    questions = pa.Table.from_pylist(rows, schema=kg.questions.schema)
    return replace(kg, questions=questions), counts
