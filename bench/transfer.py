"""Benchmark: transfer, with and without labelled questions: MetaQA mixed-hop and KGs that are not MetaQA.

Each set runs through the pipeline as a user would run it (``python -m stages.<name> --set ...`` for ingest,
validate, index, relplan, retrieve, generate, evaluate, in a work copy of the repository under ``--workdir``, its
own caches), once per plan source:

- ``kg`` (no labelled questions): ``relplan.source: kg``: the held-out part's question *texts* (answers never
  read) labelled by the zero-shot planner (``kgrag.index.zeroshot``), whose vote spreads each wording's choice;
- ``none`` (``--sources none``): the zero-shot planner alone, no held-out text at all;
- ``labelled``: ``relplan.source: labelled``: the held-out part's questions with their answers.

Sets (data as released in ``../shared/data``; the IRN files have no split: the ``irn`` loader's seeded part,
``test_share: 0.5``, ``split_seed: 7``, test for the run, dev for the plan; every question's topics linked from
its text, ``data.link_entities``):

- ``metaqa-mixed``: MetaQA test, ``--per-hop`` questions of each of the 1/2/3-hop files (seed 0), brackets
  removed and topics linked from the text (``data.link_entities``); the plan learns on the dev files;
- ``wc2014-p2``: WorldCup2014 2-hop questions (``WC-P2.txt``); ``wc2014-c``: its two-topic questions (``WC-C.txt``,
  "which player in Tigres_UANL is from Mexico ?");
- ``pql-2h`` / ``pql-3h``: PathQuestion-Large 2- and 3-hop (``PQL-2H.txt`` over ``PQL2-KB.txt``, ``PQL-3H.txt``
  over ``PQL3-KB.txt``).

Rows (one per set, source and hop count): questions, Hit@1 and its seeded bootstrap 95% interval, retrieval
recall, the first- and random-candidate no-LLM baselines, ``llm_lift`` (Hit@1 minus the better baseline) and the
paired lift over the first candidate with its interval. Writes ``reports/bench/transfer.json`` (merged: one set
or source at a time may be re-run).

**Select on dev, report on test.** The planner's weights and ``plan_weight`` were chosen on the dev parts
(``bench/planner_dev.py``); this bench is the single test measurement. ``--split dev`` runs the same thing inside
the IRN sets' dev parts (written in two seeded halves: the plan learns on one, the run scores the other; the test
part is never read); MetaQA's dev check is ``bench/generalize.py --split dev``.

    python -m bench.transfer                                # every set, sources kg and labelled (~1.5 h)
    python -m bench.transfer --sets wc2014-p2 --sources none kg labelled
    python -m bench.transfer --dev-protocol-only          # copy planner_dev.json's leave-one-KG-out rows in
    python -m bench.transfer --split dev --sources kg --retrieval-only --loko reports/bench/planner_pseudo_types.json \
        --set relplan.wordnet=false                       # leave-one-KG-out through the pipeline (relplan.base_weights)

``--retrieval-only`` rows also give the set's *paraphrase subset* (:func:`paraphrase_flags`).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from bench._machine import made_by
from bench.common import write_result
from bench.full_split import clear_caches, run_stage, workcopy

ROOT = Path(__file__).resolve().parents[1]

OUT = ROOT / "reports" / "bench" / "transfer.json"
STAGES = ("ingest", "validate", "index", "relplan", "retrieve", "generate", "evaluate")
TRANSFER = "../shared/data/transfer"


PLANNER_DEV = ROOT / "reports" / "bench" / "planner_dev.json"


_PSEUDO_WORDNET = "lexical + WordNet (pseudo-question fit towards the other KGs' weights, lam 0.01)"
#: the pseudo-question fits dev_protocol reports as a mean (min) over draws: (the first draw's file, its seeds' files
#: sharing its stem, ((row label, planner_dev config), ...)), oldest first. Each new default adds one entry.
DRAWS = (
    # the per-KG fit (``python -m bench.planner_dev --zero-shot-only --pseudo 300 --pseudo-types 0.5
    # --pseudo-prior-lams 0.01 0.1 --pseudo-seed S``, seeds 0-2: planner_pseudo_types.json, ..._seed1, ..._seed2);
    # the prior there is the other KGs' smooth fit, as the shipped weights are to a new KG
    (PLANNER_DEV.parent / "planner_pseudo_types.json", (
        ("leave-one-KG-out, relplan's fit with the plain matcher (relplan.wordnet false; this KG's pseudo-questions, "
         "half typed, towards the other KGs' weights, lam 0.01)",
         "lexical (pseudo-question fit towards the other KGs' weights, lam 0.01)"),
        ("this KG alone (its pseudo-questions, half typed, no prior: relplan.pseudo_prior 0)",
         "lexical (smooth fit on this KG's pseudo-questions)"))),
    # the same fit with WordNet's links in every feature row (``relplan.wordnet``, the default since 2026-12-05: the
    # commands above with ``--wordnet``, seeds 0-1: planner_wordnet_typed.json, ..._seed1)
    (PLANNER_DEV.parent / "planner_wordnet_typed.json", (
        ("leave-one-KG-out, relplan's fit with WordNet's links, no compound heads (relplan.wordnet's first version)",
         _PSEUDO_WORDNET),)),
    # with a compound hypernym's head linked too (``zeroshot.WORDNET_HEADS``, the default since 2026-12-05: the same
    # commands: planner_wordnet_heads.json, ..._seed1)
    (PLANNER_DEV.parent / "planner_wordnet_heads.json", (
        ("leave-one-KG-out, relplan's fit with WordNet's links with compound heads (its default on 2026-12-05)",
         _PSEUDO_WORDNET),)),
    # with links chained through a derivation and a co-step with a sharing word said once or twice
    # (``zeroshot.WORDNET_CHAINS`` and the ``count`` feature, the defaults since 2026-12-06: the same commands:
    # planner_wordnet_chains.json, ..._seed1)
    (PLANNER_DEV.parent / "planner_wordnet_chains.json", (
        ("leave-one-KG-out, relplan's default fit (WordNet's links with compound heads and derivation chains; a "
         "co-step with a sharing word said once or twice)", _PSEUDO_WORDNET),)),
    # with the answer type named by a WordNet class noun (``zeroshot.TYPE_NOUN``, ``kgrag.index.answer_types.
    # noun_types``, the default since 2026-12-06: the same commands: planner_wordnet_nouns.json, ..._seed1)
    (PLANNER_DEV.parent / "planner_wordnet_nouns.json", (
        ("leave-one-KG-out, relplan's default fit (the links above; the answer type also read from the noun that "
         "names the last step's range)", _PSEUDO_WORDNET),)),
)

#: leave-one-KG-out through the pipeline: each dev half with relplan.base_weights from planner_dev's fit on the other
#: KGs (``--loko reports/bench/planner_wordnet_nouns.json --loko-row "lexical + WordNet (leave-one-KG-out, smooth
#: fit)"``), the default params otherwise (relpath.rescore on): topics linked from the text, the beam, the
#: self-trained vote
PIPELINE_LOKO = PLANNER_DEV.parent / "transfer_dev_loko_nouns.json"


def dev_protocol(path: Path = PLANNER_DEV) -> dict | None:
    """The dev protocol's rows from ``bench/planner_dev.py``'s result, per dev KG: the zero-shot planner with the
    shipped weights (the coordinate search's, fitted on all four dev KGs: in sample), leave-one-KG-out (weights
    fitted on the other KGs only: the coordinate search, seed 0 and the mean over seeds, and the smooth fit), each with
    its paraphrase subset (questions whose words share no 4-letter stem with a relation on the gold path). A
    retrieval figure over every candidate sequence (expected Hit@1 of a random end), not the pipeline's."""
    if not path.exists():
        return None
    pd = json.loads(path.read_text())
    cfg, rows = pd["configs"], {}
    for label, key in (("zero-shot, shipped weights (in sample)", "lexical"),
                       ("leave-one-KG-out, smooth fit", "lexical (leave-one-KG-out, smooth fit)"),
                       ("leave-one-KG-out, coordinate search seed 0 (the shipped weights' method)",
                        "lexical (leave-one-KG-out weights)")):
        for kg, r in sorted(cfg.get(key, {}).items()):
            rows.setdefault(kg, {})[label] = {"all": r["all"], "paraphrase": r["paraphrase"],
                                              "paraphrase_questions": r["paraphrase_questions"],
                                              "questions": r["questions"]}
    for kg, r in sorted(pd.get("loko_seeds", {}).get("lexical", {}).items()):
        rows.setdefault(kg, {})[f"leave-one-KG-out, coordinate search, mean of {r['seeds']} seeds"] = {
            "all": r["all_mean"], "paraphrase": r["paraphrase_mean"]}
    read = []  # every draw file read, in DRAWS' order
    for first, labelled in DRAWS:
        files = sorted(path.parent.glob(f"{first.stem}*.json"))
        read += files
        configs = [json.loads(f.read_text())["configs"] for f in files]  # each draw read once for all its rows
        for label, key in labelled:
            _mean_of_draws(rows, label, [c.get(key, {}) for c in configs])
    return {"source": "reports/bench/planner_dev.json" + "".join(f", reports/bench/{f.name}" for f in read),
            "made_by": pd.get("run"), "metric": pd.get("metric"), "kgs": rows,
            "pipeline": pipeline_loko(path.parent / PIPELINE_LOKO.name)}


