"""Helpers every loader shares: line reading with quarantine, the KG builder, JSONL questions, sampling.

Quarantine rows are ``(file, line, reason, record)``: the file path, its 1-based line number, why the line
was rejected and (the first 200 characters of) the raw line. Valid lines go on; a file with no usable
content at all is an error naming the file.

Decisions shared by every loader (see ``KGBuilder``):

- a triple seen twice (same head, relation, tail and graph) is quarantined with reason ``"duplicate
  triple"``; the first copy is kept;
- a self-loop (head == tail) is a valid edge: kept, and counted in ``KGTables.stats["self_loops"]``;
- a line longer than ``MAX_LINE_BYTES`` (``MAX_JSONL_LINE_BYTES`` for JSONL questions, whose per-question
  graphs may be large) is quarantined without being decoded.
"""

from __future__ import annotations

import csv
import dataclasses
import gzip
import json
import re
from pathlib import Path
from typing import Any, Iterable, Iterator

import numpy as np
import pyarrow as pa

from kgrag import schema as S
from kgrag.types import KGTables

Bad = list[tuple[str, int, str, str]]
RECORD_CHARS = 200
MAX_LINE_BYTES = 1 << 20
MAX_JSONL_LINE_BYTES = 64 << 20


#: how the quarantine reason of a question kept at ingest ends: its given topic entity is not in the KG, so it is
#: kept with no topic id (as a question that links to nothing: validate flags it not answerable, a miss, and the
#: benchmark protocol still counts it); its quarantine row records why. Every other quarantined line is dropped.
KEPT_AS_MISS = "(kept with no topic entity, scored as a miss)"


def unknown_topic(name: Any, where: str = "the KG") -> str:
    """The quarantine reason of a question kept although its given topic entity ``name`` is not in ``where``."""
    return f"topic entity {str(name)!r} not in {where} {KEPT_AS_MISS}"


def kept_rows(quarantine: pa.Table) -> int:
    """How many quarantine rows are of rows that were kept (their reason ends with ``KEPT_AS_MISS``)."""
    return sum(1 for r in quarantine.column(S.REASON).to_pylist() if r and r.endswith(KEPT_AS_MISS))


class LoaderInputError(ValueError):
    """An input file that cannot be used at all (missing, empty, no valid row); the message names it."""


def quarantine_table(rows: Bad) -> pa.Table:
    """Quarantine rows (table or file, line/row, reason, raw record) as a table."""
    cols = list(zip(*rows)) if rows else [[], [], [], []]
    return pa.Table.from_arrays([pa.array(c, t.type) for c, t in zip(cols, S.QUARANTINE)], schema=S.QUARANTINE)


def open_binary(path: Path):
    """The file's bytes; ``.gz`` files are decompressed."""
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


def require_file(path: Path, what: str) -> Path:
    """``path`` if it is an existing file, else a ``LoaderInputError`` naming it."""
    if not path.is_file():
        raise LoaderInputError(f"{path}: {what} missing (not a file)")
    return path


def read_lines(path: Path, bad: Bad, *, max_bytes: int = MAX_LINE_BYTES) -> list[tuple[int, str]]:
    """Non-blank decoded lines of ``path`` with their 1-based numbers; bad lines go to ``bad``.

    A UTF-8 byte-order mark on the first line is dropped; lines that are not UTF-8 or longer than
    ``max_bytes`` are quarantined.
    """
    out = []
    with open_binary(path) as f:
        for no, raw in enumerate(f, 1):
            line = decode_line(raw, no, path, bad, max_bytes=max_bytes)
            if line is not None:
                out.append((no, line))
    return out


