"""Memory bounded by the chunk, not the split (issue "Full experiments", item 2): the evaluate stage streams its
inputs (``io.RowsById``) and its output (``io.stream_tables``) a chunk at a time, and gives the same
predictions and metrics as scoring the whole split at once."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kgrag import io
from tests.conftest import run


def _parquet(path: Path, rows: list[dict], row_group_size: int = 4) -> Path:
    pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=row_group_size)
    return path


def test_rows_by_id_in_order_holds_about_one_batch(tmp_path):
    f = _parquet(tmp_path / "r.parquet", [{"id": f"q{i}", "v": i} for i in range(40)])
    rows = io.RowsById(f, "id", batch_size=4)
    most = 0
    for start in range(0, 40, 3):
        ids = [f"q{i}" for i in range(start, min(start + 3, 40))]
        got = rows.take(ids)
        assert [r["id"] for r in got] == ids and [r["v"] for r in got] == list(range(start, start + len(ids)))
        most = max(most, rows.held)
    assert most < 4  # never more than one batch read ahead
    assert rows.held == 0


def test_rows_by_id_any_order_and_missing_keys(tmp_path):
    f = _parquet(tmp_path / "r.parquet", [{"id": f"q{i}", "v": i} for i in range(10)])
    rows = io.RowsById(f, "id", batch_size=3)
    assert [r["v"] for r in rows.take(["q9", "q0"])] == [9, 0]  # asked order, whatever the file's
    assert rows.held == 8  # what it skipped to find q9 is held, not lost
    assert [r["v"] for r in rows.take(["q5", "nope", "q1"])] == [5, 1]  # a key without a row is left out
    assert rows.take(["q9"]) == []  # a row is handed out once
    assert sorted(r["v"] for r in rows.take([f"q{i}" for i in range(10)])) == [2, 3, 4, 6, 7, 8]


def test_stream_tables_unifies_schemas(tmp_path):
    """A column all null in one chunk and typed in another, a column one chunk lacks: one file, unified types."""
    parts = [pa.Table.from_pylist([{"a": 1, "err": None}]),
             pa.Table.from_pylist([{"a": 2, "err": "boom", "extra": 1.5}]),
             pa.Table.from_pylist([{"a": 3, "err": None, "extra": None}])]
    out = tmp_path / "p.parquet"
    assert io.stream_tables(out, iter(parts)) == 3
    t = pq.read_table(out)
    assert t.schema.field("err").type == pa.string() and t.schema.field("extra").type == pa.float64()
    assert t.to_pylist() == [{"a": 1, "err": None, "extra": None}, {"a": 2, "err": "boom", "extra": 1.5},
                             {"a": 3, "err": None, "extra": None}]
    assert pq.ParquetFile(out).metadata.num_row_groups == 3
    assert not [p for p in tmp_path.iterdir() if p.name != "p.parquet"]  # spill files gone


def test_stream_tables_one_table_is_write_parquet(tmp_path):
    t = pa.Table.from_pylist([{"a": i, "s": str(i) * i} for i in range(50)])
    io.stream_tables(tmp_path / "a.parquet", [t])
    io.write_parquet(tmp_path / "b.parquet", t)
    assert (tmp_path / "a.parquet").read_bytes() == (tmp_path / "b.parquet").read_bytes()
    with pytest.raises(ValueError, match="no table"):
        io.stream_tables(tmp_path / "c.parquet", [])


def test_evaluate_stage_in_chunks_equals_the_whole_split(shared_project):
    """The real evaluate stage on the e2e project's real outputs (embedded SmolLM2, 12 questions), 5 questions a
    chunk: predictions.parquet holds the same rows (3 row groups: it was written a chunk at a time),
    metrics.json and the recall CSV are identical to the first run's (one chunk)."""
    p = shared_project
    before = {f: (p / f).read_bytes() for f in ("reports/metrics.json", "reports/plots/recall_vs_context.csv")}
    whole = pq.read_table(p / "reports/predictions.parquet")
    run([sys.executable, "-c", "import stages.evaluate as e; e.CHUNK = 5; e.main([])"], p)
    after = pq.read_table(p / "reports/predictions.parquet")
    assert pq.ParquetFile(p / "reports/predictions.parquet").metadata.num_row_groups == 3
    assert after.num_rows == whole.num_rows == 12
    assert after.to_pylist() == whole.to_pylist()
    assert json.loads((p / "reports/metrics.json").read_bytes()) == json.loads(before["reports/metrics.json"])
    assert (p / "reports/plots/recall_vs_context.csv").read_bytes() == before["reports/plots/recall_vs_context.csv"]


def test_report_rows_hold_text_only_where_the_report_shows_it(tmp_path):
    """report.md's examples and report.html's views (the first ``full`` rows) and report.md's traces (the first
    ``traces`` rows with one) get their whole rows; every other row its scores without traces and contexts."""
    from stages.report import report_rows

    rows = [{"question_id": f"q{i}", "hit_at_1": float(i % 2), "trace": (f"t{i}" if i in (1, 5, 7, 9) else None),
             "retrieved_triples": f"ctx{i}"} for i in range(12)]
    f = _parquet(tmp_path / "p.parquet", rows, row_group_size=3)
    got = report_rows(f, full=2, traces=3)
    assert [r["question_id"] for r in got] == [f"q{i}" for i in range(12)]
    assert [r["hit_at_1"] for r in got] == [float(i % 2) for i in range(12)]
    whole = [i for i, r in enumerate(got) if "trace" in r]
    assert whole == [0, 1, 5, 7]  # the first 2 rows, and the first 3 rows with a trace (1, 5, 7)
    assert [got[i] for i in whole] == [rows[i] for i in whole]
    assert all("retrieved_triples" not in got[i] for i in range(12) if i not in whole)
    assert [r for r in got if "trace" in r and r["trace"]][:3] == [rows[1], rows[5], rows[7]]
