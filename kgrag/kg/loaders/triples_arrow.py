"""The ``triples`` loader's vectorized engine: the same tables and quarantine rows as the line-by-line one,
from numpy / pyarrow kernels over the whole file.

The python engine reads a line at a time (``common.read_lines`` → ``common.csv_records`` → field checks →
``KGBuilder``). Here every line is classified at once from byte classes, so that the rule applied to a
line is the python one:

- lines are split on LF only (as Python's binary file iteration); trailing CR/LF is dropped;
- a line goes to the *slow lane* (the python rule, ``common.decode_line`` + ``csv_records``, on that line
  alone) when it is line 1 (byte-order mark), longer than ``MAX_LINE_BYTES`` or the csv field limit,
  holds a CR or an ASCII control character (``common.CONTROL_BYTES``) inside it, sits in a block that is not valid UTF-8 and has non-ASCII bytes, or might
  be blank without being all ASCII whitespace (see ``classify``);
- every other line is plain: blank when all its bytes are ASCII whitespace (``str.isspace``: a "blank line"
  quarantine row, as ``decode_line`` writes), else split on
  the delimiter (``pc.split_pattern``: with no quoting and no CR/LF inside, csv's QUOTE_NONE split);
- a head / relation / tail field is blank when ASCII-trimming leaves nothing; a field whose trimmed text
  starts with a non-ASCII character is checked with ``str.strip`` (Unicode whitespace);
- duplicates, entity ids (sorted keys; byte order of UTF-8 = code-point order of ``sorted``) and relation
  ids come from dictionary-encoding the field columns.

Quarantine rows keep the python engine's order: read errors (length, UTF-8, blank, control character) by line, then record errors
(CSV, field count, blank field, duplicate) by line, then the questions file's. Questions are parsed by
the shared ``read_questions_jsonl`` against the entity keys they reference (looked up in bulk); triples of
per-question graphs are appended after the file's and the ids re-sorted over the union (``merge_graphs``).
"""

from __future__ import annotations

import codecs
import csv
import functools
import json
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kgrag import arrays
from kgrag import schema as S
from kgrag.kg.loaders.common import (
    CONTROL_BYTES,
    MAX_LINE_BYTES,
    RECORD_CHARS,
    Bad,
    add_triple,
    LoaderInputError,
    csv_records,
    decode_line,
    open_binary,
    questions_table,
    quarantine_table,
    read_questions_jsonl,
    require_file,
)
from kgrag.kg.loaders.triples_rules import column_layout, empty_reason, field_count_reason, record_problem
from kgrag.types import KGTables

WHITESPACE = b"\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f "  # the ASCII characters for which str.isspace() holds
SCAN_BYTES = 1 << 26  # bytes classified per numpy pass (bounds temporary memory)
UTF8_BLOCK = 1 << 16  # lines decoded together to check UTF-8 (a failing block: its non-ASCII lines go slow)
SPLIT_LINES = 1 << 20  # lines split per pyarrow pass
READ_BYTES = 1 << 26  # bytes read per block of whole lines (a block's bytes and line arrays are freed after it)
THREADS = min(2, os.cpu_count() or 1)  # chunks split and encoded in parallel
UNSURE_SLOW_MAX = 50_000  # at most this many (or 1 %) possibly-blank lines go to the slow lane; more: byte counts

# byte classes: 0 ASCII non-whitespace, 1 ASCII whitespace other than CR, 2 CR, 3 non-ASCII, 4 NUL
_CLASS = np.zeros(256, dtype=np.uint8)
_CLASS[list(WHITESPACE)] = 1
_CLASS[13] = 2
_CLASS[128:] = 3
_CLASS[0] = 4


def unsupported(*, delimiter: str, quotechar: str | None) -> str | None:
    """Why the vectorized engine does not apply to these params (None: it does)."""
    if quotechar:
        return "CSV quoting (quotechar) needs the python engine"
    if len(delimiter.encode("utf-8")) != 1 or delimiter in "\r\n":
        return f"delimiter {delimiter!r} is not a one-byte ASCII character other than CR/LF"
    return None


def _json_objects(path: Path):
    """Objects of a JSONL file, lines that do not parse skipped (a lenient pre-pass; errors are reported by
    the real parse)."""
    with open_binary(path) as f:
        for raw in f:
            try:
                obj = json.loads(raw)
            except (ValueError, UnicodeDecodeError):
                continue
            if isinstance(obj, dict):
                yield obj