def decode_line(raw: bytes, no: int, path: Path, bad: Bad, *, max_bytes: int = MAX_LINE_BYTES) -> str | None:
    """Text of raw line ``no`` (its bytes with the line feed), or None when blank or quarantined.

    ``read_lines``'s rule for one line (the vectorized triples reader applies it to the lines it cannot
    classify in bulk, and to its blank lines): too long or not UTF-8 → ``bad``; trailing CR/LF dropped; a
    byte-order mark dropped on line 1; a blank line (empty or whitespace only) → ``bad`` as "blank line", so
    that every dropped line is counted; a line holding an ASCII control character (``CONTROL_BYTES``, e.g. NUL)
    → ``bad``.
    """
    if len(raw) > max_bytes:
        bad.append((str(path), no, f"line of {len(raw)} bytes is longer than {max_bytes}",
                    raw[:RECORD_CHARS].decode("utf-8", "replace")))
        return None
    try:
        line = raw.decode("utf-8").rstrip("\r\n")
    except UnicodeDecodeError as e:
        bad.append((str(path), no, f"not UTF-8: {e.reason} at byte {e.start}",
                    raw[:RECORD_CHARS].decode("utf-8", "replace")))
        return None
    if no == 1:
        line = line.lstrip("\ufeff")
    if not line.strip():  # dropped, and counted: a quarantine row of its own
        bad.append((str(path), no, "blank line" if not line else "blank line (whitespace only)", line[:RECORD_CHARS]))
        return None
    ctrl = control_char(line)
    if ctrl is not None:
        bad.append((str(path), no, f"control character U+{ord(line[ctrl]):04X} at column {ctrl + 1}",
                    line[:RECORD_CHARS].encode("unicode_escape").decode("ascii")))
        return None
    return line


#: ASCII control characters no name or question may hold (tab separates fields; CR/LF end lines)
CONTROL_BYTES = frozenset([*range(0, 9), 11, 12, *range(14, 32), 127])
_CONTROL = re.compile("[" + "".join(re.escape(chr(b)) for b in sorted(CONTROL_BYTES)) + "]")


def control_char(text: str) -> int | None:
    """Position of the first ASCII control character of ``text`` (``CONTROL_BYTES``), or None."""
    m = _CONTROL.search(text)
    return m.start() if m else None


def screen_tables(kg: KGTables, *, max_question_chars: int) -> KGTables:
    """Checks every loader's tables get at ingest, whatever their source format: an entity or relation name or
    a question text holding a control character (e.g. a NUL written as a JSON escape), and a question longer than
    ``max_question_chars`` (``data.max_question_chars``: it could not fit a prompt), are quarantined with their
    reason (table, row, reason, record) and leave their table. Triples and questions that refer to a removed
    entity are quarantined by validate, so every row is accounted for."""
    bad: Bad = []
    out = {}
    for name, col, table in (("entities", S.NAME, kg.entities), ("relations", S.NAME, kg.relations),
                             ("questions", S.TEXT, kg.questions)):
        keep = []
        for i, text in enumerate(table.column(col).to_pylist()):
            reason = None
            if text is not None:
                ctrl = control_char(text)
                if ctrl is not None:
                    reason = f"{col}: control character U+{ord(text[ctrl]):04X} at character {ctrl + 1}"
                elif name == "questions" and len(text) > max_question_chars:
                    reason = (f"question of {len(text)} characters is longer than data.max_question_chars="
                              f"{max_question_chars}")
            if reason is None:
                keep.append(True)
                continue
            keep.append(False)
            rec = json.dumps(table.slice(i, 1).to_pylist()[0], default=str)
            bad.append((name, i, reason, rec[:RECORD_CHARS]))
        out[name] = table if all(keep) else table.filter(pa.array(keep, pa.bool_()))
    if not bad:
        return kg
    quarantine = pa.concat_tables([kg.quarantine, quarantine_table(bad)])
    return dataclasses.replace(kg, entities=out["entities"], relations=out["relations"], questions=out["questions"],
                               quarantine=quarantine)


def read_nonempty(path: Path, bad: Bad, what: str, *, max_bytes: int = MAX_LINE_BYTES) -> list[tuple[int, str]]:
    """``read_lines`` of a file that must exist and hold at least one non-blank line."""
    lines = read_lines(require_file(path, what), bad, max_bytes=max_bytes)
    if not lines:
        raise LoaderInputError(f"{path}: {what} is empty (no non-blank UTF-8 line)")
    return lines


