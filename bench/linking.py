"""Benchmark: entity linking of questions as people type them (``kgrag.kg.linking``, the rule ``data.link_entities``,
``kgrag ask`` and ``find_entities`` use), on MetaQA and off it.

Four parts, each scored by whether the linked topic entities hold every gold topic (``all_gold``), whether the
first linked entity is a gold topic (``first``), whether the linked set is exactly the gold set (``exact``: no
extra topic), and how many questions got no entity (``no_entity``); shares with their bootstrap 95% interval:

- ``metaqa``: MetaQA questions of every hop count (``--per-hop`` of each, seeded) with their ``[brackets]``
  removed, linked over the whole MetaQA KG (the ``metaqa`` loader's tables, as ingest links them); gold = the
  bracketed entity. Beside it, the rule without the relation fit (a reference).
- ``transfer``: the IRN release's WorldCup2014 (``WC-P2`` two-hop path questions, ``WC-C`` conjunctive questions
  naming two topics) and PathQuestion-Large (``PQL-2H``, ``PQL-3H``) over their own KBs (the ``irn`` loader): gold
  = the gold path's subject (``WC-C``: both topics of its sixth field). Names use underscores (``Tigres_UANL``).
- ``synthetic``: a SYNTHETIC KG whose entities are named by ids (``Q0000042``) and named by a label table
  (``entity<TAB>name`` lines: made-up names, a share of them homonyms, some entities with an alias, some names
  written with underscores), loaded by the ``triples`` loader with ``names``; questions over one relation of a
  topic drawn uniformly among entities with an out-edge (``uniform``) or in proportion to its degree
  (``popular``: the assumption behind a popularity prior), typing the topic's label (as written, lower-cased, or
  with spaces for underscores) or its alias. The homonym questions are also scored without the degree prior.
- ``duckdb``: linking time on a DuckDB store (``DuckKGStore``) of a SYNTHETIC KG of ``--big-entities`` entities
  (labels and aliases as above, ``kg.duckdb`` written by ``write_duckdb``, which builds the indexed
  ``name_lookup`` table): ms per question (median, 90th percentile, mean) over ``--big-questions`` questions after
  a warm-up, the links compared with the in-memory rule's (``ArrayKG`` over the same tables), and, as the
  reference, the ms of the former look-up (``lower(name) IN (...)``, a scan of every name) on a few questions.

``--part dev`` measures the dev parts (MetaQA dev files with another seed, the transfer KGs' dev halves, a
synthetic KG of another seed) for every rule variant (``kgrag.kg.linking.ORDER`` / ``PRIOR`` / ``SECOND``) and writes
``reports/bench/linking_dev.json``: the defaults were chosen there. ``--part test`` (default) measures the chosen
rule once on the test parts and writes ``reports/bench/linking.json``.

    python -m bench.linking --part dev
    python -m bench.linking --part test
"""

from __future__ import annotations

import argparse
import re
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.common import write_result

from kgrag import schema as S
from kgrag.evaluation.metrics import bootstrap_ci
from kgrag.kg import linking
from kgrag.registry import LOADERS

TRANSFER = {"WC-P2": ("wc2014/WC2014.txt", "wc2014/WC-P2.txt"), "WC-C": ("wc2014/WC2014.txt", "wc2014/WC-C.txt"),
            "PQL-2H": ("pathquestion_large/PQL2-KB.txt", "pathquestion_large/PQL-2H.txt"),
            "PQL-3H": ("pathquestion_large/PQL3-KB.txt", "pathquestion_large/PQL-3H.txt")}
#: seeds of each part: the MetaQA sample, the synthetic KG and its questions
SEEDS = {"dev": 1, "test": 0}
#: the rule variants the dev part compares (``link``'s ``order`` / ``second``)
ORDERS = ("exact,fit,length", "fit,exact,length", "exact,length,fit")
PRIORS = (True, False)
SECONDS = ("exact+fit", "exact", "fit", "all", "none")
SYLLABLES = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]


def kg_of(tabs) -> linking.ArrayKG:
    """``ArrayKG`` of a loader's tables (aliases included when the entities table has them)."""
    ent, t = tabs.entities, tabs.triples
    return linking.ArrayKG(ent[S.NAME].to_pylist(), t[S.HEAD].to_numpy(), t[S.RELATION].to_numpy(),
                           t[S.TAIL].to_numpy(), tabs.relations[S.NAME].to_pylist(),
                           ent[S.ALIASES].to_pylist() if S.ALIASES in ent.column_names else None)


