"""Collect the finished G-Retriever runs (reports/gretriever/*/summary.json) into Table 3 / Table 6 against
the paper's numbers: reports/gretriever/table.md and table.json."""

from __future__ import annotations

from kgrag import io
from kgrag.gretriever.report import collect, table


def main() -> None:
    """Write the table."""
    root = io.REPORTS / "gretriever"
    md, rows = table(collect(root))
    (root / "table.md").write_text(md)
    io.write_json(root / "table.json", rows)
    print(md)


if __name__ == "__main__":
    main()
