"""Benchmark (dev only): relplan's labels on an IRN file's dev part or MetaQA's dev files, and relpath with the plan.

``irn``: the ``irn`` loader's dev part of a released file (the test part is never read): every question labelled by
``train_plan`` (time a question, share labelled, mean label recall / precision: how well the labels' ends hold the
answers); with ``--retrieve``, a plan learnt from the first half of the dev part and relpath (default params, no
declared hop count) asked the second half: answer recall over the retrieved nodes and over the chosen ends.
``metaqa``: ``--per-hop`` questions of each dev file (seed 0, as the relplan stage samples), labelled per hop count.

``KGRAG_ROOT`` imports ``kgrag`` from another source tree (e.g. ``git archive <rev> | tar -x -C /tmp/old``), so the
same command measures a revision before a change. Prints; writes nothing.

    python -m bench.relplan_labels irn pathquestion_large PQL3-KB.txt PQL-3H.txt --retrieve   # ~2 minutes
    KGRAG_ROOT=/tmp/old python -m bench.relplan_labels irn wc2014 WC2014.txt WC-P2.txt
    python -m bench.relplan_labels metaqa --per-hop 1000                                       # ~30 s
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if os.environ.get("KGRAG_ROOT"):  # opt-in: time another source tree's kgrag (kgrag is imported lazily, below)
    sys.path.insert(0, os.environ["KGRAG_ROOT"])

DATA = ROOT.parent / "shared" / "data"
MODEL = "all-MiniLM-L6-v2"


def store(tabs):
    from kgrag.kg.duckdb_io import write_duckdb
    from kgrag.kg.store import KGStore

    path = Path(tempfile.mkdtemp()) / "kg.duckdb"
    write_duckdb(path, {"entities": tabs.entities, "relations": tabs.relations, "triples": tabs.triples,
                        "questions": tabs.questions})
    return KGStore(path)


def label(kg, qs, what: str) -> None:
    from kgrag.index.relplan import train_plan

    t0 = time.perf_counter()
    _, st = train_plan(kg=kg, questions=qs, encode=lambda t: np.ones((len(t), 2)), model="m")
    dt = time.perf_counter() - t0
    print(f"{what}: {len(qs)} questions, labelling {dt:.1f} s ({1000 * dt / max(len(qs), 1):.1f} ms a question); "
          f"labelled {st['labelled']} ({st['labelled'] / max(len(qs), 1):.3f}); label recall "
          f"{st['label_answer_recall']}, precision {st['label_answer_precision']}; mirrors {st['mirrored_relations']}")


def retrieve(kg, qs) -> None:
    from kgrag.index.embed import EmbeddingIndex, encode
    from kgrag.index.relplan import train_plan
    from kgrag.params import RetrieveParams
    from kgrag.retrieval.run import retrieve_one
    from kgrag.types import retrieval_recall

    half = len(qs) // 2
    index = EmbeddingIndex(model=MODEL, entity_vectors=encode(kg.names(np.arange(kg.num_entities)), model=MODEL),
                           relation_vectors=encode([str(r) for r in kg.relation_names], model=MODEL))
    plan, _ = train_plan(kg=kg, questions=qs[:half], encode=index.encode, model=MODEL)
    folder = Path(tempfile.mkdtemp()) / "plan"
    plan.save(folder)
    params = RetrieveParams(method="relpath", hops=2, relpath={"plan": str(folder), "paths": 1})
    asked = [replace(q, hops=None) for q in qs[half:] if q.topic_ids]
    rec, ends = [], []
    for q, v in zip(asked, index.encode([q.text for q in asked])):
        sub, _ = retrieve_one(question=q, query_vec=v, kg=kg, index=index, params=params)
        nodes = set(sub.node_ids.tolist())
        rec.append(retrieval_recall(answer_ids=q.answer_ids, node_ids=nodes))
        want = set(q.answer_ids) - set(q.topic_ids)
        ends.append(len(want & set(sub.trace.get("ends", []))) / len(want) if want
                    else float(bool(set(q.answer_ids) & nodes)))
    print(f"  relpath, plan from {half}, asked {len(asked)}: recall {np.mean(rec):.3f}; answers in the chosen "
          f"ends {np.mean(ends):.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("set", choices=["irn", "metaqa"])
    ap.add_argument("files", nargs="*", help="irn: folder under ../shared/data/transfer, KB file, question file")
    ap.add_argument("--retrieve", action="store_true")
    ap.add_argument("--per-hop", type=int, default=2000)
    a = ap.parse_args()
    import kgrag

    print(f"kgrag from {Path(kgrag.__file__).parent}")
    if a.set == "irn":
        from kgrag.kg.loaders.irn import load_irn
        from kgrag.kg.store import questions_on

        folder, kb, qf = a.files
        base = DATA / "transfer" / folder
        tabs = load_irn(kb=str(base / kb), questions=str(base / qf), split="dev")
        kg = store(tabs)
        qs = questions_on(kg, tabs)
        label(kg, qs, f"{qf} dev")
        if a.retrieve:
            retrieve(kg, qs)
        return
    from kgrag.kg.loaders.metaqa import load_metaqa
    from kgrag.kg.store import questions_from_table

    tabs = load_metaqa(path=str(DATA / "metaqa"), hops=[1, 2, 3], split="dev", sample=a.per_hop, seed=0)
    kg = store(tabs)
    qs = questions_from_table(tabs.questions, declared_hops=True)
    for h in (1, 2, 3):
        label(kg, [q for q in qs if q.hops == h], f"MetaQA {h}-hop dev")


if __name__ == "__main__":
    main()