def read_separated_triples(path: Path, sep: str, what: str, kg: "KGBuilder", bad: Bad, *, label: str,
                           strip: bool = False) -> None:
    """Each non-blank line of ``path`` as one ``head<sep>relation<sep>tail`` triple added to ``kg`` (MetaQA's
    ``kb.txt``, the IRN KB files); a line with another number of fields or a blank field goes to ``bad`` with
    its file, line and reason (``label`` names the separator there); ``strip``: fields stripped of spaces."""
    for no, line in read_nonempty(path, bad, what):
        parts = line.split(sep)
        if len(parts) != 3 or not all(p.strip() for p in parts):
            bad.append((str(path), no, f"expected 3 non-empty {label}-separated fields, got {len(parts)}", line[:200]))
            continue
        if strip:
            parts = [p.strip() for p in parts]
        kg.add(parts[0], parts[1], parts[2], None, (str(path), no), bad, line)


def csv_records(
    lines: list[tuple[int, str]], delimiter: str, quotechar: str | None
) -> Iterator[tuple[int, list[str] | None, str, str]]:
    """``(first line number, fields, raw text, error)`` of each record; a quoted field may span lines.

    ``fields`` is None (and ``error`` says why) for a record the CSV reader rejects.
    """
    consumed: list[tuple[int, str]] = []

    def feed() -> Iterator[str]:
        for no, text in lines:
            consumed.append((no, text))
            yield text

    if quotechar:
        reader: Iterable[list[str]] = csv.reader(feed(), delimiter=delimiter, quotechar=quotechar, strict=True)
    else:
        reader = csv.reader(feed(), delimiter=delimiter, quoting=csv.QUOTE_NONE)
    it = iter(reader)
    while True:
        try:
            fields = next(it)
        except StopIteration:
            return
        except csv.Error as e:  # a malformed quoted record: skip its lines
            no = consumed[0][0] if consumed else 0
            raw = "\n".join(t for _, t in consumed)
            consumed.clear()
            yield no, None, raw, f"malformed CSV record: {e}"
            continue
        no = consumed[0][0]
        raw = "\n".join(t for _, t in consumed)
        consumed.clear()
        yield no, fields, raw, ""


def sample_rows(rows: list, sample: int, seed: int) -> list:
    """``sample`` rows chosen with ``seed`` in file order (all when ``sample`` is 0 or large)."""
    if sample and sample < len(rows):
        pick = np.sort(np.random.default_rng(seed).choice(len(rows), size=sample, replace=False))
        return [rows[i] for i in pick]
    return rows


def add_triple(b: Any, head: str, relation: str, tail: str, graph_id: str | None, where: tuple[str, int],
               bad: Bad, record: str) -> bool:
    """Add a triple of entity keys to the builder ``b`` (``KGBuilder``, or the Arrow loader's key table: each
    has ``_seen``, ``rows``, ``entity``, ``duplicates`` and ``self_loops``); a duplicate goes to ``bad`` (with
    ``where`` = file, line) and is not added."""
    key = (head, relation, tail, graph_id)
    if key in b._seen:
        b.duplicates += 1
        bad.append((where[0], where[1], "duplicate triple", record[:RECORD_CHARS]))
        return False
    b._seen.add(key)
    b.entity(head)
    b.entity(tail)
    b.self_loops += head == tail
    b.rows.append(key)
    return True


