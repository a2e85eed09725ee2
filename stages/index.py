"""Stage index: embed entity and relation names (and optionally triples) with sentence-transformers."""

from __future__ import annotations

import sys

import numpy as np

from stages._common import params_from_argv, timed
from kgrag import io, timings
from kgrag.index.embed import encode, write_vectors
from kgrag.index.zeroshot import entity_text
from kgrag.kg.store import KGStore


def main(argv: list[str] | None = None) -> None:
    """Run the stage."""
    p = params_from_argv(__doc__, argv).index
    with timed("index", timings.stage_dir("index"), outputs=[io.INDEX / "entities.parquet"]) as info:
        kg = KGStore(io.VALIDATED / "kg.duckdb")
        ids = np.nonzero(kg.entity_names != None)[0]  # noqa: E711 (numpy elementwise)
        print(f"[index] embedding {len(ids)} entity names with {p.model}", file=sys.stderr)
        write_vectors(io.INDEX / "entities.parquet", ids,
                      encode([entity_text(n) for n in kg.names(ids)], model=p.model, batch_size=p.batch_size,
                             progress=True))
        rids = np.arange(len(kg.relation_names))
        rel_text = [str(n).replace("_", " ") for n in kg.relation_names]
        write_vectors(io.INDEX / "relations.parquet", rids, encode(rel_text, model=p.model, batch_size=p.batch_size))
        if p.embed_triples:
            named = kg.named_triples(kg.heads, kg.relations, kg.tails)
            texts = [f"{h} {r.replace('_', ' ')} {t}" for h, r, t in named]
            print(f"[index] embedding {len(texts)} triples", file=sys.stderr)
            write_vectors(io.INDEX / "triples.parquet", np.arange(len(texts)),
                          encode(texts, model=p.model, batch_size=p.batch_size, progress=True))
        io.write_json(io.INDEX / "meta.json", {"model": p.model, "entities": int(len(ids)),
                                                "relations": int(len(rids)), "triples": bool(p.embed_triples)})
        info.update(entities=int(len(ids)), model=p.model)


if __name__ == "__main__":
    main()
