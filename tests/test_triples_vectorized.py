"""The triples loader's vectorized engine gives the python engine's tables and quarantine rows.

Agreement on the bad-input corpus (tests/data/bad), on generated files mixing every kind of awkward line
(seeded fuzz), on a synthetic KG sample with injected bad lines, and on the real MetaQA kb.txt.
"""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import pytest

from kgrag.kg.loaders import triples_arrow
from kgrag.kg.loaders.common import LoaderInputError
from kgrag.kg.loaders.triples import load_triples
from kgrag.kg.synth import write_synth
from tests.conftest import METAQA, need

BAD = Path(__file__).parent / "data" / "bad"
TABLES = ("entities", "relations", "triples", "questions", "quarantine")


def both(**kw):
    """(python result, vectorized result); a raised LoaderInputError is the result's message."""
    out = []
    for engine in ("python", "vectorized"):
        try:
            out.append(load_triples(engine=engine, **kw))
        except LoaderInputError as e:
            out.append(str(e))
    return out


def assert_same(py, vec) -> None:
    if isinstance(py, str) or isinstance(vec, str):
        assert py == vec
        return
    for name in TABLES:
        a, b = getattr(py, name), getattr(vec, name)
        assert a.schema == b.schema, name
        assert a.to_pylist() == b.to_pylist(), name
    assert py.stats == vec.stats


@pytest.mark.parametrize("name", ["all_bad.tsv", "blank_only.tsv", "bom.tsv", "empty.tsv", "nonutf8.tsv",
                                  "triples_bad.tsv"])
@pytest.mark.parametrize("with_questions", [False, True])
def test_agrees_on_bad_corpus(name, with_questions):
    q = str(BAD / "questions_bad.jsonl") if with_questions else None
    py, vec = both(path=str(BAD / name), questions=q)
    assert_same(py, vec)


def test_bad_corpus_quarantine_is_not_trivial():
    py, vec = both(path=str(BAD / "triples_bad.tsv"), questions=str(BAD / "questions_bad.jsonl"))
    reasons = {r["reason"] for r in vec.quarantine.to_pylist()}
    assert {"duplicate triple", "empty relation field"} <= reasons
    assert any(r.startswith("expected 3") for r in reasons)
    assert vec.stats["graphs"] >= 1  # per-question graphs merged into the vectorized tables


# ---- fuzz: files built from awkward pieces ---------------------------------------------------------------

NAMES = ["Heat", "Al Pacino", "Émile Zola", "東京", "a|b", "x,y", " padded ", "q\"uote", "back\\slash", "Ω"]
RELS = ["directed_by", "starred", "in_language", "r"]


def fuzz_file(rng: random.Random, d: str) -> bytes:
    def name():
        return rng.choice(NAMES) + (str(rng.randrange(5)) if rng.random() < 0.5 else "")

    def triple(cols=3):
        fs = [name(), rng.choice(RELS), name()] + [name() for _ in range(cols - 3)]
        return d.join(fs[:cols]).encode()

    pieces = [
        lambda: triple(),
        lambda: triple(),
        lambda: triple(2),
        lambda: triple(4),
        lambda: d.join([name(), "", name()]).encode(),  # empty relation
        lambda: d.join([" \t"[rng.randrange(2)] if d != "\t" else " ", "r", name()]).encode(),  # blank head
        lambda: d.join(["\u00a0", "r", name()]).encode(),  # Unicode-whitespace head
        lambda: d.join(["\u3000x", "r", name()]).encode(),  # starts with Unicode whitespace, not blank
        lambda: d.join([name(), "\u2003 ", name()]).encode(),  # Unicode-whitespace relation
        lambda: d.join([name(), "r", "\u00a0\u2003"]).encode(),  # Unicode-whitespace tail
        lambda: b"",  # empty line
        lambda: b"   ",  # blank line
        lambda: "\u00a0\u2003".encode(),  # Unicode-blank line
        lambda: "\x1c\x1f".encode(),  # ASCII control whitespace
        lambda: triple() + b"\r",  # CRLF
        lambda: triple() + b"\r\r",  # CR CR LF
        lambda: name().encode() + b"\r" + triple(),  # CR inside: malformed CSV record
        lambda: name().encode() + b"\x00" + triple(),  # NUL inside
        lambda: b"\xff\xfe" + triple(),  # not UTF-8
        lambda: triple()[:-1] + b"\xc3",  # truncated multi-byte character
        lambda: "é".encode() + triple(),  # starts non-ASCII
        lambda: b"x" * 131_073 + d.encode() + b"r" + d.encode() + b"y",  # over csv's field limit
    ]
    weights = [30, 30, 2, 2, 2, 2, 1, 1, 1, 1, 2, 2, 1, 1, 2, 1, 1, 1, 1, 1, 3, 0.05]
    lines = []
    for _ in range(rng.randrange(1, 60)):
        lines.append(rng.choices(pieces, weights)[0]())
        if rng.random() < 0.1 and lines:
            lines.append(rng.choice(lines))  # duplicate of an earlier line
    body = b"\n".join(lines)
    if rng.random() < 0.2:
        body = b"\xef\xbb\xbf" + body  # byte-order mark
    if rng.random() < 0.7:
        body += b"\n"
    return body