class KGBuilder:
    """Collects entities (by source key, with a display name) and triples; turns them into the tables.

    Entity ids follow the sorted source keys and relation ids the sorted relation names, so the same
    triples give the same ids whatever the file order (and the same ids as the MetaQA loader on kb.txt).
    """

    def __init__(self) -> None:
        self.names: dict[str, str] = {}  # key -> display name
        self._by_name: dict[str, str] = {}  # display name -> first key with that name
        self.rows: list[tuple[str, str, str, str | None]] = []
        self._seen: set[tuple[str, str, str, str | None]] = set()
        self.self_loops = 0
        self.duplicates = 0

    def entity(self, key: str, name: str | None = None) -> str:
        """Register entity ``key`` (display name ``name``, default the key); returns the key."""
        if key not in self.names:
            self.names[key] = name if name is not None else key
            self._by_name.setdefault(self.names[key], key)
        return key

    def rename(self, key: str, name: str) -> None:
        """Set the display name of a registered entity."""
        self.names[key] = name
        self._by_name.setdefault(name, key)

    def add(self, head: str, relation: str, tail: str, graph_id: str | None, where: tuple[str, int],
            bad: Bad, record: str) -> bool:
        """Add a triple of entity keys; a duplicate goes to ``bad`` (with ``where`` = file, line)."""
        return add_triple(self, head, relation, tail, graph_id, where, bad, record)

    def resolve(self, ref: Any) -> str | None:
        """Key of the entity ``ref`` names: a source key (id) first, else a display name; None if absent."""
        s = str(ref)
        if s in self.names:
            return s
        return self._by_name.get(s)

    def tables(self, questions: pa.Table, bad: Bad) -> KGTables:
        """The loader's output tables (triples carry ``graph_id`` only when a triple has one)."""
        keys = sorted(self.names)
        ent_id = {k: i for i, k in enumerate(keys)}
        rel_names = sorted({r for _, r, _, _ in self.rows})
        rel_id = {n: i for i, n in enumerate(rel_names)}
        entities = pa.table(
            {S.ENTITY_ID: pa.array(range(len(keys)), pa.int64()), S.NAME: [self.names[k] for k in keys]},
            schema=S.ENTITIES,
        )
        relations = pa.table(
            {S.RELATION_ID: pa.array(range(len(rel_names)), pa.int64()), S.NAME: rel_names}, schema=S.RELATIONS
        )
        cols = {
            S.HEAD: pa.array([ent_id[h] for h, _, _, _ in self.rows], pa.int64()),
            S.RELATION: pa.array([rel_id[r] for _, r, _, _ in self.rows], pa.int64()),
            S.TAIL: pa.array([ent_id[t] for _, _, t, _ in self.rows], pa.int64()),
        }
        if any(g is not None for *_, g in self.rows):
            cols[S.GRAPH_ID] = pa.array([g for *_, g in self.rows], pa.string())
            triples = pa.table(cols, schema=S.GRAPH_TRIPLES)
        else:
            triples = pa.table(cols, schema=S.TRIPLES)
        stats = {"self_loops": self.self_loops, "duplicate_triples": self.duplicates,
                 "graphs": len({g for *_, g in self.rows if g is not None})}
        return KGTables(entities, relations, triples, questions, quarantine_table(bad), stats)

    def entity_ids(self) -> dict[str, int]:
        """Key → entity id as ``tables`` assigns them."""
        return {k: i for i, k in enumerate(sorted(self.names))}


def read_names(path: Path, bad: Bad, *, what: str = "names file", item: str = "entity") -> dict[str, list[str]]:
    """A label table: ``entity<TAB>name`` lines → {entity key: [names, in file order, repeats dropped]}.

    An entity may have several lines; its first name is its display name, the others its aliases. A line
    without exactly two tab-separated fields, or with an empty entity or name, is quarantined with file, line
    and reason (as a line holding a control character or not UTF-8, by ``read_lines``). ``what`` / ``item`` name
    the file and its key in those reasons (a relation label table: ``"relation labels file"``, ``"relation"``)."""
    out: dict[str, list[str]] = {}
    f = str(path)
    for no, line in read_nonempty(path, bad, what):
        parts = line.split("\t")
        if len(parts) != 2:
            bad.append((f, no, f"{what}: expected 2 tab-separated fields ({item}, name), got {len(parts)}",
                        line[:RECORD_CHARS]))
            continue
        key, name = parts[0].strip(), parts[1].strip()
        if not key or not name:
            bad.append((f, no, f"{what}: empty {item if not key else 'name'} field", line[:RECORD_CHARS]))
            continue
        names = out.setdefault(key, [])
        if name not in names:
            names.append(name)
    return out