def score(kg: linking.ArrayKG, rows: list[dict], names, **rule) -> dict:
    """Shares of ``rows`` ({"text", "gold": ids, ...}) linked right by ``kg.link(text, **rule)``; the first misses."""
    res = []
    for r in rows:
        got = kg.link(r["text"], **rule)
        gold = set(r["gold"])
        res.append({"first": float(bool(got.ids) and got.ids[0] in gold), "all_gold": float(gold <= set(got.ids)),
                    "exact": float(gold == set(got.ids)), "none": not got.ids, "text": r["text"],
                    "gold": sorted(names[i] for i in gold), "linked": [names[i] for i in got.ids]})
    out: dict = {"questions": len(res), "no_entity": sum(x["none"] for x in res)}
    for k in ("all_gold", "first", "exact"):
        v = [x[k] for x in res]
        out[k] = round(float(np.mean(v)), 4) if v else None
        out[f"{k}_ci95"] = bootstrap_ci(v) if v else None
    out["misses"] = [{k: x[k] for k in ("text", "gold", "linked")} for x in res if not x["exact"]][:8]
    return out


# ---- MetaQA and the transfer KGs ----------------------------------------------------------------------------

def metaqa_sets(path: str, split: str, per_hop: int, seed: int) -> dict[str, tuple]:
    """{"1-hop": (kg, names, rows), ...}: ``per_hop`` questions of each hop file, brackets removed."""
    load = LOADERS.get("metaqa").impl
    out = {}
    for hops in (1, 2, 3):
        tabs = load(path=path, hops=hops, split=split, sample=per_hop, seed=seed)
        rows = [{"text": re.sub(r"[\[\]]", "", q[S.TEXT]), "gold": [i for i in q[S.TOPIC_IDS] if i is not None]}
                for q in tabs.questions.to_pylist()]
        out[f"{hops}-hop"] = (kg_of(tabs), tabs.entities[S.NAME].to_pylist(), rows)
    return out


def transfer_sets(root: str, part: str) -> dict[str, tuple]:
    """{"WC-P2": (kg, names, rows), ...}: the ``part`` half of each IRN question file (the ``irn`` loader's split)."""
    load = LOADERS.get("irn").impl
    out = {}
    for name, (kb, qf) in TRANSFER.items():
        tabs = load(kb=f"{root}/{kb}", questions=f"{root}/{qf}", split=part)
        rows = [{"text": q[S.TEXT], "gold": list(q[S.TOPIC_IDS])} for q in tabs.questions.to_pylist()]
        out[name] = (kg_of(tabs), tabs.entities[S.NAME].to_pylist(), rows)
    return out


def pooled(parts: dict[str, dict]) -> dict:
    """Question-weighted shares over several scored sets."""
    n = sum(p["questions"] for p in parts.values())
    return {"questions": n, "no_entity": sum(p["no_entity"] for p in parts.values()),
            **{k: round(sum(p[k] * p["questions"] for p in parts.values()) / n, 4)
               for k in ("all_gold", "first", "exact")}}


# ---- SYNTHETIC KGs named by a label table ----------------------------------------------------------------------

def made_up_names(n: int, rng: np.random.Generator) -> list[str]:
    """``n`` made-up names of two or three capitalized words of 2-3 consonant-vowel syllables (SYNTHETIC)."""
    sy = np.asarray(SYLLABLES)
    words = rng.integers(0, len(sy), size=(n, 3, 3))
    wl = rng.integers(2, 4, size=(n, 3))
    nw = np.where(rng.random(n) < 0.2, 3, 2)
    out = []
    for i in range(n):
        ws = ["".join(sy[words[i, j, :wl[i, j]]]).capitalize() for j in range(nw[i])]
        out.append(" ".join(ws))
    return out


