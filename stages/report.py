"""Stage report: reports/report.md with the metrics table, breakdowns, examples, traces and a PNG figure."""

from __future__ import annotations

from stages._common import params_from_argv
from kgrag import io
from kgrag.report import figure_recall_vs_context, render


def main(argv: list[str] | None = None) -> None:
    """Run the stage."""
    p = params_from_argv(__doc__, argv).report
    metrics = io.read_json(io.REPORTS / "metrics.json")
    rows = io.read_parquet(io.REPORTS / "predictions.parquet").to_pylist()
    fig = io.REPORTS / "figures" / "recall_vs_context.png"
    figure_recall_vs_context(rows, fig)
    validation = io.read_json(io.VALIDATED / "summary.json") if (io.VALIDATED / "summary.json").exists() else None
    (io.REPORTS / "report.md").write_text(
        render(metrics=metrics, rows=rows, figure="figures/recall_vs_context.png", examples=p.examples,
               validation=validation, traces=p.traces)
    )
    print(f"[report] wrote {io.REPORTS / 'report.md'}")


if __name__ == "__main__":
    main()