def _question_refs(path: Path) -> list[str]:
    """Every topic / answer reference of the questions file, as strings."""
    refs: set[str] = set()
    if not path.is_file():
        return []
    for obj in _json_objects(path):
        for k in ("topic_entities", "answers"):
            v = obj.get(k)
            for x in (v if isinstance(v, list) else [v]):
                if isinstance(x, (str, int)) and not isinstance(x, bool):
                    refs.add(str(x))
        graph = obj.get("graph")
        for tr in (graph if isinstance(graph, list) else []):
            for x in (tr if isinstance(tr, list) else []):
                if isinstance(x, (str, int)) and not isinstance(x, bool):
                    refs.add(str(x))
    return sorted(refs)


class _EntityKeys:
    """What ``read_questions_jsonl`` / ``questions_table`` need of a ``KGBuilder``: the file's entity keys
    that the questions reference (key → id; display name = key, as the triples loader names entities),
    plus the entities and triples of per-question graphs, merged into the tables by ``merge_graphs``."""

    def __init__(self, ids: dict[str, int]) -> None:
        self._ids = ids
        self.names = {k: k for k in ids}
        self.new: dict[str, None] = {}  # graph entities not in the triples file, in first-seen order
        self.rows: list[tuple[str, str, str, str]] = []
        self._seen: set[tuple[str, str, str, str]] = set()
        self.self_loops = 0
        self.duplicates = 0

    def resolve(self, ref) -> str | None:
        s = str(ref)
        return s if s in self.names else None

    def entity(self, key: str, name: str | None = None) -> str:
        if key not in self.names:
            self.names[key] = key
            self.new[key] = None
        return key

    def add(self, head: str, relation: str, tail: str, graph_id: str | None, where: tuple[str, int], bad: Bad,
            record: str) -> bool:
        """``KGBuilder.add`` for a per-question graph's triple (graph_id set: it cannot repeat a file triple)."""
        return add_triple(self, head, relation, tail, graph_id, where, bad, record)

    def entity_ids(self) -> dict[str, int]:
        return self._ids


