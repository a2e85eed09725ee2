"""N-Triples (RDF 1.1): one ``subject predicate object .`` statement per line.

A small line parser (no rdflib): IRIs ``<...>``, blank nodes ``_:x``, literals ``"..."`` with an optional
``@lang`` or ``^^<datatype>``, the string escapes ``\\t \\b \\n \\r \\f \\" \\' \\\\ \\uXXXX \\UXXXXXXXX``
(and ``\\u`` escapes in IRIs), comments and blank lines. Entities are the IRIs and blank nodes (keyed by
them) and the literal objects (keyed by their lexical form, language and datatype); an entity is named by
its ``rdfs:label`` (``label`` param; a plain or English label preferred) when it has one, else by the
IRI's local name (after the last ``#`` or ``/``), a literal by its lexical form; an entity's other labels (other
languages, more English ones) are its aliases (column ``aliases``), which entity linking matches too.
``rdfs:label`` statements name entities and are not KG edges. Relations are named by the predicate's local name,
or through an optional relation label table (``relation_labels``: ``relation<TAB>name`` lines keyed by that local
name, e.g. Wikidata's ``P26``, or by the predicate's full IRI; ``common.apply_relation_labels``).

A line the parser rejects (or not UTF-8) is quarantined with file, line and reason; a duplicate triple
is quarantined as ``"duplicate triple"``; a self-loop is kept and counted. Questions come from an optional
JSONL file (``questions``): topic entities and answers may be IRIs or names.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import NamedTuple

import pyarrow as pa

from pydantic import Field

from kgrag import schema as S
from kgrag.config.base import Strict
from kgrag.kg.loaders.common import (
    KGBuilder,
    LoaderInputError,
    apply_relation_labels,
    read_nonempty,
    tables_with_questions,
)
from kgrag.registry import LOADERS
from kgrag.types import KGTables

RDFS_LABEL = "http://www.w3.org/2000/01/rdf-schema#label"
_ESC = {"t": "\t", "b": "\b", "n": "\n", "r": "\r", "f": "\f", '"': '"', "'": "'", "\\": "\\"}
_LANG = re.compile(r"@([a-zA-Z]+(?:-[a-zA-Z0-9]+)*)")
_BNODE = re.compile(r"_:([A-Za-z0-9_](?:[A-Za-z0-9_.\-]*[A-Za-z0-9_\-])?)")
_IRI_BAD = set('<>"{}|^`\\ ') | {chr(c) for c in range(0x21)}


class NTriplesError(ValueError):
    """A line that is not a valid N-Triples statement."""


class Term(tuple):
    """(kind, value, lang, datatype); kind is ``iri``, ``bnode`` or ``literal``."""

    @property
    def kind(self) -> str:
        return self[0]

    @property
    def value(self) -> str:
        return self[1]


def _unicode(s: str, i: int, n: int) -> tuple[str, int]:
    hexs = s[i : i + n]
    if len(hexs) != n or not all(c in "0123456789abcdefABCDEF" for c in hexs):
        raise NTriplesError(f"bad \\{'u' if n == 4 else 'U'} escape at column {i}")
    cp = int(hexs, 16)
    if cp > 0x10FFFF or 0xD800 <= cp <= 0xDFFF:
        raise NTriplesError(f"escape \\{hexs} is not a Unicode scalar value")
    return chr(cp), i + n


class _Quoted(NamedTuple):
    """How the text between an IRI's ``<>`` or a literal's quotes is read: where it ends, its one-character
    escapes (besides ``\\uXXXX`` and ``\\UXXXXXXXX``, which both take), the characters it refuses, and the
    messages of a text that does not end, a bad escape (``{kind}``: the character after the backslash) and a
    refused character (``{c}``); ``{col}`` is the column."""

    close: str
    escapes: dict[str, str]
    refused: set[str]
    unterminated: str
    bad_escape: str
    bad_char: str


_IRI_TEXT = _Quoted(">", {}, _IRI_BAD, "unterminated IRI", "bad escape in IRI at column {col}",
                    "character {c!r} not allowed in an IRI (column {col})")
_LITERAL_TEXT = _Quoted('"', _ESC, {"\n", "\r"}, "unterminated string literal",
                        "bad escape \\{kind} in literal (column {col})", "raw line break in literal")


def _quoted(s: str, i: int, q: _Quoted) -> tuple[str, int]:
    """The text after the opening delimiter at ``i`` up to ``q.close``, escapes decoded, and the index past it."""
    close, escapes, refused = q.close, q.escapes, q.refused  # read once: the loop runs per character
    i += 1
    out = []
    while True:
        if i >= len(s):
            raise NTriplesError(q.unterminated)
        c = s[i]
        if c == close:
            return "".join(out), i + 1
        if c == "\\":
            kind = s[i + 1 : i + 2]
            if kind in escapes:
                out.append(escapes[kind])
                i += 2
            elif kind == "u":
                ch, i = _unicode(s, i + 2, 4)
                out.append(ch)
            elif kind == "U":
                ch, i = _unicode(s, i + 2, 8)
                out.append(ch)
            else:
                raise NTriplesError(q.bad_escape.format(kind=kind, col=i + 1))
            continue
        if c in refused:
            raise NTriplesError(q.bad_char.format(c=c, col=i + 1))
        out.append(c)
        i += 1


def _iri(s: str, i: int) -> tuple[Term, int]:
    assert s[i] == "<"
    iri, i = _quoted(s, i, _IRI_TEXT)
    if ":" not in iri:
        raise NTriplesError(f"IRI <{iri}> is not absolute")
    return Term(("iri", iri, "", "")), i


def _literal(s: str, i: int) -> tuple[Term, int]:
    assert s[i] == '"'
    text, i = _quoted(s, i, _LITERAL_TEXT)
    lang = dtype = ""
    if s.startswith("^^", i):
        if not s.startswith("<", i + 2):
            raise NTriplesError(f"expected <datatype IRI> after ^^ (column {i + 3})")
        dt, i = _iri(s, i + 2)
        dtype = dt.value
    elif s.startswith("@", i):
        m = _LANG.match(s, i)
        if not m:
            raise NTriplesError(f"bad language tag (column {i + 1})")
        lang, i = m.group(1).lower(), m.end()
    return Term(("literal", text, lang, dtype)), i


def _term(s: str, i: int, where: str, literal_ok: bool = False, bnode_ok: bool = True) -> tuple[Term, int]:
    if i >= len(s):
        raise NTriplesError(f"missing {where}")
    c = s[i]
    if c == "<":
        return _iri(s, i)
    if c == "_" and bnode_ok:
        m = _BNODE.match(s, i)
        if not m:
            raise NTriplesError(f"bad blank node label in {where} (column {i + 1})")
        return Term(("bnode", m.group(1), "", "")), m.end()
    if c == '"' and literal_ok:
        return _literal(s, i)
    raise NTriplesError(f"unexpected {c!r} where the {where} should start (column {i + 1})")


def _ws(s: str, i: int) -> int:
    while i < len(s) and s[i] in " \t":
        i += 1
    return i


def parse_line(line: str) -> tuple[Term, Term, Term] | None:
    """The statement on one N-Triples line, None for a blank or comment line; ``NTriplesError`` if invalid."""
    i = _ws(line, 0)
    if i >= len(line) or line[i] == "#":
        return None
    subj, i = _term(line, i, "subject")
    j = _ws(line, i)
    if j == i:
        raise NTriplesError(f"expected whitespace after the subject (column {i + 1})")
    pred, i = _term(line, j, "predicate", bnode_ok=False)
    j = _ws(line, i)
    if j == i:
        raise NTriplesError(f"expected whitespace after the predicate (column {i + 1})")
    obj, i = _term(line, j, "object", literal_ok=True)
    i = _ws(line, i)
    if i >= len(line) or line[i] != ".":
        raise NTriplesError(f"expected '.' at the end of the statement (column {i + 1})")
    i = _ws(line, i + 1)
    if i < len(line) and line[i] != "#":
        raise NTriplesError(f"unexpected text after '.' (column {i + 1})")
    return subj, pred, obj


def local_name(iri: str) -> str:
    """The part of an IRI after its last ``#`` or ``/`` (the whole IRI when that is empty)."""
    tail = re.split(r"[#/]", iri.rstrip("/#"))[-1]
    return tail or iri