def labelled_kg(n_triples: int, entities_per_triple: float, seed: int, *, homonyms: float = 0.03,
                aliases: float = 0.3, underscores: float = 0.1):
    """A SYNTHETIC KG (``kgrag.kg.synth.generate_kg``) with entities keyed by ids and a label table: (kg, keys,
    labels: the display names, alias of each entity or None). ``homonyms`` of the entities take the label of
    another entity (half of them of the same type); ``aliases`` get a second name (an initial and the last
    word, or a made-up word); ``underscores`` have their label written with underscores (as IRN's KGs)."""
    from kgrag.kg.synth import generate_kg

    kg = generate_kg(n_triples=n_triples, entities_per_triple=entities_per_triple, n_relations=24, n_types=8,
                     skew=1.0, relation_skew=1.0, seed=seed)
    rng = np.random.default_rng(seed + 100)
    n = kg.n_entities
    labels = made_up_names(n, rng)
    for i in np.flatnonzero(rng.random(n) < homonyms).tolist():
        same = np.flatnonzero(kg.entity_type == kg.entity_type[i]) if rng.random() < 0.5 else None
        j = int(rng.choice(same)) if same is not None else int(rng.integers(n))
        labels[i] = labels[j]
    for i in np.flatnonzero(rng.random(n) < underscores).tolist():
        labels[i] = labels[i].replace(" ", "_")
    extra = made_up_names(n, rng)
    alias: list[str | None] = [None] * n
    for i in np.flatnonzero(rng.random(n) < aliases).tolist():
        words = labels[i].replace("_", " ").split()
        alias[i] = f"{words[0][0]}. {words[-1]}" if rng.random() < 0.5 else extra[i].split()[0]
    keys = [f"Q{i:07d}" for i in range(n)]
    return kg, keys, labels, alias


def labelled_questions(kg, labels: list[str], alias: list, n: int, seed: int, *, popular: bool) -> list[dict]:
    """``n`` one-relation questions: a topic with an out-edge (uniform, or in proportion to its degree when
    ``popular``), one of its out-relations, the text "which <type> is linked by synth relation rNN (<head type>
    <tail type>) from <mention>?" where the mention is the label as written (55%), lower-cased (15%), with spaces
    for underscores (10%) or the alias (20%, when there is one). Gold: the topic (entity id = its position)."""
    from kgrag.kg.synth import OutIndex

    rng = np.random.default_rng(seed + 200)
    idx = OutIndex(kg)
    tnames = kg.type_names()
    deg = np.bincount(np.concatenate([kg.heads, kg.tails]), minlength=kg.n_entities)
    heads = np.unique(kg.heads)
    p = deg[heads] / deg[heads].sum() if popular else None
    out = []
    for topic in rng.choice(heads, size=n, replace=True, p=p).tolist():
        rels, _ = idx.out_edges(topic)
        r = int(rels[rng.integers(len(rels))])
        a, b = kg.relation_types[r]
        u = rng.random()
        lab = labels[topic]
        if u < 0.2 and alias[topic] is not None:
            mention, how = alias[topic], "alias"
        elif u < 0.35:
            mention, how = lab.lower(), "lower-cased"
        elif u < 0.45:
            mention, how = lab.replace("_", " "), "spaces"
        else:
            mention, how = lab, "as written"
        text = (f"which {tnames[int(b)]} is linked by synth relation r{r:02d} ({tnames[int(a)]} {tnames[int(b)]}) "
                f"from {mention}?")
        out.append({"text": text, "gold": [topic], "mention": how})
    by_label: dict[str, int] = {}
    for x in labels:
        k = linking.name_key(x)
        by_label[k] = by_label.get(k, 0) + 1
    for q in out:
        q["homonym"] = by_label[linking.name_key(labels[q["gold"][0]])] > 1
    return out


def write_labelled(folder: Path, kg, keys: list[str], labels: list[str], alias: list) -> tuple[Path, Path]:
    """``triples.tsv`` (ids) and ``names.tsv`` (label, then alias) of a labelled SYNTHETIC KG."""
    rel = kg.relation_names()
    tri = folder / "triples.tsv"
    with open(tri, "w") as f:
        for h, r, t in zip(kg.heads.tolist(), kg.relations.tolist(), kg.tails.tolist()):
            f.write(f"{keys[h]}\t{rel[r]}\t{keys[t]}\n")
    names = folder / "names.tsv"
    with open(names, "w") as f:
        for k, lab, al in zip(keys, labels, alias):
            f.write(f"{k}\t{lab}\n" + (f"{k}\t{al}\n" if al else ""))
    return tri, names


