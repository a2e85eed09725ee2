"""Benchmark: entity linking on MetaQA questions with their ``[brackets]`` removed.

Draws ``--questions`` questions of the ``--split`` files of every hop count (seeded, an equal share per hop
count), removes the brackets MetaQA puts around the topic entity, links each with ``kgrag.kg.linking`` (the rule
``data.link_entities`` and ``kgrag ask`` use) over the whole MetaQA KG (loaded by the ``metaqa`` loader, as
ingest does), and counts a question as found when the linked entity is the bracketed one. Beside it, the
same without the relation fit (longest match, then exact case: the rule before issue 24) as a reference.

Writes ``--out`` (default ``reports/bench/linking.json``): per hop count and overall, questions, found share
with its bootstrap 95% interval, how many got no entity, and the ten first misses (question, gold, linked).

    python bench/linking.py --split test --questions 500
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import write_result  # noqa: E402

from kgrag.kg import linking  # noqa: E402
from kgrag import schema as S  # noqa: E402
from kgrag.evaluation.metrics import bootstrap_ci  # noqa: E402
from kgrag.registry import LOADERS  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    """Run the bench."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--path", default="../shared/data/metaqa", help="MetaQA folder")
    ap.add_argument("--split", default="test", choices=["dev", "test"])
    ap.add_argument("--questions", type=int, default=500, help="questions in all, an equal share per hop count")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="reports/bench/linking.json")
    a = ap.parse_args(argv)
    load = LOADERS.get("metaqa").impl
    per = -(-a.questions // 3)
    rules = {"default": lambda k, t: k.link(t),
             "no_relation_fit": lambda k, t: linking.link(t, lookup=k.lookup, relations_of=lambda ids: {})}
    result: dict = {"split": a.split, "seed": a.seed, "questions_per_hop": per, "rules": {}}
    for name, rule in rules.items():
        rows = []
        t0 = time.perf_counter()
        for hops in (1, 2, 3):
            tabs = load(path=a.path, hops=hops, split=a.split, sample=per, seed=a.seed)
            names = tabs.entities[S.NAME].to_pylist()  # entity ids are row positions in a loader's table
            kg = linking.ArrayKG(names, tabs.triples[S.HEAD].to_numpy(),
                                 tabs.triples[S.RELATION].to_numpy(), tabs.triples[S.TAIL].to_numpy(),
                                 tabs.relations[S.NAME].to_pylist())
            for q in tabs.questions.to_pylist():
                text = re.sub(r"[\[\]]", "", q[S.TEXT])
                got = rule(kg, text)
                gold = [i for i in q[S.TOPIC_IDS] if i is not None]
                rows.append({"hops": hops, "found": float(bool(got.ids) and got.ids[0] in gold), "none": not got.ids,
                             "question": text, "gold": [names[i] for i in gold],
                             "linked": got.span})
        out = {"seconds": round(time.perf_counter() - t0, 1)}
        for key, sub in [("all", rows)] + [(f"{h}-hop", [r for r in rows if r["hops"] == h]) for h in (1, 2, 3)]:
            f = [r["found"] for r in sub]
            lo, hi = bootstrap_ci(f)
            out[key] = {"questions": len(sub), "found": round(float(np.mean(f)), 4), "ci95": [lo, hi],
                        "no_entity": sum(r["none"] for r in sub)}
        out["misses"] = [{k: r[k] for k in ("question", "gold", "linked")} for r in rows if not r["found"]][:10]
        result["rules"][name] = out
        print(name, {k: v for k, v in out.items() if k != "misses"})
    write_result(a.out, result)


if __name__ == "__main__":
    main()
