"""Collect the finished G-Retriever runs (reports/gretriever/*/summary.json) into Table 3 / Table 6 against
the paper's numbers: reports/gretriever/table.md and table.json; runs made with ``stages.train_gretriever --tag T``
(reports/gretriever/T/*/summary.json) get their own table in the same file. Scores are recomputed from each
run's predictions.json under kgrag's and G-Retriever's rules (``kgrag.gretriever.report.rescore``); run times
come from the runs' run records (data/timings/gretriever/[T/]<run>/timing.json, while they describe the
reports there: ``kgrag.timings``)."""

from __future__ import annotations

from pathlib import Path

from kgrag import io, timings
from kgrag.gretriever.report import LEGEND, collect, table


def records(runs: dict, root: Path) -> dict[str, dict]:
    """The current run records (``timing.json`` under ``root``) of ``runs``, by run name."""
    found = {name: timings.read_record(name, root) for name in runs}
    return {name: rec for name, rec in found.items() if rec is not None}


def main() -> None:
    """Write the table."""
    root, times = io.REPORTS / "gretriever", io.TIMINGS / "gretriever"
    runs = collect(root)
    md, rows = table(runs, records=records(runs, times))
    md = LEGEND + md
    out = {"runs": rows}
    subs = root.iterdir() if root.is_dir() else []
    for sub in sorted(p for p in subs if p.is_dir() and any(p.glob("*/summary.json"))):
        runs_t = collect(sub)
        md_t, rows_t = table(runs_t, hide_missing=True, records=records(runs_t, times / sub.name))
        md += f"\n### Runs tagged `{sub.name}`\n\n{md_t}"
        out[sub.name] = rows_t
    (root / "table.md").write_text(md)
    io.write_json(root / "table.json", out)
    print(md)


if __name__ == "__main__":
    main()
