"""Benchmark: per-question graphs (RoG's format), built from real KGs the way a published retriever hands them out.

WebQSP and CWQ reach kgrag as one row per question with its own subgraph (``rog`` loader). No such release is on
this machine, so this bench builds sets of that shape from real questions and KGs (``--build``): for each
question, the k-hop neighbourhood of its topic entities (``--hops``, undirected) capped at ``--max-edges`` edges
(closest first, seeded order within a hop), then *pruned* (each edge dropped with probability ``--drop``; the
answer may go with it, as in a retriever's output) and *noised* (``--noise`` x edges of random other triples of
the KG added, unconnected to the question). Sets:

- ``metaqa``: MetaQA dev (``--split dev``) or test questions, ``--per-hop`` of each hop count (seed 0), 2-hop
  neighbourhoods (3-hop questions then often lose their answer: the graph does not hold it);
- ``wc2014-p2``, ``pql-2h``, ``pql-3h``: the IRN sets' dev or test part.

Then the default pipeline runs on each file (``data.dataset=rog``, ``relpath`` with ``fill_graph``: the chosen
sequences' triples first, then the rest of the graph up to ``max_triples``; the plan from the KG alone, since a
RoG file holds no held-out questions, or with ``--labelled`` from a labelled training file of the same format,
``relplan.file``, as WebQSP and CWQ ship one) in a work copy, and the bench reports: questions, the share whose graph holds
an answer, retrieval recall over those (how much of what the graph offers the retrieval keeps), Hit@1 with its
interval, the first- and random-candidate baselines and the paired lift over the first. Writes
``reports/bench/question_graphs.json``, and copies its test rows without an LLM into
``reports/bench/transfer.json`` as ``<set>-qgraphs/<kg|labelled>/retrieval``, beside the whole-KG rows.

    python -m bench.question_graphs --split dev --sets metaqa wc2014-p2      # the dev-shaped sets (choices)
    python -m bench.question_graphs --split test                             # the single test measurement
    python -m bench.question_graphs --split test --labelled                  # with a labelled training file
    python -m bench.question_graphs --split dev --tuned ../lift/data/tune --set generate.model=tuned  # a tuned scorer
    python -m bench.question_graphs --split dev --sets metaqa wc2014-p2 --sample 150 --tuned metaqa \
        --set generate.model=tuned            # the scorer the default project tunes on MetaQA dev, trained first
    python -m bench.question_graphs --split dev --labelled --tune     # the scorer tuned on the labelled file itself
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from bench._machine import made_by, provenance
from bench.common import write_result
from bench.full_split import clear_caches, run_stage, workcopy
from bench.transfer import rows_of

from kgrag import schema as S
from kgrag.registry import LOADERS

ROOT = Path(__file__).resolve().parents[1]

DATA = ROOT.parent / "shared" / "data"
OUT = ROOT / "reports" / "bench" / "question_graphs.json"
TRANSFER = ROOT / "reports" / "bench" / "transfer.json"
STAGES = ("ingest", "validate", "index", "relplan", "retrieve", "generate", "evaluate")
IRN = {"wc2014-p2": ("wc2014", "WC2014.txt", "WC-P2.txt"), "pql-2h": ("pathquestion_large", "PQL2-KB.txt", "PQL-2H.txt"),
       "pql-3h": ("pathquestion_large", "PQL3-KB.txt", "PQL-3H.txt")}


def tables_of(name: str, split: str, per_hop: int):
    if name == "metaqa":
        return LOADERS.get("metaqa").impl(path=str(DATA / "metaqa"), hops=[1, 2, 3], split=split, sample=per_hop,
                                          seed=0)
    folder, kb, qf = IRN[name]
    return LOADERS.get("irn").impl(kb=str(DATA / "transfer" / folder / kb), questions=str(DATA / "transfer" / folder / qf),
                                   split=split)


def build(name: str, split: str, *, per_hop: int, hops: int, max_edges: int, drop: float, noise: float,
          seed: int, out: Path) -> dict:
    """Write ``out`` (RoG JSONL, one question with its graph per line); returns counts."""
    tabs = tables_of(name, split, per_hop)
    names = tabs.entities[S.NAME].to_pylist()
    rel = tabs.relations[S.NAME].to_pylist()
    h, r, t = (tabs.triples[c].to_numpy().astype(np.int64) for c in (S.HEAD, S.RELATION, S.TAIL))
    n = len(names)
    order = np.argsort(np.concatenate([h, t]), kind="stable")
    ends = np.concatenate([h, t])[order]
    edge = np.concatenate([np.arange(len(h))] * 2)[order]
    ptr = np.searchsorted(ends, np.arange(n + 1))
    rng = np.random.default_rng(seed)
    rows, kept_answer = [], 0
    for q in tabs.questions.to_pylist():
        topics = [x for x in q[S.TOPIC_IDS] if x is not None]
        seen, frontier, edges = set(topics), list(topics), []
        for _ in range(hops):
            inc = [int(e) for x in frontier for e in edge[ptr[x]:ptr[x + 1]].tolist()]
            inc = sorted(set(inc) - set(edges))
            rng.shuffle(inc)
            edges += inc[: max(max_edges - len(edges), 0)]
            frontier = sorted({int(v) for e in inc for v in (h[e], t[e])} - seen)
            seen.update(frontier)
        edges = [e for e in edges if rng.random() >= drop]
        edges += rng.integers(0, len(h), size=int(round(noise * len(edges)))).tolist()
        graph = sorted({(names[h[e]], rel[r[e]], names[t[e]]) for e in edges})
        gold = [names[a] for a in q[S.ANSWER_IDS] if a is not None]
        in_graph = {x for tr in graph for x in (tr[0], tr[2])}
        kept_answer += any(a in in_graph for a in gold)
        rows.append({"id": q[S.QUESTION_ID], "question": q[S.TEXT].replace("[", "").replace("]", ""),
                     "answer": gold, "q_entity": [names[x] for x in topics], "a_entity": gold,
                     "graph": [list(tr) for tr in graph], "hops": q[S.HOPS]})
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(x) + "\n" for x in rows))
    return {"questions": len(rows), "answer_in_graph": round(kept_answer / max(len(rows), 1), 4),
            "mean_triples": round(float(np.mean([len(x["graph"]) for x in rows])), 1)}


def retrieval_rows(work: Path, max_context_triples: int) -> dict:
    """Without the LLM (``--retrieval-only``): questions, the share whose graph holds an answer, and over those the
    share of the answers the retrieval keeps in the prompt's first ``max_context_triples`` triples (``prompt``) and
    in all it returns (``retrieved``), the share whose answer is among the candidates (the chosen sequences' ends)
    and the first candidate's Hit@1 (all questions) with its interval."""
    import pyarrow.parquet as pq

    from kgrag.evaluation.evaluate import prompt_triples
    from kgrag.evaluation.metrics import bootstrap_ci

    q = pq.read_table(work / "data" / "validated" / "questions.parquet").to_pylist()
    r = {x[S.QUESTION_ID]: x for x in pq.read_table(work / "data" / "retrieve" / "retrieved.parquet").to_pylist()}
    graph_nodes = {}
    import duckdb

    con = duckdb.connect(str(work / "data" / "validated" / "kg.duckdb"), read_only=True)
    for gid, h, t in con.execute(f"SELECT {S.GRAPH_ID}, {S.HEAD}, {S.TAIL} FROM triples").fetchall():
        graph_nodes.setdefault(gid, set()).update((h, t))
    held, prompt, whole, cand, first = [], [], [], [], []
    for x in q:
        got = r.get(x[S.QUESTION_ID]) or {}
        ends = json.loads(got.get(S.TRACE) or "{}").get("ends") or []
        gold = {a for a in x[S.ANSWER_IDS] or [] if a is not None}
        first.append(float(bool(ends) and ends[0] in gold))
        offered = gold & graph_nodes.get(x[S.GRAPH_ID], set())
        held.append(bool(offered))
        if offered:
            prompt.append(len(offered & set(prompt_triples(got, max_context_triples)[1])) / len(offered))
            whole.append(len(offered & set(got.get(S.NODE_IDS) or [])) / len(offered))
            cand.append(float(bool(offered & set(ends))))
    first = np.asarray(first)
    return {"questions": len(q), "answer_in_graph": round(float(np.mean(held)), 4),
            "where_the_graph_holds_an_answer": {
                "questions": len(prompt), "prompt_recall": round(float(np.mean(prompt)), 4),
                "retrieved_recall": round(float(np.mean(whole)), 4),
                "answer_among_candidates": round(float(np.mean(cand)), 4)},
            "first_candidate_hit_at_1": round(float(first.mean()), 4),
            "first_candidate_hit_at_1_ci95": bootstrap_ci(first, resamples=2000, seed=0)}


#: ``--tuned metaqa``: the default project's tune_answer_scorer stage, trained first in a work copy
TUNE_DEFAULT = "metaqa"
#: what a tuned folder's tune.json says of the scorer, copied into each row that used it
TUNE_FIELDS = ("note", "questions", "rows", "trained_rows", "loss_per_epoch", "training_data_hash")


def default_scorer(workdir: Path) -> Path:
    """``--tuned metaqa``: the scorer the default project tunes (MetaQA; relplan's held-out dev questions, leak-
    guarded; params.yaml's ``tune.*`` with ``tune.enabled=true``: 600 questions, 1,340 s on 2 cores at 2320af9), trained
    in the work copy ``<workdir>/tune-metaqa`` by its stages ingest → relplan → tune_answer_scorer. A later run reuses
    it only when the commit and params.yaml are those that trained it and no tracked file differed (``tuned_by.json``
    beside it): a bench that runs twice (two ``--set`` variants) trains once. Returns its ``data/tune`` folder."""
    work = workcopy(workdir / "tune-metaqa")
    made = {k: v for k, v in provenance().items() if k in ("commit", "dirty", "params_sha256")}
    mark, record = work / "tuned_by.json", work / "data" / "tune" / "tune.json"
    if (not made["dirty"] and made["commit"] and mark.is_file() and json.loads(mark.read_text()) == made
            and record.is_file() and json.loads(record.read_text()).get("trained")):
        print(f"[question_graphs] --tuned {TUNE_DEFAULT}: the scorer trained at {made['commit'][:10]} in {work}",
              file=sys.stderr, flush=True)
        return record.parent
    mark.unlink(missing_ok=True)
    for stage in ("ingest", "validate", "index", "relplan", "tune_answer_scorer"):
        s = run_stage(work, stage, ["tune.enabled=true"])
        print(f"[question_graphs] --tuned {TUNE_DEFAULT}: {stage} {s['seconds']:.0f} s", file=sys.stderr, flush=True)
    mark.write_text(json.dumps(made) + "\n")
    return record.parent


def run(name: str, split: str, args, tuned_dir: Path | None = None) -> dict:
    """One set's run; ``tuned_dir``: the scorer's folder (model.gguf, tune.json) when ``--tuned``."""
    work = workcopy(Path(args.workdir) / f"{name}-{split}")
    clear_caches(work)
    tuned = None
    if args.tuned:  # a trained tune stage's output (model.gguf, tune.json), served with --set generate.model=tuned
        import shutil

        (work / "data" / "tune").mkdir(parents=True, exist_ok=True)
        for f in ("model.gguf", "tune.json"):
            shutil.copy2(tuned_dir / f, work / "data" / "tune" / f)
        record = json.loads((work / "data" / "tune" / "tune.json").read_text())
        tuned = {"from": args.tuned, **{k: record.get(k) for k in TUNE_FIELDS}}  # which scorer, as its record says
    data = work / "qgraphs" / f"{name}-{split}.jsonl"
    built = build(name, split, per_hop=args.per_hop, hops=args.hops, max_edges=args.max_edges, drop=args.drop,
                  noise=args.noise, seed=args.seed, out=data)
    if tuned:
        built["tuned"] = tuned
    labelled = []
    if args.labelled:  # a training file of the same format, as WebQSP / CWQ ship one: the labelled plan learns from it
        train = data.with_name(f"{data.stem}-train.jsonl")
        if split == "test":  # the dev questions, built the same way
            built["train"] = build(name, "dev", per_hop=args.per_hop, hops=args.hops, max_edges=args.max_edges,
                                   drop=args.drop, noise=args.noise, seed=args.seed, out=train)
        else:  # dev: its even lines train the plan, its odd lines are evaluated
            lines = data.read_text().splitlines(keepends=True)
            train.write_text("".join(lines[0::2]))
            data.write_text("".join(lines[1::2]))
            built["train"], built["evaluated"] = len(lines[0::2]), len(lines[1::2])
        labelled = ["relplan.source=labelled", f"relplan.file=qgraphs/{train.name}"]
    # --tune: stage tune_answer_scorer trains the scorer on that same labelled file (its own graphs); rank is
    # served by it
    tune = ["tune.enabled=true", "generate.model=tuned"] if args.tune else []
    sets = ["data.dataset=rog", "data.input=qgraphs", f"data.rog.path=qgraphs/{data.name}",
            f"data.sample={args.sample}", *labelled, *tune, *args.extra]
    t0, stages = time.time(), {}
    if args.retrieval_only:
        for stage in STAGES[:5]:
            stages[stage] = run_stage(work, stage, sets)
        return {"built": built, "overrides": sets, "seconds": round(time.time() - t0, 1),
                **retrieval_rows(work, args.max_context_triples)}
    for stage in STAGES[:4] + ("tune_answer_scorer",) + STAGES[4:] if args.tune else STAGES:
        stages[stage] = run_stage(work, stage, sets)
        print(f"[question_graphs] {name}: {stage} {stages[stage]['seconds']:.0f} s", file=sys.stderr, flush=True)
    if args.tune:
        record = json.loads((work / "data" / "tune" / "tune.json").read_text())
        built["tune"] = {**{k: record.get(k) for k in TUNE_FIELDS}, **stages["tune_answer_scorer"]}
    m = json.loads((work / "reports" / "metrics.json").read_text())
    import pyarrow.parquet as pq

    p = pq.read_table(work / "reports" / "predictions.parquet", columns=["answerable", "retrieval_recall"]).to_pydict()
    held = [rr for a, rr in zip(p["answerable"], p["retrieval_recall"]) if a and rr is not None]
    return {"built": built, "overrides": sets, "plan": m["setup"]["plan"], "seconds": round(time.time() - t0, 1),
            "answerable_fraction": m.get("answerable_fraction"),
            "recall_where_the_graph_holds_an_answer": round(float(np.mean(held)), 4) if held else None,
            **rows_of(work)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sets", nargs="+", default=["metaqa", *IRN], choices=["metaqa", *IRN])
    ap.add_argument("--split", default="test", choices=["dev", "test"])
    ap.add_argument("--per-hop", type=int, default=100)
    ap.add_argument("--sample", type=int, default=300, help="questions of each built file run (seeded; 0 = all)")
    ap.add_argument("--hops", type=int, default=2)
    ap.add_argument("--max-edges", type=int, default=200)
    ap.add_argument("--drop", type=float, default=0.1)
    ap.add_argument("--noise", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workdir", default="/tmp/kgrag-qgraphs")
    ap.add_argument("--set", dest="extra", action="append", default=[])
    ap.add_argument("--retrieval-only", action="store_true",
                    help="stop after retrieve: what the retrieval keeps and the first candidate, no LLM (dev checks)")
    ap.add_argument("--max-context-triples", type=int, default=60, help="--retrieval-only: the prompt's triple cap "
                    "(generate.max_context_triples)")
    ap.add_argument("--labelled", action="store_true",
                    help="the plan learns from a labelled file of the same format (relplan.file): the dev questions' "
                    "graphs for --split test; half of the dev file for --split dev (the other half evaluated)")
    ap.add_argument("--tuned", default=None, help="a tune_answer_scorer stage's output folder (data/tune of a project "
                    "where `dvc repro tune_answer_scorer` trained), or 'metaqa': the default project's, trained here "
                    "first (MetaQA dev, params.yaml's tune.*; about 22 minutes; reused by a run at the same commit): "
                    "copied into the work copy, so that --set generate.model=tuned serves it; each row records its "
                    "tune.json (built.tuned: questions, rows, loss, training_data_hash)")
    ap.add_argument("--tune", action="store_true",
                    help="with --labelled: the tune_answer_scorer stage trains rank's scorer on the labelled file "
                    "too (the user's own questions and graphs), and generate serves it (generate.model=tuned)")
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args()
    if args.tune and (not args.labelled or args.retrieval_only or args.tuned):
        ap.error("--tune needs --labelled (the file it trains on), runs the LLM (no --retrieval-only) and trains its "
                 "own scorer (no --tuned)")
    tuned_dir = None if not args.tuned else (default_scorer(Path(args.workdir)) if args.tuned == TUNE_DEFAULT
                                             else Path(args.tuned))
    out = Path(args.out)
    result = json.loads(out.read_text()) if out.exists() else {}
    result.setdefault("sets", {})
    result["note"] = (f"per-question graphs built from the KG: the {args.hops}-hop neighbourhood of the topics capped at "
                      f"{args.max_edges} edges, each edge dropped with p={args.drop}, {args.noise} x as many random "
                      "triples added; the default pipeline with data.dataset=rog")
    for name in args.sets:
        key = (f"{name}/{args.split}" + ("/labelled" if args.labelled else "") + ("/tuned" if args.tune else "")
               + ("" if not args.extra else "/" + ";".join(args.extra))
               + ("/retrieval" if args.retrieval_only else ""))
        result["sets"][key] = run(name, args.split, args, tuned_dir)
        result["sets"][key]["made_by"] = made_by()  # the row's own stamp (the file merges runs)
        a = result["sets"][key]
        print(f"[question_graphs] {key}: " + json.dumps({k: v for k, v in a.items() if k not in ("overrides", "stages")}),
              file=sys.stderr, flush=True)
        write_result(str(out), dict(result))
        if out == OUT:
            sync_transfer(result)


def sync_transfer(result: dict, path: Path = TRANSFER) -> None:
    """Copy the test rows without an LLM (``<set>/test[/labelled]/retrieval``) into ``transfer.json``, in its rows'
    shape (``all.first_end_hit_at_1`` with its interval), so that one file holds every transfer row; the rest of
    the row (the graphs' answer share, what the retrieval keeps of it) comes along, and ``source`` names the key."""
    if not path.exists():
        return
    transfer = json.loads(path.read_text())
    transfer["note_qgraphs"] = ("rows <set>-qgraphs/<kg|labelled>/retrieval: per-question graphs (RoG's format) built by "
                                "bench/question_graphs.py from the set's questions and KG, first candidate, no LLM; "
                                "copied from reports/bench/question_graphs.json (its `source` key)")
    for key, a in sorted(result.get("sets", {}).items()):
        name, *rest = key.split("/")
        if rest not in (["test", "retrieval"], ["test", "labelled", "retrieval"]):
            continue
        plan = "labelled" if "labelled" in rest else "kg"
        transfer["sets"][f"{name}-qgraphs/{plan}/retrieval"] = {
            "all": {"first_end_hit_at_1": a["first_candidate_hit_at_1"],
                    "first_end_hit_at_1_ci95": a["first_candidate_hit_at_1_ci95"], "questions": a["questions"]},
            "answer_in_graph": a.get("answer_in_graph"),
            "where_the_graph_holds_an_answer": a.get("where_the_graph_holds_an_answer"),
            "overrides": a.get("overrides"), "plan_source": plan, "seconds": a.get("seconds"),
            "made_by": a.get("made_by"),
            "source": f"reports/bench/question_graphs.json sets/{key}"}
    path.write_text(json.dumps(transfer, indent=2, sort_keys=True) + "\n")
    print(f"wrote {path} (its -qgraphs rows)")


if __name__ == "__main__":
    main()