def synthetic_sets(seed: int, n_triples: int, questions: int, tmp: Path) -> dict[str, tuple]:
    """{"uniform": (kg, names, rows), "popular": ...} of a labelled SYNTHETIC KG loaded by the ``triples`` loader
    with its label table (gold ids mapped to the loader's: entity ids follow the sorted keys)."""
    kg, keys, labels, alias = labelled_kg(n_triples, 0.3, seed)
    tri, names = write_labelled(tmp, kg, keys, labels, alias)
    tabs = LOADERS.get("triples").impl(path=str(tri), names=str(names))
    loaded = {k: i for i, k in enumerate(sorted({keys[x] for x in np.concatenate([kg.heads, kg.tails]).tolist()}))}
    akg, lnames = kg_of(tabs), tabs.entities[S.NAME].to_pylist()
    out = {}
    for mode in ("uniform", "popular"):
        rows = labelled_questions(kg, labels, alias, questions, seed, popular=mode == "popular")
        for r in rows:
            r["gold"] = [loaded[keys[g]] for g in r["gold"]]
        out[mode] = (akg, lnames, rows)
    return out


# ---- DuckDB at a million entities ------------------------------------------------------------------------------

def duckdb_part(entities: int, questions: int, seed: int, tmp: Path) -> dict:
    """Linking time on ``DuckKGStore`` over a labelled SYNTHETIC KG of ``entities`` entities (2 triples each)."""
    import duckdb
    import pyarrow as pa

    from kgrag.kg.duckdb_io import write_duckdb
    from kgrag.kg.store_duckdb import DuckKGStore

    t0 = time.perf_counter()
    kg, _, labels, alias = labelled_kg(2 * entities + 200, 0.5, seed + 10)  # a few more: types round down
    n = kg.n_entities
    tables = {
        "entities": pa.table({S.ENTITY_ID: pa.array(np.arange(n, dtype=np.int64)), S.NAME: labels,
                              S.ALIASES: pa.array([[a] if a else None for a in alias], pa.list_(pa.string()))},
                             schema=S.ENTITIES_ALIASES),
        "relations": pa.table({S.RELATION_ID: pa.array(np.arange(len(kg.relation_types), dtype=np.int64)),
                               S.NAME: kg.relation_names()}, schema=S.RELATIONS),
        "triples": pa.table({S.HEAD: kg.heads, S.RELATION: kg.relations, S.TAIL: kg.tails}, schema=S.TRIPLES),
        "questions": pa.Table.from_pylist([], schema=S.QUESTIONS)}
    gen_s = time.perf_counter() - t0
    db = tmp / "big" / "kg.duckdb"
    t0 = time.perf_counter()
    write_duckdb(db, tables)
    write_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    duck = DuckKGStore(db, cache_dir=tmp / "big" / "cache")
    sidecar_s = time.perf_counter() - t0
    rows = labelled_questions(kg, labels, alias, questions + 20, seed + 10, popular=False)
    mem = linking.ArrayKG(labels, kg.heads, kg.relations, kg.tails, kg.relation_names(),
                          [[a] if a else None for a in alias])
    for r in rows[:20]:  # warm-up: the connection, the relation names
        duck.link(r["text"])
    ms, agree, found = [], 0, 0
    for r in rows[20:]:
        a = time.perf_counter()
        got = duck.link(r["text"])
        ms.append((time.perf_counter() - a) * 1000)
        agree += got.ids == mem.link(r["text"]).ids
        found += bool(got.ids) and got.ids[0] == r["gold"][0]
    # the reference: the former look-up, lower(name) of every entity compared with the spans (no index)
    con = duckdb.connect(str(db), read_only=True)
    con.execute("SET threads=1")
    scan = []
    for r in rows[20:40]:
        keys = sorted({linking.name_key(t) for *_, t in linking.spans(r["text"]) if len(t) >= 2})
        a = time.perf_counter()
        con.execute(f"SELECT lower({S.NAME}), {S.ENTITY_ID}, {S.NAME} FROM entities "
                    f"WHERE lower({S.NAME}) IN (SELECT unnest($t))", {"t": keys}).fetchall()
        scan.append((time.perf_counter() - a) * 1000)
    plan = con.execute("EXPLAIN ANALYZE " + duck.names_sql(["a b", "c d"])).fetchall()[0][1]
    con.close()
    duck.close()
    return {"entities": n, "triples": int(len(kg.heads)), "names": n + sum(a is not None for a in alias),
            "questions": len(ms), "ms_median": round(float(np.median(ms)), 2),
            "ms_p90": round(float(np.quantile(ms, 0.9)), 2), "ms_mean": round(float(np.mean(ms)), 2),
            "found": round(found / len(ms), 4), "same_as_memory": round(agree / len(ms), 4),
            "name_lookup_index_scan": "Index Scan" in plan, "threads": 1,
            "scan_reference_ms_median": round(float(np.median(scan)), 2), "scan_reference_questions": len(scan),
            "generate_s": round(gen_s, 1), "write_duckdb_s": round(write_s, 1), "sidecar_s": round(sidecar_s, 1)}


