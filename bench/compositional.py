"""Benchmark: compositional generalization of the labelled plan: relation sequences no training question had.

The plan is trained (``kgrag.index.relplan.train_plan``, as the relplan stage does) on MetaQA dev questions with a
seeded fifth of their relation sequences removed: every training question whose label is a removed sequence is left
out. Then MetaQA test questions (``--per-hop`` of each hop count, seed 0, topics linked from the text) whose own
label (the same labelling of their gold answers) is a removed sequence are answered by the default experiment with
that plan: a whole-sequence vote cannot propose their sequence, so what answers is the zero-shot planner plus the
plan's lexicon (each relation's wording, learnt from the sequences that remain). Beside them, the same plan on test
questions whose sequence was kept, and the zero-shot planner alone (no plan) on the removed-sequence questions.

Reads the pipeline run's KG and index (``dvc repro index``); writes ``reports/bench/compositional.json`` (Hit@1
with its interval, the first / random candidate baselines and the LLM lift, per set).

    python -m bench.compositional --per-hop 300
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

from bench.common import machine, write_result
from bench.generalize import question_rows, run_config

from kgrag import schema as S
from kgrag.experiment import Experiment, Files
from kgrag.index.relplan import mask_topics, sequence_scores, train_plan, wording_labels
from kgrag.kg.store import questions_from_table
from kgrag.params import load
from kgrag.registry import LOADERS


def labels_of(kg, rows: list[dict]) -> list:
    """Each question row's label (the relation sequence to its gold answers, per wording), or None."""
    import pyarrow as pa

    qs = questions_from_table(pa.Table.from_pylist([{k: r.get(k) for k in S.QUESTIONS.names} for r in rows],
                                                   schema=S.QUESTIONS))
    cands = [sequence_scores(kg, q.topic_ids, q.answer_ids, None) for q in qs]
    texts = [mask_topics(q.text, kg.names(np.asarray(q.topic_ids, dtype=np.int64))) for q in qs]
    labs, _ = wording_labels(texts, cands)
    return [lab[0] if lab else None for lab in labs]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--per-hop", type=int, default=300)
    ap.add_argument("--train-per-hop", type=int, default=2000)
    ap.add_argument("--share", type=float, default=0.2, help="share of the training sequences removed")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="reports/bench/compositional.json")
    args = ap.parse_args()
    base = load("params.yaml")
    files = Files.of()
    kg = Experiment(base, files).kg
    index = Experiment(base, files).index
    from kgrag.kg.store import questions_on

    load_qa = LOADERS.get("metaqa").impl
    train = []
    for k in (1, 2, 3):
        train += questions_on(kg, load_qa(path=base.data.path, hops=k, split="dev", sample=args.train_per_hop,
                                          seed=args.seed))
    model, stats = train_plan(kg=kg, questions=train, encode=index.encode, model=index.model)
    seqs = sorted(set(model.labels))
    rng = np.random.default_rng(args.seed)
    removed = {seqs[i] for i in rng.choice(len(seqs), size=max(1, int(round(args.share * len(seqs)))), replace=False)}
    # the plan again, on the training questions whose label was kept (its vote and lexicon never see a removed one)
    by_text = {}
    for q in train:
        by_text.setdefault(mask_topics(q.text, kg.names(np.asarray(q.topic_ids, dtype=np.int64))), []).append(q)
    labelled = dict(zip(model.texts, model.labels))  # masked text -> a label of that wording
    kept_q = [q for q in train if labelled.get(mask_topics(q.text, kg.names(np.asarray(q.topic_ids, dtype=np.int64))))
              not in removed]
    plan, pstats = train_plan(kg=kg, questions=kept_q, encode=index.encode, model=index.model)
    assert not set(plan.labels) & removed
    folder = Path(tempfile.mkdtemp(prefix="kgrag-compositional-")) / "plan"
    plan.save(folder, {**pstats, "source": "labelled", "note": f"{len(removed)} of {len(seqs)} sequences removed"})
    qrows = question_rows(params=base, split="test", per_hop=args.per_hop, seed=args.seed, kg=kg, link=True)
    labs = labels_of(kg, qrows)
    gone = [r for r, lab in zip(qrows, labs) if lab in removed]
    stay = [r for r, lab in zip(qrows, labs) if lab is not None and lab not in removed]
    result = {"machine": machine(), "removed_sequences": [[list(s) for s in seq] for seq in sorted(removed)],
              "sequences": len(seqs), "training_questions": len(kept_q), "test_questions": len(qrows),
              "note": (f"plan trained on {len(kept_q)} MetaQA dev questions whose label is not one of {len(removed)} "
                       f"seeded removed sequences (of {len(seqs)}); test questions linked from the text"), "sets": {}}
    configs = {"removed sequences, plan without them": (gone, [f"retrieve.relpath.plan={folder}"]),
               "removed sequences, zero-shot planner alone": (gone, ["retrieve.relpath.plan=null"]),
               "kept sequences, plan without the removed ones": (stay, [f"retrieve.relpath.plan={folder}"])}
    for name, (rows, ov) in configs.items():
        if not rows:
            continue
        print(f"[compositional] {name}: {len(rows)} questions", file=sys.stderr, flush=True)
        res = run_config(exp=Experiment(load("params.yaml", ov), files), qrows=rows)
        res.pop("_rows", None)
        result["sets"][name] = res
        write_result(args.out, dict(result))


if __name__ == "__main__":
    main()