def apply_names(kg: KGTables, path: str | Path) -> KGTables:
    """``kg`` with the names of label table ``path`` (``read_names``): an entity whose key (the name a loader
    gave it: a triples file's field text) the table lists is renamed to its first name, and its other names
    become its aliases (column ``aliases``, schema ``ENTITIES_ALIASES``: null = none), which entity linking
    matches too (``kgrag.kg.linking``). The questions' answer texts of renamed entities follow. Table
    entities the KG lacks are counted (``stats["names_unknown"]``: a label table may cover a larger KG), not
    quarantined; malformed lines are."""
    bad: Bad = []
    table = read_names(Path(path), bad)
    keys = kg.entities.column(S.NAME).to_pylist()
    renamed = [table.get(k) for k in keys]
    names = [n[0] if n else k for k, n in zip(keys, renamed)]
    aliases = [n[1:] if n and len(n) > 1 else None for n in renamed]
    entities = pa.table({S.ENTITY_ID: kg.entities.column(S.ENTITY_ID), S.NAME: pa.array(names, pa.string()),
                         S.ALIASES: pa.array(aliases, pa.list_(pa.string()))}, schema=S.ENTITIES_ALIASES)
    by_id = dict(zip(kg.entities.column(S.ENTITY_ID).to_pylist(), names))
    rows = kg.questions.to_pylist()
    for r in rows:
        r[S.ANSWERS] = [by_id[i] if i is not None and i in by_id else a
                        for i, a in zip(r[S.ANSWER_IDS] or [], r[S.ANSWERS] or [])]
    questions = pa.Table.from_pylist(rows, schema=kg.questions.schema)
    known = set(keys)
    stats = {**kg.stats, "names_entities": sum(n is not None for n in renamed),
             "names_aliases": sum(len(a) for a in aliases if a), "names_unknown": sum(k not in known for k in table)}
    quarantine = pa.concat_tables([kg.quarantine, quarantine_table(bad)]) if bad else kg.quarantine
    return dataclasses.replace(kg, entities=entities, questions=questions, quarantine=quarantine, stats=stats)


def apply_relation_labels(kg: KGTables, path: str | Path, *, keys: dict[str, str] | None = None) -> KGTables:
    """``kg`` with the relation names of label table ``path`` (``relation<TAB>name`` lines, ``read_names``'s
    format): a relation the table lists (by the name the loader gave it, e.g. an id such as Wikidata's ``P26``;
    ``keys`` maps other keys a table may use, e.g. a predicate's full IRI, to that name) is named by its first
    name (column ``name``: what the relation-path planner, the prompts and the retrievers read), its other names
    become its aliases (column ``aliases``) and its id stays in column ``key`` (schema ``RELATIONS_LABELLED``).
    A relation the table does not list keeps its name. Relation ids and triples do not change.

    Relation names stay unique (relations are looked up by name, e.g. a relation plan's): when several relations
    would share a name, each labelled one among them is named ``"label (id)"`` (``stats["relation_labels_shared"]``).
    Table ids that are not relations of the KG are counted (``stats["relation_labels_unknown"]``), not
    quarantined; malformed lines are (file, line, reason)."""
    bad: Bad = []
    table: dict[str, list[str]] = {}
    for k, names in read_names(Path(path), bad, what="relation labels file", item="relation").items():
        merged = table.setdefault((keys or {}).get(k, k), [])
        merged.extend(n for n in names if n not in merged)
    ids = kg.relations.column(S.NAME).to_pylist()
    labelled = [table.get(k) for k in ids]
    names = [n[0] if n else k for k, n in zip(ids, labelled)]
    seen: dict[str, int] = {}
    for n in names:
        seen[n] = seen.get(n, 0) + 1
    shared = [bool(lab) and seen[n] > 1 for n, lab in zip(names, labelled)]
    names = [f"{n} ({k})" if s else n for n, k, s in zip(names, ids, shared)]
    aliases = [n[1:] if n and len(n) > 1 else None for n in labelled]
    relations = pa.table({S.RELATION_ID: kg.relations.column(S.RELATION_ID), S.NAME: pa.array(names, pa.string()),
                          S.KEY: pa.array(ids, pa.string()), S.ALIASES: pa.array(aliases, pa.list_(pa.string()))},
                         schema=S.RELATIONS_LABELLED)
    known = set(ids)
    stats = {**kg.stats, "relation_labels_relations": sum(n is not None for n in labelled),
             "relation_labels_aliases": sum(len(a) for a in aliases if a),
             "relation_labels_unknown": sum(k not in known for k in table), "relation_labels_shared": sum(shared)}
    quarantine = pa.concat_tables([kg.quarantine, quarantine_table(bad)]) if bad else kg.quarantine
    return dataclasses.replace(kg, relations=relations, quarantine=quarantine, stats=stats)