def _mean_of_draws(rows: dict, label: str, runs: list[dict]) -> None:
    """Each KG's row ``label`` (mean and min over the pseudo-question draws ``runs``: one config's rows per draw)."""
    for kg in sorted(runs[0] if runs else {}):
        v = [r[kg] for r in runs if kg in r]
        para = [x["paraphrase"] for x in v if x["paraphrase"] is not None]
        rows.setdefault(kg, {})[f"{label}, mean (min) of {len(v)} pseudo-question draws"] = {
            "all": round(sum(x["all"] for x in v) / len(v), 4), "all_min": min(x["all"] for x in v),
            "paraphrase": round(sum(para) / len(para), 4) if para else None,
            "paraphrase_questions": v[0]["paraphrase_questions"], "questions": v[0]["questions"]}


def pipeline_loko(path: Path = PIPELINE_LOKO) -> dict | None:
    """The pipeline's leave-one-KG-out rows (``PIPELINE_LOKO``): per dev set, the first end's Hit@1 with its 95%
    interval and retrieval recall, on all its dev half's questions and on the paraphrase subset; None without it."""
    if not path.exists():
        return None
    res = json.loads(path.read_text())
    sets = {}
    for key, r in sorted(res.get("sets", {}).items()):
        if key.endswith("/loko") and "all" in r:
            sets[key.split("/")[0]] = {part: {k: r[part][k] for k in ("first_end_hit_at_1", "first_end_hit_at_1_ci95",
                                                                      "retrieval_recall", "questions") if k in r[part]}
                                       for part in ("all", "paraphrase") if r.get(part)}
    return {"source": f"reports/bench/{path.name}", "made_by": res.get("run"),
            "metric": "first end's Hit@1 through the pipeline (no LLM), the dev half of each set", "sets": sets}


