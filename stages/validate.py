"""Stage validate: great-expectations checks; bad rows → data/quarantine/validate.parquet, clean KG → Parquet
tables (the DVC output) + the DuckDB file built from them (``kgrag.kg.duckdb_io``)."""

from __future__ import annotations

import sys

from stages._common import params_from_argv, timed
from kgrag import io, timings
from kgrag.kg.duckdb_io import DB_NAME, TABLES, read_tables, write_tables
from kgrag.kg.validate import reason_counts, validate_tables


def main(argv: list[str] | None = None) -> None:
    """Run the stage; exit 1 when a table's bad share passes ``validate.max_bad_fraction``."""
    p = params_from_argv(__doc__, argv).validate_
    outputs = [io.VALIDATED / f"{name}.parquet" for name in TABLES]  # not kg.duckdb: it is rebuilt when stale
    with timed("validate", timings.stage_dir("validate"), outputs=outputs) as info:
        res = validate_tables(read_tables(io.INGEST / DB_NAME))
        io.write_parquet(io.QUARANTINE / "validate.parquet", res.quarantine)
        write_tables(io.VALIDATED, res.tables)
        ingest_q = io.read_parquet(io.QUARANTINE / "ingest.parquet")
        summary = {**res.summary, "ingest_quarantined": ingest_q.num_rows, "max_bad_fraction": p.max_bad_fraction,
                   "quarantine_reasons": reason_counts({"ingest": ingest_q, "validate": res.quarantine})}
        io.write_json(io.VALIDATED / "summary.json", summary)
        info.update({n: v["bad"] for n, v in res.summary["tables"].items()})
    over = {n: v for n, v in res.summary["tables"].items() if v["bad_fraction"] > p.max_bad_fraction}
    for name, v in res.summary["tables"].items():
        print(f"[validate] {name}: {v['rows']} rows, {v['bad']} quarantined", file=sys.stderr)
    ans = res.summary.get("answerable")
    if ans and ans["not_answerable"]:
        print(f"[validate] questions: {ans['not_answerable']} of {ans['questions']} have no gold answer in the KG "
              f"(or their graph), no topic entity ({ans.get('no_topic', 0)}) or a topic entity not in the KG: kept, "
              "flagged answerable=false and scored as misses", file=sys.stderr)
    if over:
        detail = ", ".join(f"{n}: {v['bad']}/{v['rows']} bad ({v['bad_fraction']:.1%})" for n, v in over.items())
        print(f"error: validation failed, bad rows above validate.max_bad_fraction={p.max_bad_fraction}: {detail}; "
              f"see {io.QUARANTINE / 'validate.parquet'}", file=sys.stderr)
        raise SystemExit(1)


if __name__ == "__main__":
    main()