def empty_questions() -> dict[str, list]:
    """Column lists of a questions table, to append rows to."""
    return {f.name: [] for f in S.QUESTIONS}


def _names(value: Any) -> list | None:
    if value is None:
        return None
    if isinstance(value, (str, int)) and not isinstance(value, bool):
        return [value]
    if isinstance(value, list) and all(isinstance(v, (str, int)) and not isinstance(v, bool) for v in value):
        return value
    return None


def read_questions_jsonl(path: Path, kg: KGBuilder, bad: Bad, *, split: str, sample: int, seed: int) -> list[dict]:
    """Parse a questions JSONL file; per-question ``graph`` triples go into ``kg`` with the question's graph id.

    One object per line: ``id``, ``question``, ``topic_entities`` and ``answers`` (lists, or one value, of
    entity ids or names), optional ``graph`` (list of ``[head, relation, tail]``), optional ``hops`` and
    ``qtype``, optional ``choices`` (the labels of a label task, e.g. ``["support", "counter"]``: the answers
    are then labels, not entities). Lines that are not such an object are quarantined; so is a question with
    no answers, or with ``choices`` whose answers are not among them. An empty ``topic_entities`` list is kept
    (a question whose topics ``data.link_entities`` links from its text; left without one, validate flags it
    not answerable: a miss). So is a question whose topic entity is neither in the KG nor in its own graph: it
    is kept with no topic id (scored as a miss, like one that links to nothing), and its quarantine row records
    why (``unknown_topic``, ending ``KEPT_AS_MISS``). Returns parsed questions (before entity ids are assigned:
    call ``questions_table``).
    """
    lines = read_nonempty(path, bad, "questions JSONL file", max_bytes=MAX_JSONL_LINE_BYTES)
    lines = sample_rows(lines, sample, seed)
    out: list[dict] = []
    seen_ids: set[str] = set()
    f = str(path)
    for no, line in lines:
        rec = line[:RECORD_CHARS]
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            bad.append((f, no, f"not JSON: {e.msg} at column {e.colno}", rec))
            continue
        if not isinstance(obj, dict):
            bad.append((f, no, f"expected a JSON object, got {type(obj).__name__}", rec))
            continue
        missing = [k for k in ("id", "question", "topic_entities", "answers") if k not in obj]
        if missing:
            bad.append((f, no, f"missing field(s): {', '.join(missing)}", rec))
            continue
        qid, text = obj["id"], obj["question"]
        if not isinstance(qid, (str, int)) or isinstance(qid, bool) or not str(qid).strip():
            bad.append((f, no, "id must be a non-empty string or integer", rec))
            continue
        qid = str(qid)
        if not isinstance(text, str) or not text.strip():
            bad.append((f, no, "question must be a non-empty string", rec))
            continue
        if qid in seen_ids:
            bad.append((f, no, f"duplicate question id {qid!r}", rec))
            continue
        topics, answers = _names(obj["topic_entities"]), _names(obj["answers"])
        if topics is None or answers is None:
            which = "topic_entities" if topics is None else "answers"
            bad.append((f, no, f"{which} must be a list of entity names or ids", rec))
            continue
        if not answers:
            bad.append((f, no, "no answers", rec))
            continue
        choices = obj.get("choices")
        if choices is not None:
            if not (isinstance(choices, list) and choices and all(isinstance(c, str) and c.strip() for c in choices)):
                bad.append((f, no, "choices must be a non-empty list of non-empty strings", rec))
                continue
            outside = [a for a in answers if str(a) not in choices]
            if outside:
                bad.append((f, no, f"answer {str(outside[0])!r} is not one of the choices", rec))
                continue
        graph = obj.get("graph")
        triples: list[tuple[str, str, str]] = []
        if graph is not None:
            if not isinstance(graph, list):
                bad.append((f, no, "graph must be a list of [head, relation, tail]", rec))
                continue
            broken = next((i for i, t in enumerate(graph) if not (
                isinstance(t, list) and len(t) == 3 and all(isinstance(x, (str, int)) and not isinstance(x, bool)
                                                            and str(x).strip() for x in t))), None)
            if broken is not None:
                bad.append((f, no, f"graph[{broken}]: expected [head, relation, tail] of non-empty strings", rec))
                continue
            triples = [(str(h), str(r), str(t)) for h, r, t in graph]
        hops = obj.get("hops")
        gid = qid if graph is not None else None
        nodes = {x for h, _, t in triples for x in (h, t)}
        absent = [t for t in topics if kg.resolve(t) is None and str(t) not in nodes]
        if absent:  # kept, unlinked (a miss), and recorded: not dropped from the denominator
            bad.append((f, no, unknown_topic(absent[0]), rec))
        seen_ids.add(qid)
        for h, r, t in triples:
            hk = kg.resolve(h) or kg.entity(h)
            tk = kg.resolve(t) or kg.entity(t)
            kg.add(hk, r, tk, gid, (f, no), bad, json.dumps([h, r, t]))
        out.append({
            S.QUESTION_ID: qid, S.SPLIT: split, S.HOPS: hops if isinstance(hops, int) and not isinstance(hops, bool) else None,
            S.TEXT: text, S.QTYPE: str(obj.get("qtype") or ""),
            "_topics": [] if absent else [kg.resolve(t) for t in topics],
            # a label task's answers are labels: no entity id even if a label happens to name an entity
            "_answers": [None if choices else kg.resolve(a) for a in answers], "_answer_refs": [str(a) for a in answers],
            S.GRAPH_ID: gid, S.CHOICES: list(choices) if choices else None,
        })
    return out