def set_overrides(name: str, per_hop: int, split: str) -> list[str]:
    """The ``--set`` overrides of a set (its loader and files; ``split`` the evaluated part)."""
    held = "dev" if split == "test" else "test"
    if name == "metaqa-mixed":
        return ["data.dataset=metaqa", "data.hops=[1, 2, 3]", f"data.split={split}", f"data.sample={per_hop}",
                "data.link_entities=true", f"relplan.split={held}", f"finetune.split={held}"]
    files = {"wc2014-p2": ("wc2014", "WC2014.txt", "WC-P2.txt"), "wc2014-c": ("wc2014", "WC2014.txt", "WC-C.txt"),
             "pql-2h": ("pathquestion_large", "PQL2-KB.txt", "PQL-2H.txt"),
             "pql-3h": ("pathquestion_large", "PQL3-KB.txt", "PQL-3H.txt")}
    folder, kb, qs = files[name]
    base = f"{TRANSFER}/{folder}"
    if split == "dev":  # the dev part in two halves (dev_halves): the plan learns on one, the run scores the other
        base = f"devparts/{name}"
        return ["data.dataset=irn", f"data.input={base}", f"data.irn.kb={base}/{kb}",
                f"data.irn.questions={base}/scored.txt", "data.irn.split=all", "data.sample=0",
                f"relplan.file={base}/plan.txt"]
    return ["data.dataset=irn", f"data.input={base}", f"data.irn.kb={base}/{kb}", f"data.irn.questions={base}/{qs}",
            f"data.irn.split={split}", "data.sample=0", "data.link_entities=true", f"relplan.split={held}"]


