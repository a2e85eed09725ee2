"""Stage ingest: dataset files → Parquet tables (the DVC output) + the DuckDB file built from them
(``kgrag.kg.duckdb_io``); unparseable lines → quarantine."""

from __future__ import annotations

from stages._common import params_from_argv, timed
from kgrag import io, schema as S, timings
from kgrag.kg.loaders.common import kept_rows, screen_tables
from kgrag.registry import LOADERS
from kgrag.kg.duckdb_io import TABLES, write_tables


def main(argv: list[str] | None = None) -> None:
    """Run the stage."""
    p = params_from_argv(__doc__, argv).data
    outputs = [io.INGEST / f"{name}.parquet" for name in TABLES]  # not kg.duckdb: it is rebuilt when stale
    with timed("ingest", timings.stage_dir("ingest"), outputs=outputs) as info:
        loader = LOADERS.get(p.dataset).impl
        kg = loader(**p.loader_kwargs())  # the selected loader's validated params + sample + seed
        kg = screen_tables(kg, max_question_chars=p.max_question_chars)  # control characters, long questions
        if p.link_entities:  # questions as people type them: no brackets, topics linked from the text
            from kgrag.kg.linking import link_questions

            kg, linked = link_questions(kg)
            info.update(link_entities=linked)
        tables = {"entities": kg.entities, "relations": kg.relations, "triples": kg.triples, "questions": kg.questions}
        write_tables(io.INGEST, tables)
        io.write_parquet(io.QUARANTINE / "ingest.parquet", kg.quarantine)
        # quarantined = lines or rows dropped + those kept and recorded (a question whose topic is not in the KG)
        kept = kept_rows(kg.quarantine)
        info.update({n: t.num_rows for n, t in tables.items()}, quarantined=kg.quarantine.num_rows,
                    quarantined_kept=kept, seed=p.seed, dataset=p.dataset, **kg.stats)
    print(f"[ingest] {info}")
    if kg.quarantine.num_rows:
        from collections import Counter

        top = Counter(kg.quarantine.column(S.REASON).to_pylist()).most_common(3)
        also = (f", {kept} of them questions kept with no topic entity (the given one is not in the KG)"
                if kept else "")
        print(f"[ingest] {kg.quarantine.num_rows} lines or rows quarantined{also} (e.g. "
              + "; ".join(f"{n} × {r}" for r, n in top) + f"): see {io.QUARANTINE / 'ingest.parquet'}")


if __name__ == "__main__":
    main()
