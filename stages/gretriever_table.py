"""Collect the finished G-Retriever runs (reports/gretriever/*/summary.json) into Table 3 / Table 6 against
the paper's numbers: reports/gretriever/table.md and table.json; runs made with ``stages.train --tag T``
(reports/gretriever/T/*/summary.json) get their own table in the same file. Scores are recomputed from each
run's predictions.json under kgrag's and G-Retriever's rules (``kgrag.gretriever.report.rescore``)."""

from __future__ import annotations

from kgrag import io
from kgrag.gretriever.report import LEGEND, collect, table


def main() -> None:
    """Write the table."""
    root = io.REPORTS / "gretriever"
    md, rows = table(collect(root))
    md = LEGEND + md
    out = {"runs": rows}
    subs = root.iterdir() if root.is_dir() else []
    for sub in sorted(p for p in subs if p.is_dir() and any(p.glob("*/summary.json"))):
        md_t, rows_t = table(collect(sub), hide_missing=True)
        md += f"\n### Runs tagged `{sub.name}`\n\n{md_t}"
        out[sub.name] = rows_t
    (root / "table.md").write_text(md)
    io.write_json(root / "table.json", out)
    print(md)


if __name__ == "__main__":
    main()