def dev_halves(work: Path, name: str) -> None:
    """``--split dev`` on an IRN set: the irn loader's dev part (never its test part) written as two IRN files
    under ``work/devparts/<set>/``: ``plan.txt`` (a seeded half, the plan's questions) and ``scored.txt`` (the
    other half, the evaluated ones), with the KB beside them."""
    import numpy as np

    from kgrag.kg.loaders.irn import part_of

    files = {"wc2014-p2": ("wc2014", "WC2014.txt", "WC-P2.txt"), "wc2014-c": ("wc2014", "WC2014.txt", "WC-C.txt"),
             "pql-2h": ("pathquestion_large", "PQL2-KB.txt", "PQL-2H.txt"),
             "pql-3h": ("pathquestion_large", "PQL3-KB.txt", "PQL-3H.txt")}
    folder, kb, qs = files[name]
    src = ROOT.parent / "shared" / "data" / "transfer" / folder
    out = work / "devparts" / name
    out.mkdir(parents=True, exist_ok=True)
    (out / kb).write_bytes((src / kb).read_bytes())
    lines = [x for x in (src / qs).read_text().splitlines() if x.strip()]
    dev = [lines[i] for i in part_of(len(lines), split="dev", test_share=0.5, split_seed=7)]
    perm = np.random.default_rng(11).permutation(len(dev))
    half = set(perm[: len(dev) // 2].tolist())
    (out / "plan.txt").write_text("".join(x + "\n" for i, x in enumerate(dev) if i in half))
    (out / "scored.txt").write_text("".join(x + "\n" for i, x in enumerate(dev) if i not in half))


SETS = ("metaqa-mixed", "wc2014-p2", "wc2014-c", "pql-2h", "pql-3h")


def rows_of(work: Path) -> dict:
    """Per hop count and overall: questions, Hit@1 [95%], retrieval recall, baselines, llm_lift and the paired
    lift over the first candidate [95%], from the work copy's ``reports/predictions.parquet``."""
    import numpy as np
    import pyarrow.parquet as pq

    from kgrag.evaluation.metrics import bootstrap_ci

    t = pq.read_table(work / "reports" / "predictions.parquet",
                      columns=["hops", "hit_at_1", "hit_baseline_first", "hit_baseline_random",
                               "retrieval_recall"]).to_pydict()
    hops = np.asarray([h if h is not None else 0 for h in t["hops"]])

    def block(sel: np.ndarray) -> dict:
        hit = np.asarray(t["hit_at_1"], float)[sel]
        first = np.asarray(t["hit_baseline_first"], float)[sel]
        rand = np.asarray(t["hit_baseline_random"], float)[sel]
        rec = [r for r, s in zip(t["retrieval_recall"], sel) if s and r is not None]
        d = hit - first
        return {"questions": int(sel.sum()), "hit_at_1": round(float(hit.mean()), 4),
                "hit_at_1_ci95": bootstrap_ci(hit, resamples=2000, seed=0),
                "retrieval_recall": round(float(np.mean(rec)), 4) if rec else None,
                "baseline_first": round(float(first.mean()), 4), "baseline_random": round(float(rand.mean()), 4),
                "llm_lift": round(float(hit.mean() - max(first.mean(), rand.mean())), 4),
                "lift_over_first": round(float(d.mean()), 4),
                "lift_over_first_ci95": bootstrap_ci(d, resamples=2000, seed=0)}

    out = {"all": block(np.ones(len(hops), bool))}
    if len(set(hops.tolist())) > 1:
        out["by_hops"] = {str(k): block(hops == k) for k in sorted(set(hops.tolist()))}
    return out


def retrieval_rows(work: Path) -> dict:
    """Without the LLM (``--retrieval-only``): per hop count, overall and on the paraphrase subset
    (:func:`paraphrase_flags`), questions, the first end's Hit@1 (the
    first-candidate baseline of ``rank``) with its interval and retrieval recall, from the work copy's
    ``data/retrieve/retrieved.parquet`` and ``data/validated/questions.parquet``."""
    import numpy as np
    import pyarrow.parquet as pq

    from kgrag import schema as S
    from kgrag.evaluation.metrics import bootstrap_ci

    q = pq.read_table(work / "data" / "validated" / "questions.parquet").to_pylist()
    r = {x[S.QUESTION_ID]: x for x in pq.read_table(work / "data" / "retrieve" / "retrieved.parquet").to_pylist()}
    para = paraphrase_flags(work, q)
    hit, rec, hops = [], [], []
    for x in q:
        got = r.get(x[S.QUESTION_ID]) or {}
        ends = json.loads(got.get(S.TRACE) or "{}").get("ends") or []
        gold = {a for a in x[S.ANSWER_IDS] or [] if a is not None}
        hit.append(float(bool(ends) and ends[0] in gold))
        rec.append(len(gold & set(got.get(S.NODE_IDS) or [])) / len(gold) if gold else 0.0)
        hops.append(x[S.HOPS] or 0)
    hit, rec, hops = np.asarray(hit), np.asarray(rec), np.asarray(hops)

    def block(sel):
        return {"questions": int(sel.sum()), "first_end_hit_at_1": round(float(hit[sel].mean()), 4),
                "first_end_hit_at_1_ci95": bootstrap_ci(hit[sel], resamples=2000, seed=0),
                "retrieval_recall": round(float(rec[sel].mean()), 4)}
    out = {"all": block(np.ones(len(hit), bool))}
    if len(set(hops.tolist())) > 1:
        out["by_hops"] = {str(k): block(hops == k) for k in sorted(set(hops.tolist()))}
    sel = np.asarray([p is True for p in para])
    out["paraphrase"] = block(sel) if sel.any() else {"questions": 0}
    out["paraphrase"]["gold_path_found"] = sum(p is not None for p in para)
    return out


def paraphrase_flags(work: Path, questions: list[dict]) -> list[bool | None]:
    """Each question's membership of its set's *paraphrase subset* (issue 54): its gold path (relplan's weak
    label, the rule a labelled plan trains on: :func:`kgrag.index.relplan.relation_sequence` over 1-3 steps with
    the KG's mirrors walked back) reaches an answer, and no content word of its text shares a 4-letter stem with a
    relation on that path (:func:`kgrag.index.zeroshot.echoes`); None where no path of 1-3 steps reaches an
    answer (or no topic links). The answers are read here to score, never by the run."""
    import numpy as np

    from kgrag import schema as S
    from kgrag.index.relplan import mirror_ids, mirror_pairs, relation_sequence
    from kgrag.index.zeroshot import echoes
    from kgrag.kg.store import KGStore

    kg = KGStore(work / "data" / "validated" / "kg.duckdb")
    skip, back = mirror_ids(kg.relation_names, mirror_pairs(kg))
    out: list[bool | None] = []
    for x in questions:
        topics = [t for t in x[S.TOPIC_IDS] or [] if t is not None]
        answers = [a for a in x[S.ANSWER_IDS] or [] if a is not None]
        lab = relation_sequence(kg, topics, answers, None, 3, skip, back) if topics and answers else None
        if lab is None:
            out.append(None)
            continue
        names = [str(rel) for rel, _ in lab[0]]
        out.append(not echoes(x[S.TEXT], [str(n) for n in kg.names(np.asarray(topics, np.int64))], names))
    return out


def run(name: str, source: str, *, workdir: Path, per_hop: int, split: str, extra: list[str],
        retrieval_only: bool = False) -> dict:
    """One set with one plan source through the pipeline; its rows and the run's record."""
    work = workcopy(workdir / f"{name}-{source}-{split}")
    clear_caches(work)
    if split == "dev" and name != "metaqa-mixed":
        dev_halves(work, name)
    sets = [*set_overrides(name, per_hop, split), f"relplan.source={source}", *extra]
    t0, stages = time.time(), {}
    if retrieval_only:
        for stage in STAGES[:5]:
            stages[stage] = run_stage(work, stage, sets)
        plan = json.loads((work / "data" / "relplan" / "plan.json").read_text())
        return {"overrides": sets, "plan_source": plan.get("source"), "plan_questions": plan.get("labelled", 0),
                "seconds": round(time.time() - t0, 1), "stages": stages, **retrieval_rows(work)}
    for stage in STAGES:
        stages[stage] = run_stage(work, stage, sets)
        print(f"[transfer] {name} {source}: {stage} {stages[stage]['seconds']:.0f} s", file=sys.stderr, flush=True)
    m = json.loads((work / "reports" / "metrics.json").read_text())
    plan = json.loads((work / "data" / "relplan" / "plan.json").read_text())
    return {"overrides": sets, "plan": m["setup"]["plan"], "plan_questions": plan.get("labelled", 0),
            "seconds": round(time.time() - t0, 1), "stages": stages, **rows_of(work)}


#: each set's KG in bench/planner_dev.py's rows (its leave-one-KG-out weights hold out the KG's family)
HARNESS_KG = {"metaqa-mixed": "metaqa", "wc2014-p2": "wc2014-p2", "wc2014-c": "wc2014-p2", "pql-2h": "pql-2h",
              "pql-3h": "pql-3h"}


def loko_override(path: Path, row: str, name: str) -> list[str]:
    """The ``--set`` that gives set ``name`` the weights fitted without its KG: ``relplan.base_weights`` from row
    ``row`` of a bench/planner_dev.py result (its ``configs[row][kg]["weights"]``, in ``zeroshot.FEATURES``
    order)."""
    from kgrag.index.zeroshot import FEATURES

    configs = json.loads(path.read_text())["configs"]
    if row not in configs:
        raise SystemExit(f"--loko {path}: no row {row!r} (rows with weights: "
                         f"{', '.join(k for k, v in configs.items() if 'weights' in next(iter(v.values()), {}))})")
    w = configs[row][HARNESS_KG[name]]["weights"]
    return ["relplan.base_weights=" + json.dumps(dict(zip(FEATURES, w)), separators=(",", ":"))]


def main() -> None:
    """Run the benchmark."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sets", nargs="+", default=list(SETS), choices=list(SETS))
    ap.add_argument("--sources", nargs="+", default=["kg", "labelled"], choices=["none", "kg", "labelled"])
    ap.add_argument("--split", default="test", choices=["dev", "test"])
    ap.add_argument("--per-hop", type=int, default=150, help="MetaQA questions per hop count")
    ap.add_argument("--workdir", default="/tmp/kgrag-transfer")
    ap.add_argument("--set", dest="extra", action="append", default=[], help="another --set override (repeatable)")
    ap.add_argument("--retrieval-only", action="store_true",
                    help="stop after retrieve: the first end's Hit@1 and recall, no LLM (dev checks)")
    ap.add_argument("--dev-protocol-only", action="store_true",
                    help="only (re)write the dev_protocol section from reports/bench/planner_dev.json (no set is run)")
    ap.add_argument("--loko", metavar="PLANNER_DEV_JSON",
                    help="leave-one-KG-out through the pipeline: each set's relplan.base_weights are the weights "
                         "fitted on the other KGs' labelled dev questions, read from this bench/planner_dev.py result "
                         "(row --loko-row); nothing is fitted on the scored KG's questions")
    ap.add_argument("--loko-row", default="lexical (leave-one-KG-out, smooth fit)",
                    help="the planner_dev row whose per-KG weights --loko reads (with relplan.wordnet: the row "
                         "'lexical + WordNet (leave-one-KG-out, smooth fit)')")
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args()
    out = Path(args.out)
    result = json.loads(out.read_text()) if out.exists() else {}
    result.setdefault("sets", {})
    result["dev_protocol"] = dev_protocol()  # the choices' dev figures beside the test rows they chose
    if args.dev_protocol_only:
        write_result(str(out), result)
        return
    result["note"] = ("test parts measured once with the weights chosen on dev (bench/planner_dev.py); IRN sets: the "
                      "irn loader's seeded halves (test_share 0.5, split_seed 7); MetaQA: per_hop questions of each "
                      "test file (seed 0), topics linked from the text; sources: kg = held-out texts only (no answer "
                      "read), labelled = held-out questions with answers, none = the zero-shot planner alone")
    for name in args.sets:
        for source in args.sources:
            key = f"{name}/{source}" + ("" if args.split == "test" else f"/{args.split}") + (
                "/retrieval" if args.retrieval_only else "")
            print(f"[transfer] {key}", file=sys.stderr, flush=True)
            if args.loko:
                key += "/loko"
            extra = args.extra + (loko_override(Path(args.loko), args.loko_row, name) if args.loko else [])
            result["sets"][key] = run(name, source, workdir=Path(args.workdir), per_hop=args.per_hop,
                                      split=args.split, extra=extra, retrieval_only=args.retrieval_only)
            result["sets"][key]["made_by"] = made_by()  # the row's own stamp (the file merges runs)
            a = result["sets"][key]["all"]
            print(f"[transfer] {key}: {json.dumps(a)}", file=sys.stderr, flush=True)
            write_result(str(out), dict(result))


if __name__ == "__main__":
    main()