def questions_table(parsed: list[dict], kg: KGBuilder) -> pa.Table:
    """The questions table of ``read_questions_jsonl``'s output, ids as ``kg.tables`` assigns them.

    An answer that is not an entity keeps its text in ``answers`` and a null id in ``answer_ids``.
    """
    ids = kg.entity_ids()
    rows = empty_questions()
    for q in parsed:
        for k in (S.QUESTION_ID, S.SPLIT, S.HOPS, S.TEXT, S.QTYPE, S.GRAPH_ID, S.CHOICES):
            rows[k].append(q[k])
        rows[S.TOPIC_IDS].append([ids[k] for k in q["_topics"]])
        rows[S.ANSWER_IDS].append([ids.get(k) if k is not None else None for k in q["_answers"]])
        rows[S.ANSWERS].append([kg.names[k] if k is not None else ref for k, ref in zip(q["_answers"], q["_answer_refs"])])
    return pa.table(rows, schema=S.QUESTIONS)


def tables_with_questions(kg: KGBuilder, bad: Bad, questions: str | None, *, split: str, sample: int,
                          seed: int) -> KGTables:
    """A loader's output: ``kg``'s tables with the questions of a JSONL file, how every builder-based loader ends.

    Parameters
    ----------
    kg : KGBuilder
        The loader's entities and triples; per-question graphs of the file are added to it.
    bad : list of tuple
        The quarantine rows so far; the questions file's are appended.
    questions : str or None
        The questions JSONL file (see ``read_questions_jsonl``); None or empty: no questions.
    split : str
        Split label given to the questions.
    sample, seed : int
        ``sample`` questions drawn with ``seed`` (0: all).

    Returns
    -------
    KGTables
        Entities, relations, triples, questions and quarantine (``KGBuilder.tables``).
    """
    parsed = []
    if questions:
        parsed = read_questions_jsonl(Path(questions), kg, bad, split=split, sample=sample, seed=seed)
    return kg.tables(questions_table(parsed, kg), bad)