def main(argv: list[str] | None = None) -> None:
    """Run the bench."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--part", default="test", choices=["dev", "test"])
    ap.add_argument("--metaqa", default="../shared/data/metaqa", help="MetaQA folder")
    ap.add_argument("--transfer", default="../shared/data/transfer", help="folder of wc2014/ and pathquestion_large/")
    ap.add_argument("--per-hop", type=int, default=500, help="MetaQA questions per hop count")
    ap.add_argument("--synth-triples", type=int, default=100_000)
    ap.add_argument("--synth-questions", type=int, default=1000)
    ap.add_argument("--big-entities", type=int, default=1_000_000, help="entities of the DuckDB timing KG (0: skip)")
    ap.add_argument("--big-questions", type=int, default=300)
    ap.add_argument("--out", default=None, help="default reports/bench/linking.json (test), linking_dev.json (dev)")
    a = ap.parse_args(argv)
    seed = SEEDS[a.part]
    out = a.out or f"reports/bench/linking{'_dev' if a.part == 'dev' else ''}.json"
    result: dict = {"part": a.part, "seed": seed, "rule": {"order": linking.ORDER, "prior": linking.PRIOR,
                                                           "second": linking.SECOND, "stem": linking.STEM,
                                                           "max_words": linking.MAX_WORDS}}
    t0 = time.perf_counter()
    sets = {"metaqa": metaqa_sets(a.metaqa, "dev" if a.part == "dev" else "test", a.per_hop, seed),
            "transfer": transfer_sets(a.transfer, a.part)}
    with tempfile.TemporaryDirectory() as tmp:
        sets["synthetic"] = synthetic_sets(seed, a.synth_triples, a.synth_questions, Path(tmp))
        result["load_s"] = round(time.perf_counter() - t0, 1)
        variants = ([{"order": o, "prior": p, "second": s} for o in ORDERS for p in PRIORS for s in SECONDS]
                    if a.part == "dev"
                    else [{}, {"relations_of": "none"}])
        result["variants"] = []
        for v in variants:
            t0 = time.perf_counter()
            rule = {k: x for k, x in v.items() if k != "relations_of"}
            got: dict = {"rule": v or "default"}
            for part, parts in sets.items():
                scored = {}
                for name, (kg, names, rows) in parts.items():
                    if "relations_of" in v:  # the reference: no relation fit
                        kg = _no_fit(kg)
                    scored[name] = score(kg, rows, names, **rule)
                    if part == "synthetic":
                        hom = [r for r in rows if r["homonym"]]
                        scored[name]["homonym_questions"] = score(kg, hom, names, **rule)
                        scored[name]["homonym_questions"].pop("misses")
                        if not v:
                            no_prior = {**rule, "prior": False}
                            scored[name]["homonym_questions_without_prior"] = score(kg, hom, names, **no_prior)
                            scored[name]["homonym_questions_without_prior"].pop("misses")
                        for how in ("alias", "lower-cased", "spaces", "as written"):
                            sub = [r for r in rows if r["mention"] == how]
                            scored[name][f"mention_{how.replace(' ', '_')}"] = score(kg, sub, names, **rule)["first"]
                if part in ("metaqa", "transfer"):
                    scored["pooled"] = pooled({k: x for k, x in scored.items() if k != "pooled"})
                got[part] = scored
            got["seconds"] = round(time.perf_counter() - t0, 1)
            result["variants"].append(got)
            print(v or "default", {p: {k: x["all_gold"] for k, x in got[p].items()} for p in sets}, flush=True)
        if a.part == "test" and a.big_entities:
            result["duckdb"] = duckdb_part(a.big_entities, a.big_questions, seed, Path(tmp))
            print("duckdb", result["duckdb"], flush=True)
    write_result(out, result)


class _no_fit:
    """An ``ArrayKG`` whose relations say nothing (the rule without the relation fit: a reference)."""

    def __init__(self, kg: linking.ArrayKG) -> None:
        self._kg = kg

    def link(self, text: str, **kw):
        return linking.link(text, lookup=self._kg.lookup, relations_of=lambda ids: {}, degree_of=self._kg.degree_of,
                            **kw)


if __name__ == "__main__":
    main()
