"""Building an embedding index: the files :class:`kgrag.index.embed.EmbeddingIndex` reads, from a KG store."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from kgrag import schema as S
from kgrag.index.embed import encode, write_vectors
from kgrag.index.zeroshot import entity_text
from kgrag.io import write_json


class RelationNames:
    """What :func:`build_index` reads of a KG for a lazy index without triples: its relation names, id-indexed as
    :class:`kgrag.kg.store.KGStore` holds them, read from the KG's DuckDB file without loading a triple (at 100M
    triples the in-memory store took the index stage to 14 GB to embed 24 relation names)."""

    def __init__(self, db: str | Path) -> None:
        from kgrag.kg.duckdb_io import read_tables

        rel = read_tables(db, ("relations",))["relations"]
        ids = np.asarray(rel.column(S.RELATION_ID).to_numpy(), dtype=np.int64)
        self.relation_names = np.empty(int(ids.max()) + 1 if len(ids) else 0, dtype=object)
        self.relation_names[ids] = rel.column(S.NAME).to_pylist()


def build_index(kg, folder: str | Path, *, model: str, batch_size: int = 256, embed_triples: bool = False,
                entities: str = "all", log=lambda s: None) -> dict:
    """Embed ``kg``'s entity names, relation names and (``embed_triples``) triples into ``folder``: the files
    :class:`EmbeddingIndex` reads (the ``index`` stage's output; the tune_answer_scorer stage's index of a training
    split's own graphs). Entity names as :func:`kgrag.index.zeroshot.entity_text`, relation names with ``_`` read as
    spaces, a triple as ``head relation tail``. ``entities: lazy`` embeds no entity name: readers encode the names
    they need when first read (:mod:`kgrag.index.entity_vectors`); ``all`` writes every name's vector. Returns the
    ``meta.json`` it writes."""
    if entities not in ("all", "lazy"):
        raise ValueError(f"index.entities: {entities!r} is not one of all, lazy")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    stale = folder / "entities.parquet"
    if entities == "lazy":
        stale.unlink(missing_ok=True)  # a lazy index holds no entity table (a reader would take it as current)
        n_ent = "lazy"
    else:
        ids = np.nonzero(kg.entity_names != None)[0]  # noqa: E711 (numpy elementwise)
        log(f"embedding {len(ids)} entity names with {model}")
        write_vectors(stale, ids, encode([entity_text(n) for n in kg.names(ids)], model=model,
                                         batch_size=batch_size, progress=True))
        n_ent = int(len(ids))
    rids = np.arange(len(kg.relation_names))
    rel_text = [str(n).replace("_", " ") for n in kg.relation_names]
    write_vectors(folder / "relations.parquet", rids, encode(rel_text, model=model, batch_size=batch_size))
    if embed_triples:
        named = kg.named_triples(kg.heads, kg.relations, kg.tails)
        texts = [f"{h} {r.replace('_', ' ')} {t}" for h, r, t in named]
        log(f"embedding {len(texts)} triples")
        write_vectors(folder / "triples.parquet", np.arange(len(texts)),
                      encode(texts, model=model, batch_size=batch_size, progress=True))
    meta = {"model": model, "entities": n_ent, "relations": int(len(rids)), "triples": bool(embed_triples)}
    write_json(folder / "meta.json", meta)
    return meta
