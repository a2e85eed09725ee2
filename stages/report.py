"""Stage report: reports/report.md with the metrics table, breakdowns, examples, traces and a PNG figure, and
reports/report.html, the browser view of every question (docs/report.md). Both show the run records too
(reports/timings.json, data/timings/: kgrag.timings) when they are there, so they are no DVC outputs."""

from __future__ import annotations

import time

import numpy as np

from stages._common import params_from_argv
from kgrag import io, timings
from kgrag.kg.duckdb_io import read_tables
from kgrag.reporting.report import figure_recall_vs_context, render
from kgrag.reporting.report_html import run_report
from kgrag.experiment import Experiment


def main(argv: list[str] | None = None) -> None:
    """Run the stage."""
    params = params_from_argv(__doc__, argv)
    p = params.report
    metrics = io.read_json(io.REPORTS / "metrics.json")
    run = io.read_json(io.REPORTS / "timings.json") if (io.REPORTS / "timings.json").exists() else None
    rows = io.read_parquet(io.REPORTS / "predictions.parquet").to_pylist()
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
    kg = Experiment(params).kg  # the experiment's store (retrieve.store); names only: either store serves them
    page = run_report(
        rows=rows, retrieved=io.read_parquet(io.RETRIEVE / "retrieved.parquet").to_pylist(),
        questions=read_tables(io.VALIDATED / "kg.duckdb", ("questions",))["questions"].to_pylist(),
        entity_name=kg.names, relation_name=lambda ids: [str(x) for x in kg.relation_names[np.asarray(ids, dtype=np.int64)]],
        report_md=md, images={"figures/recall_vs_context.png": fig.read_bytes()},
        max_questions=p.html_max_questions, seed=p.html_seed)
    out = io.REPORTS / "report.html"
    out.write_text(page, encoding="utf-8")
    print(f"[report] wrote {out} ({len(page.encode()) / 1e6:.2f} MB, {min(len(rows), p.html_max_questions)} of "
          f"{len(rows)} questions with a view, {time.perf_counter() - t0:.1f} s)")


if __name__ == "__main__":
    main()
