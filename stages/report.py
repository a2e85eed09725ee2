"""Stage report: reports/report.md with the metrics table, breakdowns, examples, traces and a PNG figure, and
reports/report.html, the browser view of every question (docs/report.md). Both show the run records too
(reports/timings.json, data/timings/: kgrag.timings) when they are there, so they are no DVC outputs."""

from __future__ import annotations

import time

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from stages._common import params_from_argv
from kgrag import io, schema as S, timings
from kgrag.evaluation.evaluate import TEXT_COLUMNS
from kgrag.kg.duckdb_io import read_tables
from kgrag.reporting.report import figure_recall_vs_context, render
from kgrag.reporting.report_html import run_report
from kgrag.experiment import Experiment, Files
from kgrag.kg.store import resolve_store


def report_rows(path, *, full: int, traces: int) -> list[dict]:
    """predictions.parquet's rows for the report, holding the text columns (``TEXT_COLUMNS``: traces, contexts)
    only where the report shows them: the first ``full`` rows (report.md's examples, report.html's views) and the
    first ``traces`` rows with a trace (report.md's traces); every other row has its scores, question and
    answers (the lists, the tables and the figure). The trace column is scanned a batch at a time."""
    names = pq.ParquetFile(path).schema_arrow.names
    slim = [c for c in names if c not in TEXT_COLUMNS]
    rows = pq.read_table(path, columns=slim).to_pylist()
    want = set(range(min(full, len(rows))))
    if traces and S.TRACE in names:
        seen, found = 0, 0
        for b in io.iter_batches(path, [S.TRACE]):
            for i, t in enumerate(b.column(0).to_pylist()):
                if t and found < traces:
                    want.add(seen + i)
                    found += 1
            seen += b.num_rows
            if found >= traces:
                break
    if want:
        order = sorted(want)
        for i, r in zip(order, io.take_rows(path, order).to_pylist()):
            rows[i] = r
    return rows


def main(argv: list[str] | None = None) -> None:
    """Run the stage."""
    params = params_from_argv(__doc__, argv)
    params = resolve_store(params, Files.of().db)  # a KG over the budget of store: memory stops here, at once
    p = params.report
    metrics = io.read_json(io.REPORTS / "metrics.json")
    run = io.read_json(io.REPORTS / "timings.json") if (io.REPORTS / "timings.json").exists() else None
    rows = report_rows(io.REPORTS / "predictions.parquet", full=max(p.examples, p.html_max_questions),
                       traces=p.traces)
    fig = io.REPORTS / "figures" / "recall_vs_context.png"
    figure_recall_vs_context(rows, fig)
    # per question: wall times and how each LLM call was obtained (absent when the records are stale or gone)
    rows = timings.with_records(rows, timings.read_questions("retrieve"), timings.read_questions("generate"))
    validation = io.read_json(io.VALIDATED / "summary.json") if (io.VALIDATED / "summary.json").exists() else None
    md = render(metrics=metrics, rows=rows, figure="figures/recall_vs_context.png", examples=p.examples,
                validation=validation, traces=p.traces, timings=run)
    (io.REPORTS / "report.md").write_text(md)
    print(f"[report] wrote {io.REPORTS / 'report.md'}")

    t0 = time.perf_counter()
    # the experiment's store (retrieve.store, chosen before the report is read); names only: either store serves them
    kg = Experiment(params).kg
    # the questions with a view only: their retrieved rows (read in order until found) and question rows
    ids = [r[S.QUESTION_ID] for r in rows[: p.html_max_questions]]
    qtable = read_tables(io.VALIDATED / "kg.duckdb", ("questions",))["questions"]
    page = run_report(
        rows=rows, retrieved=io.RowsById(io.RETRIEVE / "retrieved.parquet", S.QUESTION_ID).take(ids),
        questions=qtable.filter(pc.is_in(qtable[S.QUESTION_ID], pa.array(ids, qtable.schema.field(S.QUESTION_ID).type)))
        .to_pylist(),
        entity_name=kg.names, relation_name=lambda ids: [str(x) for x in kg.relation_names[np.asarray(ids, dtype=np.int64)]],
        report_md=md, images={"figures/recall_vs_context.png": fig.read_bytes()},
        max_questions=p.html_max_questions, seed=p.html_seed)
    out = io.REPORTS / "report.html"
    out.write_text(page, encoding="utf-8")
    print(f"[report] wrote {out} ({len(page.encode()) / 1e6:.2f} MB, {min(len(rows), p.html_max_questions)} of "
          f"{len(rows)} questions with a view, {time.perf_counter() - t0:.1f} s)")


if __name__ == "__main__":
    main()