def line_bounds(buf: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(start, end) byte offsets of every line, end after its LF (Python's binary line iteration)."""
    n = len(buf)
    parts = [np.flatnonzero(buf[a:a + SCAN_BYTES] == 10) + a for a in range(0, n, SCAN_BYTES)]
    ends = (np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)).astype(np.int64) + 1
    if n and (not len(ends) or ends[-1] != n):
        ends = np.append(ends, n)
    starts = np.concatenate([[0], ends[:-1]]).astype(np.int64) if len(ends) else ends.copy()
    return starts, ends


def content_ends(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """End of each line's text: trailing CR and LF bytes dropped (``str.rstrip("\\r\\n")``)."""
    ce = ends.copy()
    todo = np.flatnonzero(ce > starts)
    while len(todo):
        last = buf[ce[todo] - 1]
        todo = todo[(last == 10) | (last == 13)]
        ce[todo] -= 1
        todo = todo[ce[todo] > starts[todo]]
    return ce


def byte_counts(buf: np.ndarray, starts: np.ndarray, cend: np.ndarray) -> np.ndarray:
    """Per line, the count of each byte class (columns as ``_CLASS``) inside its text (before ``cend``)."""
    n = len(starts)
    counts = np.zeros((n, 5), dtype=np.int64)
    for a in range(0, len(buf), SCAN_BYTES):
        cls = _CLASS[buf[a:a + SCAN_BYTES]]
        pos = np.flatnonzero(cls)
        if not len(pos):
            continue
        c = cls[pos]
        pos = pos + a
        line = np.searchsorted(starts, pos, side="right") - 1
        inside = pos < cend[line]
        line, c = line[inside], c[inside]
        if len(line):
            l0 = int(line[0])
            span = int(line[-1]) - l0 + 1
            counts[l0:l0 + span] += np.bincount((line - l0) * 5 + c, minlength=span * 5).reshape(span, 5)
    counts[:, 0] = (cend - starts) - counts[:, 1:].sum(axis=1)
    return counts


def utf8_suspect(data: bytes, buf: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Lines with non-ASCII bytes in a block of lines that is not valid UTF-8 as a whole (a valid block has
    only valid lines: LF never occurs inside a multi-byte character)."""
    out = np.zeros(len(starts), dtype=bool)
    mv = memoryview(data)
    for a in range(0, len(starts), UTF8_BLOCK):
        b = min(a + UTF8_BLOCK, len(starts))
        try:
            codecs.utf_8_decode(mv[starts[a]:ends[b - 1]], "strict", True)
        except UnicodeDecodeError:
            pos = np.flatnonzero(buf[starts[a]:ends[b - 1]] >= 128) + starts[a]
            out[arrays.unique(np.searchsorted(starts, pos, side="right") - 1)] = True
    return out


def lines_with(buf: np.ndarray, byte: int, starts: np.ndarray, cend: np.ndarray) -> np.ndarray:
    """Whether each line's text (before ``cend``) holds ``byte``."""
    out = np.zeros(len(starts), dtype=bool)
    for a in range(0, len(buf), SCAN_BYTES):
        pos = np.flatnonzero(buf[a:a + SCAN_BYTES] == byte) + a
        line = np.searchsorted(starts, pos, side="right") - 1
        out[line[pos < cend[line]]] = True
    return out


def lines_with_control(buf: np.ndarray, starts: np.ndarray, cend: np.ndarray) -> np.ndarray:
    """Whether each line's text (before ``cend``) holds an ASCII control byte (``common.CONTROL_BYTES``): such
    lines take the slow lane, where ``decode_line`` quarantines them."""
    table = np.zeros(256, dtype=bool)
    table[list(CONTROL_BYTES)] = True
    out = np.zeros(len(starts), dtype=bool)
    for a in range(0, len(buf), SCAN_BYTES):
        pos = np.flatnonzero(table[buf[a:a + SCAN_BYTES]]) + a
        line = np.searchsorted(starts, pos, side="right") - 1
        out[line[pos < cend[line]]] = True
    return out


def classify(data: bytes, buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, cend: np.ndarray,
             first_block: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """(slow, plain): lines for the python rule, and plain non-blank lines (the rest are blank).

    A line whose text starts with an ASCII non-whitespace byte is non-blank. When few lines start
    otherwise they all take the slow lane; when many do (say, names in a non-Latin script), per-line byte
    class counts decide (``byte_counts``).
    """
    n = len(starts)
    limit = csv.field_size_limit()
    slow = ((ends - starts) > MAX_LINE_BYTES) | ((cend - starts) > limit)
    slow |= lines_with(buf, 13, starts, cend) | lines_with_control(buf, starts, cend)
    slow |= utf8_suspect(data, buf, starts, ends)
    if n and first_block:  # the file's line 1 (a byte-order mark)
        slow[0] = True
    nonempty = cend > starts
    first = np.full(n, 32, dtype=np.uint8)
    first[nonempty] = buf[starts[nonempty]]
    sure = _CLASS[first] == 0  # starts with an ASCII non-whitespace byte
    unsure = nonempty & ~sure & ~slow
    if unsure.sum() <= max(UNSURE_SLOW_MAX, n // 100):
        slow |= unsure
        plain = ~slow & sure
    else:
        counts = byte_counts(buf, starts, cend)
        nonws, high = counts[:, 0], counts[:, 3]
        slow |= (nonws == 0) & (high > 0)
        plain = ~slow & (nonws > 0)
    return slow, plain


def _text(data: bytes, a: int, b: int) -> str:
    return data[a:b].decode("utf-8")


def _blank_fields(field: pa.Array) -> np.ndarray:
    """Whether each field (large_string, valid UTF-8) is whitespace only, as ``not field.strip()``."""
    trimmed = pc.ascii_trim(field, characters=WHITESPACE.decode())
    blank = pc.binary_length(trimmed).to_numpy(zero_copy_only=False) == 0
    rest = np.flatnonzero(~blank)
    if len(rest):
        offs = np.frombuffer(trimmed.buffers()[1], dtype=np.int64)[trimmed.offset:trimmed.offset + len(trimmed)]
        first = np.frombuffer(trimmed.buffers()[2], dtype=np.uint8)[offs[rest]]
        for i in rest[first >= 128].tolist():  # starts with a non-ASCII character: Unicode whitespace only?
            blank[i] = not trimmed[i].as_py().strip()
    return blank


@dataclass
class _Chunk:
    """A block of plain lines, split: record errors, kept line numbers, dictionary-encoded head / relation / tail."""

    bad: list[tuple[int, str, str]]
    lines: np.ndarray
    fields: list[pa.DictionaryArray]


def _split_chunk(
    *, data: bytes, databuf: pa.Buffer, starts: np.ndarray, ends: np.ndarray, cend: np.ndarray, idx: np.ndarray,
    plain: np.ndarray, delimiter: str, expected: int, cols: tuple[int, int, int], base: int = 0,
) -> _Chunk:
    """Split plain lines ``idx`` (indices in the block, ascending; ``base`` lines before the block) on the
    delimiter and check their fields."""
    bad: list[tuple[int, str, str]] = []
    lo, hi = int(idx[0]), int(idx[-1]) + 1
    offsets = np.append(starts[lo:hi], ends[hi - 1]).astype(np.int64)
    block = pa.Array.from_buffers(pa.large_binary(), hi - lo, [None, pa.py_buffer(offsets), databuf])
    if len(idx) != hi - lo:
        block = block.filter(pa.array(plain[lo:hi]))
    parts = pc.split_pattern(block, pattern=delimiter)
    nf = pc.list_value_length(parts).to_numpy(zero_copy_only=False)
    ok = nf == expected
    if not ok.all():
        for j in np.flatnonzero(~ok).tolist():
            k = int(idx[j])
            bad.append((base + k + 1, field_count_reason(expected, int(nf[j]), delimiter),
                        _text(data, starts[k], cend[k])[:RECORD_CHARS]))
        parts, idx = parts.filter(pa.array(ok)), idx[ok]
    fields = []
    for c in cols:
        v = pc.list_element(parts, c).view(pa.large_string())
        if c == expected - 1:  # the last field still holds the line's CR/LF
            v = pc.ascii_rtrim(v, characters="\r\n")
        fields.append(v)
    blank = np.stack([_blank_fields(v) for v in fields], axis=1)
    drop = blank.any(axis=1)
    if drop.any():
        for j in np.flatnonzero(drop).tolist():
            k = int(idx[j])
            names = [nm for nm, b in zip(("head", "relation", "tail"), blank[j]) if b]
            bad.append((base + k + 1, empty_reason(names), _text(data, starts[k], cend[k])[:RECORD_CHARS]))
        good = pa.array(~drop)
        fields, idx = [v.filter(good) for v in fields], idx[~drop]
    return _Chunk(bad=bad, lines=idx + 1 + base, fields=[pc.dictionary_encode(v) for v in fields])


def _global_ids(columns: list[list[pa.DictionaryArray]]) -> tuple[pa.Array, list[np.ndarray]]:
    """Sorted distinct values over every chunk of ``columns`` and, per column, each row's position in them."""
    dicts = [d.dictionary for col in columns for d in col]
    allv = pa.concat_arrays(dicts) if dicts else pa.array([], pa.large_string())
    values = pc.unique(allv)
    values = values.take(pc.sort_indices(values))
    pos = pc.index_in(allv, value_set=values).to_numpy(zero_copy_only=False).astype(np.int64)
    out, at = [], 0
    for col in columns:
        parts = []
        for d in col:
            m = pos[at:at + len(d.dictionary)]
            at += len(d.dictionary)
            parts.append(m[d.indices.to_numpy(zero_copy_only=False)])
        out.append(np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64))
    return values, out


def duplicate_rows(hid: np.ndarray, rid: np.ndarray, tid: np.ndarray, *, n_entities: int, n_relations: int
                   ) -> np.ndarray:
    """Whether each row repeats an earlier row's (head, relation, tail)."""
    n = len(hid)
    if n_entities and n_relations and n_entities * n_relations * n_entities < 1 << 62:
        key = hid * n_relations
        key += rid
        key *= n_entities
        key += tid
        ordered = np.sort(key)  # the usual case: no duplicate; a sort's copy, not a hash table of every key
        if not (ordered[1:] == ordered[:-1]).any():
            return np.zeros(n, dtype=bool)
        del ordered
        key = pa.array(key)
        first = pa.table({"k": key, "i": pa.array(np.arange(n))}).group_by("k").aggregate([("i", "min")])
        dup = np.ones(n, dtype=bool)
        dup[first.column("i_min").to_numpy()] = False
        return dup
    hr = hid * max(n_relations, 1) + rid
    order = np.lexsort((tid, hr))  # stable: the first line of a copy first
    sk, st = hr[order], tid[order]
    repeat = np.zeros(n, dtype=bool)
    repeat[1:] = (sk[1:] == sk[:-1]) & (st[1:] == st[:-1])
    dup = np.zeros(n, dtype=bool)
    dup[order[repeat]] = True
    return dup


def line_blocks(fh, block_bytes: int | None = None):
    """The file's bytes in blocks of whole lines (each ends after an LF, but the last), ``block_bytes`` or a
    little more each: a line longer than a block is read on until its LF."""
    size = block_bytes or READ_BYTES
    rest = b""
    while True:
        chunk = fh.read(size)
        if not chunk:
            if rest:
                yield rest
            return
        data = rest + chunk if rest else chunk
        cut = data.rfind(b"\n") + 1
        if cut == 0:
            rest = data
            continue
        yield data[:cut] if cut < len(data) else data
        rest = data[cut:]


def line_texts(src: Path, wanted: set[int]) -> dict[int, str]:
    """The text (trailing CR/LF dropped) of lines ``wanted`` (1-based), read again block by block."""
    out: dict[int, str] = {}
    if not wanted:
        return out
    base = 0
    want = np.array(sorted(wanted), dtype=np.int64)
    with open_binary(src) as fh:
        for data in line_blocks(fh):
            buf = np.frombuffer(data, dtype=np.uint8)
            starts, ends = line_bounds(buf)
            here = want[(want > base) & (want <= base + len(starts))]
            if len(here):
                k = here - base - 1
                cend = content_ends(buf, starts[k], ends[k])
                for no, a, b in zip(here.tolist(), starts[k].tolist(), cend.tolist()):
                    out[no] = _text(data, a, b)
            base += len(starts)
    return out


def _scan(src: Path, *, delimiter: str, header: bool, head: int | str, relation: int | str, tail: int | str,
          columns: int | None) -> tuple[Bad, list, list, list, tuple | None]:
    """The file read in blocks of whole lines: (read errors, record errors ``(line, reason, record)``, the slow
    lane's parsed records ``(line, fields, text)``, the plain lines split per chunk, the column layout
    ``(expected, (head, relation, tail))``, None where no record was read)."""
    read_bad: Bad = []
    rec_bad: list[tuple[int, str, str]] = []  # (line, reason, record) of record errors
    slow_rows: list[tuple[int, list[str], str]] = []  # (line, fields, text) of parsed slow records
    done: list[_Chunk] = []
    layout = None  # (expected, cols) once the first record (the header, if any) is read
    base = 0  # lines before this block
    with open_binary(src) as fh, ThreadPoolExecutor(max_workers=THREADS) as pool:  # pyarrow kernels release the GIL
        for data in line_blocks(fh):
            buf = np.frombuffer(data, dtype=np.uint8)
            starts, ends = line_bounds(buf)
            cend = content_ends(buf, starts, ends)
            slow, plain = classify(data, buf, starts, ends, cend, first_block=base == 0)  # neither: blank lines
            # slow lane: the python rule on each line alone (read errors first, as read_lines reports them)
            for i in np.flatnonzero(~slow & ~plain).tolist():  # blank lines: dropped and counted, as decode_line does
                decode_line(data[starts[i]:ends[i]], base + i + 1, src, read_bad)
            block_rows: list[tuple[int, list[str], str]] = []
            block_bad: list[tuple[int, str, str]] = []
            for i in np.flatnonzero(slow).tolist():
                text = decode_line(data[starts[i]:ends[i]], base + i + 1, src, read_bad)
                if text is None:
                    continue
                for no, fields, raw, err in csv_records([(base + i + 1, text)], delimiter, None):
                    if fields is None:
                        block_bad.append((no, err, raw[:RECORD_CHARS]))
                    else:
                        block_rows.append((no, fields, raw))
            plain_idx = np.flatnonzero(plain)
            if layout is None:
                first_plain = base + int(plain_idx[0]) + 1 if len(plain_idx) else None
                first_slow = min([r[0] for r in block_rows] + [b[0] for b in block_bad], default=None)
                if first_plain is not None or first_slow is not None:
                    header_fields = None
                    if header:  # the first record is the header: parse it with the python rule, take it out of the data
                        first = min(x for x in (first_plain, first_slow) if x is not None)
                        if first == first_plain:
                            plain[first - base - 1] = False
                            plain_idx = plain_idx[1:]
                            rec = next(csv_records([(first, _text(data, starts[first - base - 1],
                                                                  cend[first - base - 1]))], delimiter, None))
                            header_fields = rec[1]
                        elif block_rows and block_rows[0][0] == first:
                            header_fields = block_rows.pop(0)[1]
                        else:
                            block_bad = [b for b in block_bad if b[0] != first]
                    expected, h, r, t = column_layout(src, header_fields, header=header, head=head,
                                                      relation=relation, tail=tail, columns=columns)
                    layout = (expected, (h, r, t))
            slow_rows += block_rows
            rec_bad += block_bad
            if layout is not None and len(plain_idx):  # this block's plain lines, split before the next is read
                split_one = functools.partial(_split_chunk, data=data, databuf=pa.py_buffer(data), starts=starts,
                                          ends=ends, cend=cend, plain=plain, delimiter=delimiter, expected=layout[0],
                                          cols=layout[1], base=base)
                chunks = [plain_idx[a:a + SPLIT_LINES] for a in range(0, len(plain_idx), SPLIT_LINES)]
                done += list(pool.map(lambda idx: split_one(idx=idx), chunks))
            base += len(starts)
            del data, buf, starts, ends, cend, slow, plain, plain_idx
    return read_bad, rec_bad, slow_rows, done, layout


def load_triples_vectorized(
    *, path: str, questions: str | None, split: str, delimiter: str, header: bool, head: int | str,
    relation: int | str, tail: int | str, columns: int | None, sample: int, seed: int,
) -> KGTables:
    """The ``triples`` loader's tables computed in bulk (same output as the python engine; see the module doc).
    The file is read in blocks of whole lines (``READ_BYTES``): a block's bytes and per-line arrays are freed
    before the next is read, so memory grows with the kept triples' ids and names, not with the file's bytes."""
    src = Path(path)
    f = str(src)
    require_file(src, "triples file")
    read_bad, rec_bad, slow_rows, done, layout = _scan(src, delimiter=delimiter, header=header, head=head,
                                                       relation=relation, tail=tail, columns=columns)
    read_bad.sort(key=lambda b: b[1])  # line order, as read_lines reports them
    if layout is None:
        raise LoaderInputError(f"{src}: triples file is empty (no non-blank UTF-8 line)")
    expected, cols = layout
    slow_text: dict[int, str] = {}
    slow_kept: list[tuple[int, list[str]]] = []
    for no, fields, raw in slow_rows:
        problem = record_problem(fields, expected, cols, delimiter)
        if problem:
            rec_bad.append((no, problem, raw[:RECORD_CHARS]))
        else:
            slow_kept.append((no, fields))
            slow_text[no] = raw
    if slow_kept:
        done.append(_Chunk(bad=[], lines=np.array([no for no, _ in slow_kept], dtype=np.int64), fields=[
            pc.dictionary_encode(pa.array([fl[col] for _, fl in slow_kept], pa.large_string())) for col in cols]))
    for c in done:
        rec_bad.extend(c.bad)
    lines = np.concatenate([c.lines for c in done]) if done else np.zeros(0, dtype=np.int64)
    if not len(lines):
        raise LoaderInputError(f"{src}: no valid triple (every line quarantined)")

    # ids: entities by sorted key, relations by sorted name (KGBuilder.tables), then duplicates
    keys, (hid, tid) = _global_ids([[c.fields[0] for c in done], [c.fields[2] for c in done]])
    rel_names, (rid,) = _global_ids([[c.fields[1] for c in done]])
    del done
    if slow_kept:  # slow records come last: put every kept row back in line order
        order = np.argsort(lines, kind="stable")
        lines, hid, rid, tid = lines[order], hid[order], rid[order], tid[order]
    dup = duplicate_rows(hid, rid, tid, n_entities=len(keys), n_relations=len(rel_names))
    dup_lines = [int(lines[j]) for j in np.flatnonzero(dup).tolist()]
    texts = line_texts(src, {no for no in dup_lines if no not in slow_text})  # a second read, of those lines only
    for no in dup_lines:
        text = slow_text[no] if no in slow_text else texts[no]
        rec_bad.append((no, "duplicate triple", text[:RECORD_CHARS]))
    keep = ~dup
    hid, rid, tid = hid[keep], rid[keep], tid[keep]
    # entities only of kept rows (a duplicate's entities are those of its first copy, so none is lost)
    rec_bad.sort(key=lambda x: x[0])
    bad: Bad = read_bad + [(f, no, reason, rec) for no, reason, rec in rec_bad]

    ek = _EntityKeys({})
    if questions:
        refs = _question_refs(Path(questions))
        if refs:
            found = pc.index_in(pa.array(refs, pa.large_string()), value_set=keys).to_pylist()
            ek = _EntityKeys({ref: i for ref, i in zip(refs, found) if i is not None})
        parsed = read_questions_jsonl(Path(questions), ek, bad, split=split, sample=sample, seed=seed)
    else:
        parsed = []
    keys, rel_names, cols_out, graph_ids = merge_graphs(keys=keys, rel_names=rel_names, hid=hid, rid=rid, tid=tid,
                                                        graphs=ek)
    qtable = questions_table(parsed, ek)
    entities = pa.table({S.ENTITY_ID: pa.array(np.arange(len(keys), dtype=np.int64)),
                         S.NAME: keys.cast(pa.string())}, schema=S.ENTITIES)
    relations = pa.table({S.RELATION_ID: pa.array(np.arange(len(rel_names), dtype=np.int64)),
                          S.NAME: rel_names.cast(pa.string())}, schema=S.RELATIONS)
    arrays = {S.HEAD: pa.array(cols_out[0]), S.RELATION: pa.array(cols_out[1]), S.TAIL: pa.array(cols_out[2])}
    if graph_ids is not None:
        triples = pa.table({**arrays, S.GRAPH_ID: graph_ids}, schema=S.GRAPH_TRIPLES)
    else:
        triples = pa.table(arrays, schema=S.TRIPLES)
    stats = {"self_loops": int((hid == tid).sum()) + ek.self_loops, "duplicate_triples": int(dup.sum()) + ek.duplicates,
             "graphs": len({g for *_, g in ek.rows})}
    return KGTables(entities, relations, triples, qtable, quarantine_table(bad), stats)


def merge_graphs(
    *, keys: pa.Array, rel_names: pa.Array, hid: np.ndarray, rid: np.ndarray, tid: np.ndarray, graphs: _EntityKeys,
) -> tuple[pa.Array, pa.Array, tuple[np.ndarray, np.ndarray, np.ndarray], pa.Array | None]:
    """Entity keys, relation names, (head, relation, tail) ids and graph ids once the per-question graphs'
    triples are appended (ids re-sorted over the union, as ``KGBuilder.tables``); sets the final id of every
    referenced key in ``graphs``."""
    if not graphs.rows:
        return keys, rel_names, (hid, rid, tid), None
    new = pa.array(list(graphs.new), pa.large_string())
    all_keys = pa.concat_arrays([keys, new])
    order = pc.sort_indices(all_keys).to_numpy(zero_copy_only=False)
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    g_rels = pa.array(sorted({r for _, r, _, _ in graphs.rows} - set(rel_names.to_pylist())), pa.large_string())
    all_rels = pa.concat_arrays([rel_names, g_rels])
    r_order = pc.sort_indices(all_rels).to_numpy(zero_copy_only=False)
    r_rank = np.empty(len(r_order), dtype=np.int64)
    r_rank[r_order] = np.arange(len(r_order))
    ids = {k: int(rank[i]) for k, i in graphs.entity_ids().items()}
    ids.update({k: int(rank[len(keys) + j]) for j, k in enumerate(graphs.new)})
    rel_ids = {n: int(r_rank[i]) for i, n in enumerate(all_rels.to_pylist())} if len(all_rels) < 1 << 20 else None
    if rel_ids is None:  # pragma: no cover - a huge relation vocabulary: look the graphs' names up only
        names = sorted({r for _, r, _, _ in graphs.rows})
        pos = pc.index_in(pa.array(names, pa.large_string()), value_set=all_rels).to_pylist()
        rel_ids = {n: int(r_rank[p]) for n, p in zip(names, pos)}
    gh = np.array([ids[h] for h, _, _, _ in graphs.rows], dtype=np.int64)
    gr = np.array([rel_ids[r] for _, r, _, _ in graphs.rows], dtype=np.int64)
    gt = np.array([ids[t] for _, _, t, _ in graphs.rows], dtype=np.int64)
    graphs._ids = ids
    cols = (np.concatenate([rank[hid], gh]), np.concatenate([r_rank[rid], gr]), np.concatenate([rank[tid], gt]))
    gids = pa.array([None] * len(hid) + [g for *_, g in graphs.rows], pa.string())
    return all_keys.take(pa.array(order)), all_rels.take(pa.array(r_order)), cols, gids