def _key(t: Term) -> str:
    if t.kind == "iri":
        return t[1]
    if t.kind == "bnode":
        return "_:" + t[1]
    return '"' + t[1] + '"' + (("@" + t[2]) if t[2] else "") + (("^^" + t[3]) if t[3] else "")


class NTriplesParams(Strict):
    """Params of the ``ntriples`` loader (``data.ntriples`` in params.yaml)."""

    path: str = Field(..., description="N-Triples file (.nt; .gz = gzip)")
    questions: str | None = Field(None, description="questions JSONL file (none: no questions)")
    split: str = Field("test", description="split label given to the questions")
    label: str = Field(RDFS_LABEL, description="predicate IRI whose literal names its subject (not a KG edge)")
    relation_labels: str | None = Field(
        None, description="relation label table: relation<TAB>name lines (the predicate's local name, e.g. P26, or "
        "its IRI), several per relation allowed; the first names the relation (what the relation-path planner "
        "reads), the others are its aliases, which the planner reads as it reads the name "
        "(paraphrases: \"wife\", \"married to\" for spouse) (none: relations named by the predicate's local name)")


@LOADERS.register("ntriples", params=NTriplesParams)
def load_ntriples(
    *, path: str, questions: str | None = None, split: str = "test", label: str = RDFS_LABEL,
    relation_labels: str | None = None, sample: int = 0, seed: int = 0,
) -> KGTables:
    """An RDF N-Triples file (names from rdfs:label, else the IRI's local name), optional JSONL questions and an
    optional relation label table (``relation_labels``)."""
    src = Path(path)
    f = str(src)
    bad: list[tuple[str, int, str, str]] = []
    kg = KGBuilder()
    labels: dict[str, list[tuple[int, str]]] = {}  # key -> [(rank, label)] in file order; rank 0 = plain or English
    statements = 0
    predicates: dict[str, str] = {}  # predicate IRI -> its relation's name (the local name)
    for no, line in read_nonempty(src, bad, "N-Triples file"):
        try:
            st = parse_line(line)
        except NTriplesError as e:
            bad.append((f, no, f"not N-Triples: {e}", line[:200]))
            continue
        if st is None:
            continue
        statements += 1
        s, p, o = st
        if p.value == label:
            if o.kind != "literal":
                bad.append((f, no, "label object is not a literal", line[:200]))
                continue
            rank = 0 if o[2] in ("", "en") or o[2].startswith("en-") else 1
            labels.setdefault(_key(s), []).append((rank, o.value))
            continue
        sk = kg.entity(_key(s), local_name(s.value) if s.kind == "iri" else s.value)
        ok = kg.entity(_key(o), o.value if o.kind == "literal" else (local_name(o.value) if o.kind == "iri" else o.value))
        predicates.setdefault(p.value, local_name(p.value))
        kg.add(sk, predicates[p.value], ok, None, (f, no), bad, line)
    if not kg.rows:
        raise LoaderInputError(f"{src}: no KG statement (every line quarantined, a comment or a label)")
    aliases: dict[str, list[str]] = {}
    for k, ranked in labels.items():
        if k in kg.names:
            name = min(ranked, key=lambda x: x[0])[1]  # the first plain or English label, else the first
            kg.rename(k, name)
            aliases[k] = list(dict.fromkeys(v for _, v in ranked if v != name))
    out = tables_with_questions(kg, bad, questions, split=split, sample=sample, seed=seed)
    if any(aliases.values()):  # the other labels: names entity linking matches too
        keys = sorted(kg.names)  # entity ids follow the sorted keys (KGBuilder.tables)
        col = pa.array([aliases.get(k) or None for k in keys], pa.list_(pa.string()))
        out = replace(out, entities=out.entities.append_column(S.ALIASES, col).cast(S.ENTITIES_ALIASES))
    out.stats["statements"] = statements
    return apply_relation_labels(out, relation_labels, keys=predicates) if relation_labels else out
