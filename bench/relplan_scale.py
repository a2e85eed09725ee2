"""Benchmark: the relplan stage's work at scale, on SYNTHETIC KGs of 1M and 10M triples (``kgrag.kg.synth``).

For each size, in a child process (its wall time and peak RSS measured by ``/usr/bin/time``): the synthetic KG
and ``--questions`` questions with known answers are generated, held in a ``KGStore`` (in memory, as the stage
holds the validated KG), and the stage's two plans are made: ``labelled`` (``train_plan``: mirrored relations,
each question's relation sequences to its answers walked, labels per wording, texts encoded, the lexicon) and
``kg`` (the same questions' texts labelled by the zero-shot ``relpath``; without entity vectors: the answer-type
feature off, since the index stage's vectors of 2.5M synthetic names would take about 40 minutes here). Beside them, MetaQA (133k triples, 6,000 dev questions: the
default relplan stage) timed the same way. Writes ``reports/bench/relplan_scale.json``.

    python -m bench.relplan_scale                  # 1M and 10M (about 15 minutes)
    python -m bench.relplan_scale --sizes 200k     # a smoke run
    python -m bench.relplan_scale --store duckdb --sizes 1M 10M --kg-questions 50 \
        --out reports/bench/relplan_scale_duckdb.json   # over the memory budget: mirrors by SQL, the labeller
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from bench.common import machine, timed_run, write_result

ROOT = Path(__file__).resolve().parents[1]

SYNTH = dict(entities_per_triple=0.25, n_relations=24, n_types=8, skew=1.0, relation_skew=1.0)
SIZES = {"200k": 200_000, "1M": 1_000_000, "10M": 10_000_000}
MODEL = "all-MiniLM-L6-v2"


class NoVectors:
    """The index's encoder with no entity vectors (relpath's answer-type feature off)."""

    model = MODEL

    def __init__(self) -> None:
        import numpy as np

        self.entity_vectors = np.zeros((0, 384), dtype=np.float32)

    @staticmethod
    def encode(texts):
        from kgrag.index.embed import encode

        return encode(texts, model=MODEL)


def child(args) -> None:
    """One size: build, hold, label; prints one JSON line of seconds."""
    import numpy as np
    import pyarrow as pa

    from kgrag import schema as S
    from kgrag.index.embed import EmbeddingIndex, encode
    from kgrag.index.relplan import train_plan
    from kgrag.kg.duckdb_io import write_duckdb
    from kgrag.kg.store import KGStore, questions_from_table
    from kgrag.types import Question

    t0 = time.perf_counter()
    work = Path(args.work)
    if args.phase == "duckdb":
        duck_child(args, work)
        return
    if args.size == "metaqa":
        from kgrag.kg.loaders.metaqa import load_metaqa

        qs_tabs = []
        for k in (1, 2, 3):
            qs_tabs.append(load_metaqa(path=str(ROOT.parent / "shared" / "data" / "metaqa"), hops=k, split="dev",
                                       sample=2000, seed=0))
        tabs = qs_tabs[0]
        questions = pa.concat_tables([t.questions for t in qs_tabs])
        write_duckdb(work / "kg.duckdb", {"entities": tabs.entities, "relations": tabs.relations,
                                          "triples": tabs.triples, "questions": questions})
    else:
        from kgrag.kg.synth import generate_kg, generate_questions

        kg = generate_kg(n_triples=SIZES[args.size], seed=0, **SYNTH)
        qs = generate_questions(kg=kg, n_questions=args.questions, hops=(1, 2), max_answers=50, seed=0)
        names = kg.entity_names().to_pylist()
        rels = kg.relation_names()
        ents = pa.table({S.ENTITY_ID: pa.array(np.arange(len(names)), pa.int64()), S.NAME: names}, schema=S.ENTITIES)
        relt = pa.table({S.RELATION_ID: pa.array(np.arange(len(rels)), pa.int64()), S.NAME: rels}, schema=S.RELATIONS)
        tri = pa.table({S.HEAD: kg.heads.astype(np.int64), S.RELATION: kg.relations.astype(np.int64),
                        S.TAIL: kg.tails.astype(np.int64)}, schema=S.TRIPLES)
        ids = {n: i for i, n in enumerate(names)}
        rows = [{S.QUESTION_ID: f"q{i}", S.SPLIT: "dev", S.HOPS: q["hops"], S.TEXT: q["question"], S.QTYPE: "",
                 S.TOPIC_IDS: [ids[x] for x in q["topic_entities"]], S.ANSWER_IDS: [ids[x] for x in q["answers"]],
                 S.ANSWERS: q["answers"], S.GRAPH_ID: None, S.CHOICES: None} for i, q in enumerate(qs)]
        questions = pa.Table.from_pylist(rows, schema=S.QUESTIONS)
        write_duckdb(work / "kg.duckdb", {"entities": ents, "relations": relt, "triples": tri, "questions": questions})
    t_build = time.perf_counter() - t0
    if args.phase == "build":  # --store duckdb: the file alone, so the next child's peak RSS is the store's
        print("RESULT " + json.dumps({"build_s": round(t_build, 1)}), flush=True)
        return
    t0 = time.perf_counter()
    store = KGStore(work / "kg.duckdb")
    _ = store.heads, store.relations, store.tails
    t_load = time.perf_counter() - t0
    qlist = [q for q in questions_from_table(questions) if q.topic_ids]
    t0 = time.perf_counter()
    plan, stats = train_plan(kg=store, questions=qlist, encode=lambda t: encode(t, model=MODEL), model=MODEL,
                             log=lambda s: print(f"[relplan_scale] {args.size}: {s}", file=sys.stderr, flush=True))
    t_labelled = time.perf_counter() - t0
    out = {"triples": int(store.num_triples), "entities": int(store.num_entities), "questions": len(qlist),
           "build_s": round(t_build, 1), "load_s": round(t_load, 1), "labelled_plan_s": round(t_labelled, 1),
           "labelled": stats["labelled"], "mirrored_relations": len(stats["mirrored_relations"])}
    if args.size != "metaqa":  # the zero-shot labeller (source kg), on the synth questions' texts
        from kgrag.retrieval.retrievers.relpath import RelPathParams, retrieve_relpath

        index = NoVectors()  # the type feature off: the index stage's vectors of 2.5M synthetic names would take
        # this machine about 40 minutes, outside relplan
        params = RelPathParams(plan=None, paths=1, fallback=None)
        t0 = time.perf_counter()
        for q in qlist[: args.kg_questions]:
            retrieve_relpath(question=Question(question_id=q.question_id, text=q.text, topic_ids=q.topic_ids),
                             query_vec=index.encode([q.text])[0], kg=store, index=index, params=params, hops=0,
                             max_edges=0)
        out["kg_labeller_ms_per_question"] = round((time.perf_counter() - t0) * 1000 / max(args.kg_questions, 1), 1)
    print("RESULT " + json.dumps(out), flush=True)


def duck_child(args, work: Path) -> None:
    """``--store duckdb``: the KG file the build child wrote, read through ``DuckKGStore`` (no triple array
    loaded): the sidecar's build, the mirrored-relation pass by SQL, and the zero-shot labeller (relpath, no entity
    vectors, as above) on ``--kg-questions`` question texts; prints one JSON line."""
    import duckdb
    import numpy as np

    from kgrag.index.relplan import mirror_pairs
    from kgrag.kg.store import questions_from_table
    from kgrag.kg.store_duckdb import DuckKGStore
    from kgrag.retrieval.retrievers.relpath import RelPathParams, retrieve_relpath
    from kgrag.types import Question

    with duckdb.connect(str(work / "kg.duckdb"), read_only=True) as con:
        questions = con.execute("SELECT * FROM questions").to_arrow_table()
    qlist = [q for q in questions_from_table(questions) if q.topic_ids][: args.kg_questions]
    t0 = time.perf_counter()
    store = DuckKGStore(work / "kg.duckdb", cache_dir=work / "duckstore")
    t_open = time.perf_counter() - t0
    t0 = time.perf_counter()
    mirrors = mirror_pairs(store)
    t_mirrors = time.perf_counter() - t0

    index = NoVectors()
    vecs = index.encode([q.text for q in qlist])
    params = RelPathParams(plan=None, paths=1, fallback=None, hub_edges=args.hub_edges)
    ms = []
    for q, v in zip(qlist, vecs):
        t0 = time.perf_counter()
        retrieve_relpath(question=Question(question_id=q.question_id, text=q.text, topic_ids=q.topic_ids),
                         query_vec=v, kg=store, index=index, params=params, hops=0, max_edges=0)
        ms.append((time.perf_counter() - t0) * 1000)
    out = {"store": "duckdb", "triples": int(store.num_triples), "entities": int(store.num_entities),
           "open_s": round(t_open, 1), "mirrors_s": round(t_mirrors, 1), "mirrored_relations": len(mirrors),
           "kg_questions": len(ms), "hub_edges": args.hub_edges,
           "kg_labeller_ms_per_question": round(float(np.mean(ms)), 1) if ms else None,
           "kg_labeller_ms_p50": round(float(np.percentile(ms, 50)), 1) if ms else None,
           "kg_labeller_ms_p95": round(float(np.percentile(ms, 95)), 1) if ms else None}
    print("RESULT " + json.dumps(out), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", nargs="+", default=["metaqa", "1M", "10M"])
    ap.add_argument("--questions", type=int, default=2000)
    ap.add_argument("--kg-questions", type=int, default=100, help="questions the zero-shot labeller is timed on")
    ap.add_argument("--out", default=str(ROOT / "reports" / "bench" / "relplan_scale.json"))
    ap.add_argument("--store", default="memory", choices=["memory", "duckdb"],
                    help="duckdb: the KG over the DuckDB store (relplan over the memory budget: mirrors by SQL, the "
                         "zero-shot labeller; no labelled plan), built in one child and read in another")
    ap.add_argument("--hub-edges", type=int, default=None, help="relpath's hub_edges for the duckdb labeller")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--phase", default="all", help=argparse.SUPPRESS)
    ap.add_argument("--size", help=argparse.SUPPRESS)
    ap.add_argument("--work", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args)
        return
    result = {"machine": machine(), "synthetic": True, "synth_params": SYNTH, "sizes": {},
              "note": "SYNTHETIC KGs (kgrag.kg.synth) and MetaQA; each size in a child process: build_s (generate + "
                      "DuckDB), load_s (KGStore arrays), labelled_plan_s (relplan source labelled: mirrors, walks, "
                      "labels per wording, encoding, lexicon), kg_labeller_ms_per_question (source kg's zero-shot "
                      "relpath per question text), wall_s and peak_rss_gib of the child"}
    if args.store == "duckdb":
        return duck_main(args, result)
    for size in args.sizes:
        with tempfile.TemporaryDirectory(prefix="kgrag-relplan-scale-") as work:
            p, wall, rss_kib = timed_run([sys.executable, "-m", "bench.relplan_scale", "--child", "--size", size,
                                          "--work", work, "--questions", str(args.questions), "--kg-questions",
                                          str(args.kg_questions)], cwd=ROOT)
            line = next((x for x in p.stdout.splitlines() if x.startswith("RESULT ")), None)
            if wall is None or line is None:
                raise SystemExit(f"{size} failed:\n{p.stderr[-3000:]}")
            result["sizes"][size] = {**json.loads(line[7:]), "wall_s": wall,
                                     "peak_rss_gib": round(rss_kib / 1024 ** 2, 2)}
            print(f"[relplan_scale] {size}: {result['sizes'][size]}", file=sys.stderr, flush=True)
            write_result(args.out, dict(result))


def duck_main(args, result: dict) -> None:
    """Each size: a child writes the KG file, another reads it through the DuckDB store (``duck_child``)."""
    result["note"] = ("SYNTHETIC KGs over the DuckDB store (relplan over the memory budget): build_s and "
                      "build_peak_rss_gib (the generator's child), open_s (the adjacency sidecar), mirrors_s (the "
                      "mirror pass by SQL), kg_labeller_ms_* (the zero-shot relpath per question text, no entity "
                      "vectors), wall_s and peak_rss_gib of the reading child")
    for size in args.sizes:
        with tempfile.TemporaryDirectory(prefix="kgrag-relplan-scale-") as work:
            common = [sys.executable, "-m", "bench.relplan_scale", "--child", "--size", size, "--work", work,
                      "--questions", str(args.questions), "--kg-questions", str(args.kg_questions)]
            p, wall, rss = timed_run(common + ["--phase", "build"], cwd=ROOT)
            line = next((x for x in p.stdout.splitlines() if x.startswith("RESULT ")), None)
            if wall is None or line is None:
                raise SystemExit(f"{size} build failed:\n{p.stderr[-3000:]}")
            built = {**json.loads(line[7:]), "build_wall_s": wall, "build_peak_rss_gib": round(rss / 1024 ** 2, 2)}
            hub = ["--hub-edges", str(args.hub_edges)] if args.hub_edges is not None else []
            p, wall, rss = timed_run(common + ["--phase", "duckdb"] + hub, cwd=ROOT)
            line = next((x for x in p.stdout.splitlines() if x.startswith("RESULT ")), None)
            if wall is None or line is None:
                raise SystemExit(f"{size} duckdb failed:\n{p.stderr[-3000:]}")
            result["sizes"][size] = {**built, **json.loads(line[7:]), "wall_s": wall,
                                     "peak_rss_gib": round(rss / 1024 ** 2, 2)}
            print(f"[relplan_scale] {size} duckdb: {result['sizes'][size]}", file=sys.stderr, flush=True)
            write_result(args.out, dict(result))


if __name__ == "__main__":
    main()
