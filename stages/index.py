"""Stage index: embed relation names (and optionally every entity name and triple) with sentence-transformers."""

from __future__ import annotations

import sys

from stages._common import params_from_argv, timed
from kgrag import io, timings
from kgrag.env import stable_vectors
from kgrag.index.build import RelationNames, build_index
from kgrag.kg.store import KGStore


def main(argv: list[str] | None = None) -> None:
    """Run the stage."""
    p = params_from_argv(__doc__, argv).index
    stable_vectors()  # data/index the same bytes on AVX2 and AVX-512 machines (kgrag.env.STABLE_VECTORS)
    with timed("index", timings.stage_dir("index"), outputs=[io.INDEX / "relations.parquet"]) as info:
        db = io.VALIDATED / "kg.duckdb"
        # a lazy index without triples embeds the relation names alone: no triple loaded (at 100M triples the
        # whole in-memory store took this stage to 14 GB for 24 names)
        kg = RelationNames(db) if p.entities == "lazy" and not p.embed_triples else KGStore(db)
        meta = build_index(kg, io.INDEX, model=p.model, batch_size=p.batch_size,
                           embed_triples=p.embed_triples, entities=p.entities, log=lambda s: print(f"[index] {s}", file=sys.stderr))
        info.update(entities=meta["entities"], model=p.model)


if __name__ == "__main__":
    main()