@pytest.mark.parametrize("seed", range(40))
def test_agrees_on_fuzzed_files(tmp_path, seed, monkeypatch):
    rng = random.Random(seed)
    d = rng.choice(["\t", "|", ",", " ", ";"])
    path = tmp_path / ("kg.tsv.gz" if seed % 7 == 0 else "kg.tsv")
    body = fuzz_file(rng, d)
    path.write_bytes(gzip.compress(body) if path.suffix == ".gz" else body)
    if seed % 2:  # the byte-count classification instead of the slow lane for possibly-blank lines
        monkeypatch.setattr(triples_arrow, "UNSURE_SLOW_MAX", 0)
        monkeypatch.setattr(triples_arrow, "UTF8_BLOCK", 3)  # small blocks: a bad line spoils only its own
        monkeypatch.setattr(triples_arrow, "SPLIT_LINES", 4)
    if seed % 3 != 2:  # the file read in blocks of whole lines: one line a block (1 byte), a few, or the whole
        monkeypatch.setattr(triples_arrow, "READ_BYTES", {0: 1, 1: 37}[seed % 3] if seed % 4 else 200)
    kw: dict = {"path": str(path), "delimiter": d}
    if seed % 5 == 1:
        kw.update(header=True)
    elif seed % 5 == 2:
        kw.update(columns=4)
    elif seed % 5 == 3:
        kw.update(head=2, relation=1, tail=0)
    py, vec = both(**kw)
    assert_same(py, vec)


def test_line_blocks_are_whole_lines():
    import io

    body = b"a\tb\tc\n" * 5 + b"x" * 50 + b"\n\nlast-no-lf"
    for size in (1, 3, 8, 64, 10_000):
        blocks = list(triples_arrow.line_blocks(io.BytesIO(body), size))
        assert b"".join(blocks) == body and all(b.endswith(b"\n") for b in blocks[:-1])
        assert len(blocks) > 1 or size == 10_000


@pytest.mark.parametrize("read_bytes", [None, 1, 5])
def test_header_by_name(tmp_path, monkeypatch, read_bytes):
    """The header is the first record, also when the blocks before it hold only blank lines (1 byte a read:
    a block a line)."""
    if read_bytes:
        monkeypatch.setattr(triples_arrow, "READ_BYTES", read_bytes)
    p = tmp_path / "kg.csv"
    p.write_text("\n  \nsubject,predicate,object,note\nHeat,directed_by,Michael Mann,x\nHeat,,A,y\nB,r,C\n")
    py, vec = both(path=str(p), delimiter=",", header=True, head="subject", relation="predicate", tail="object")
    assert_same(py, vec)
    assert vec.triples.num_rows == 1 and vec.quarantine.num_rows == 4  # 2 blank lines, 2 bad records


def test_questions_with_graphs_and_sampling(tmp_path):
    kgf = tmp_path / "kg.tsv"
    kgf.write_text("Heat\tdirected_by\tMichael Mann\nHeat\tstarred_actors\tAl Pacino\nTop Gun\trelease_year\t1986\n")
    rows = [
        {"id": "q1", "question": "who directed [Heat]", "topic_entities": ["Heat"], "answers": ["Michael Mann"]},
        {"id": "q2", "question": "year of [Top Gun]", "topic_entities": "Top Gun", "answers": [1986]},
        {"id": "q3", "question": "[A]?", "topic_entities": ["A"], "answers": ["B", "not in kg"],
         "graph": [["A", "links", "B"], ["Heat", "links", "A"], ["A", "links", "B"], ["Zed", "zz", "Zed"]]},
        {"id": "q4", "question": "[Heat] again", "topic_entities": ["Heat"], "answers": ["Al Pacino"]},
    ]
    qf = tmp_path / "q.jsonl"
    qf.write_text("".join(json.dumps(r) + "\n" for r in rows))
    for sample in (0, 2):
        py, vec = both(path=str(kgf), questions=str(qf), sample=sample, seed=3)
        assert_same(py, vec)
    py, vec = both(path=str(kgf), questions=str(qf))
    assert "graph_id" in vec.triples.column_names and vec.stats["duplicate_triples"] == 1


def test_engine_choice(tmp_path):
    p = tmp_path / "kg.csv"
    p.write_text('"a,b",r,c\n')
    with pytest.raises(LoaderInputError, match="quotechar"):
        load_triples(path=str(p), delimiter=",", quotechar='"', engine="vectorized")
    kg = load_triples(path=str(p), delimiter=",", quotechar='"')  # auto: the python engine handles quoting
    assert kg.entities.column("name").to_pylist() == ["a,b", "c"]


@pytest.mark.parametrize("read_bytes", [None, 4096])
def test_agrees_on_synth_sample_with_bad_lines(tmp_path, monkeypatch, read_bytes):
    """Also read in 4 KiB blocks (about 150 of them): line numbers, bad lines and duplicates (whose text is read
    again from the file) as in one block."""
    if read_bytes:
        monkeypatch.setattr(triples_arrow, "READ_BYTES", read_bytes)
    m = write_synth(out=tmp_path / "s", n_triples=20_000, entities_per_triple=0.3, n_relations=6, n_types=3, skew=1.0,
                    relation_skew=1.0, questions=30, hops=(1, 2), max_answers=30, graph_extra=5, bad_lines=30, seed=5)
    py, vec = both(path=str(tmp_path / "s" / "triples.tsv"), questions=str(tmp_path / "s" / "questions.jsonl"))
    assert_same(py, vec)
    assert vec.triples.num_rows == m["triples"] and vec.entities.num_rows == m["entities"]
    assert vec.quarantine.num_rows == 30 and vec.questions.num_rows == 30
    assert vec.stats["duplicate_triples"] == 10


def test_agrees_on_real_metaqa_kb():
    kb = METAQA / "kb.txt"
    need(kb.exists(), "real MetaQA data not found")
    py, vec = both(path=str(kb), delimiter="|")
    assert_same(py, vec)
    assert vec.triples.num_rows > 100_000
