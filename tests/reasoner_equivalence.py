"""Old-versus-new check of a refactor of the graph reasoners (tog, fasttog, agent, explore): each runs on two tiny
KGs with scripted replies (a function of a hash of the request and a salt: the same request gets the same reply in
both checkouts) over every valid combination of decide, answer, demos, stop, prune, fallback and strategy; per
case the requests sent, the calls' keys, the trace (its JSON, key order included) and the answer are written, one
JSON line each. Run it in both checkouts (the old one, e.g. ``git worktree add /tmp/old REV``, imported through
PYTHONPATH), then compare::

    cd /tmp/old && PYTHONPATH=/tmp/old python $NEW/tests/reasoner_equivalence.py run /tmp/old.jsonl
    cd $NEW && python -m tests.reasoner_equivalence run /tmp/new.jsonl
    python -m tests.reasoner_equivalence compare /tmp/old.jsonl /tmp/new.jsonl

(issue 56's policies refactor: 1,910 of 1,910 cases identical; about 10 s.) ``test_reasoner_equivalence.py``
checks the harness itself is deterministic.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
import sys
import tempfile
from pathlib import Path

import numpy as np

import kgrag
from kgrag.index.relplan import PlanModel
from kgrag.kg.duckdb_io import write_duckdb
from kgrag.kg.store import KGStore
from kgrag.llm.calls import LLMClient, LLMReply, score_reply_text
from kgrag.reasoning.reasoners import REASONERS, ReasonInput, Sampling, run_batched
from kgrag.reasoning.reasoners.decide import PATH_SYSTEM
from kgrag.types import Question
from tests.conftest import MOVIES, tiny_tables
from tests.test_decide_demos import PLAN_LABELS, PLAN_TEXTS
from tests.test_decide_demos import ExploreIndex as Index  # every text embeds to one plan row
from tests.test_golden_reasoners import EDGES as GOLDEN

def h(*parts) -> int:
    return int(hashlib.sha256(repr(parts).encode()).hexdigest()[:12], 16)


def names_in(text: str) -> list[str]:
    out = []
    for m in re.finditer(r"\(([^(),]+), ([^(),]+), ([^(),]+)\)", text):
        out += [m.group(1).strip(), m.group(3).strip()]
    out += re.findall(r"\[([^\]]+)\]", text)
    return [n for n in dict.fromkeys(out) if n and n != "?"] or ["Nobody"]


def rels_in(text: str) -> list[str]:
    return list(dict.fromkeys(re.findall(r"\(?[^(),]+, ([a-z_]+), [^(),]+\)", text))) or ["directed_by"]


class Scripted:
    model_id = "scripted-equiv"

    def __init__(self, salt: int) -> None:
        self.salt = salt
        self.seen: list[str] = []

    def generate(self, requests):
        self.seen.extend(repr(r) for r in requests)
        return [self.one(r) for r in requests]

    def one(self, r):
        key = (self.salt, r.messages, r.seed, r.temperature, r.continuations)
        if r.continuations:
            if h(key, "fail") % 23 == 0:
                return LLMReply(text="", tokens_in=1, tokens_out=0)
            out = []
            copy = r.messages[0][1] == PATH_SYSTEM and self.salt % 2 == 0  # even salts copy the demos
            shown = [m[1] for m in r.messages[1:-1] if m[0] == "assistant"]
            for c in r.continuations:
                if copy:
                    if c.endswith("."):
                        lp = -0.1 if c in shown else -4.0
                    elif c.endswith(" ->"):
                        lp = -0.1 if any(p.startswith(c[:-3] + " -> ") for p in shown) else -4.0
                    else:
                        lp = -0.1 if any(p.startswith(c) for p in shown) else -4.0
                else:
                    lp = -(h(key, c) % 700) / 100
                out.append((lp, 1 + h(key, c, "k") % 3))
            return LLMReply(text=score_reply_text(out), tokens_in=1, tokens_out=0)
        text = "\n".join(m[1] for m in r.messages)
        last = r.messages[-1][1]
        names, rels = names_in(text), rels_in(text)
        n1, n2 = names[h(key, 1) % len(names)], names[h(key, 2) % len(names)]
        rel = rels[h(key, 3) % len(rels)]
        sysm = r.messages[0][1]
        if "Thought' and one line" in sysm or "'Action: ...'" in sysm:  # the agent
            opts = [f"Thought: look.\nAction: RetrieveNode[{n1}]", f"Thought: t\nAction: NeighborCheck[{n1}, {rel}]",
                    f"Action: NeighborCheck[{n2}, ]", f"Action: NodeFeature[{n1}, relations]",
                    f"Action: NodeFeature[{n1}, name]", f"Action: NodeDegree[{n1}, {rel}]",
                    f"Thought: done\nAction: Finish[{n2}]", "I have no idea", "Action: Finish[]"]
        elif "one short thought at a time" in sysm:  # explore's thought
            opts = [f"Look up {n1} and {n2}.", f"Answer: {n1}", f"Which {rel} has {n1}?", "", "Hmm."]
        elif sysm.startswith("You list the entity names"):
            opts = [f"{n1} | {n2}", n1, "", "nothing here", f"{n1} | Unknownia"]
        elif "Answer: name | name" in sysm or "'Answer: name" in sysm:  # reasoning
            opts = ["Answer: Unknown", f"Answer: {n1}", f"Answer: {n1} | {n2}", "perhaps", "", "Unknown"]
        elif "Finish[" in last or "letter" in last.lower() or "{" in last:  # choices, evaluators
            opts = ["{A}", "{B}", "{B} {A}", "{C}", "{E}", "{A} {C}", "none of these", "", "{Z}"]
        elif "0-10" in last or "0 to 10" in last or "scale" in last.lower():
            opts = ["7", "3/10", "8", "bad", ""]
        else:  # CoT fallback / final answer, merge, graph2text
            opts = [f"Let me think.\nAnswer: {n1}", f"Answer: {n1} | {n2}", "no idea", "", f"{n1} merged with {n2}"]
        return LLMReply(text=opts[h(key, "pick") % len(opts)], tokens_in=1, tokens_out=1)


def grid():
    """(reasoner, params) of every valid combination."""
    out = []
    for dec, ans, demos in itertools.product(["generate", "score"], ["generate", "rank"], [0, 1, 2]):
        base = dict(decide=dec, answer=ans, demos=demos)
        for stop, prune, fb in itertools.product(["check", "rank", "path"], ["llm", "bm25"], ["io", "cot"]):
            out.append(("tog", dict(base, stop=stop, prune=prune, fallback=fb, width=2, depth=3)))
            if prune == "llm":
                out.append(("fasttog", dict(base, stop=stop, fallback=fb, width=2, d_max=3, max_size=2)))
        for strat, ev in [("cot", "select"), ("tot", "select"), ("tot", "score"), ("got", "select"),
                          ("got", "score")]:
            st = dict(base, strategy=strat, evaluator=ev, branching=2, breadth=2 if strat != "cot" else 1)
            out.append(("agent", dict(st, max_steps=4)))
            for prune in ["llm", "embedding"]:
                out.append(("explore", dict(st, prune=prune, max_steps=2, max_relations=1, max_neighbours=2)))
    out.append(("fasttog", dict(text="graph2text", graph2text="llm", width=2, d_max=2)))
    out.append(("fasttog", dict(text="graph2text", graph2text="llm", width=2, d_max=2, decide="score", answer="rank")))
    out.append(("tog", dict(width=1, depth=2, margin=1.0, answer="rank")))
    return out


def run(dest: str, reasoners: tuple[str, ...] = (), salts: int = 2, kgs_only: tuple[str, ...] = ()) -> int:
    """Write every case (of ``reasoners``, on the KGs ``kgs_only``; all when empty) to ``dest``; the count."""
    tmp = Path(tempfile.mkdtemp())
    kgs = {}
    for name, edges in (("golden", GOLDEN), ("movies", MOVIES)):
        write_duckdb(tmp / f"{name}.duckdb", tiny_tables(edges))
        kgs[name] = KGStore(tmp / f"{name}.duckdb")
    plan = tmp / "relplan"
    PlanModel(model="fake-encoder", texts=PLAN_TEXTS, hops=np.asarray([len(x) for x in PLAN_LABELS]),
              labels=PLAN_LABELS, vectors=np.eye(len(PLAN_TEXTS), dtype=np.float32)).save(plan)
    questions = [("golden", "who directed the films [Actor P] starred in", "Actor P", 1),
                 ("golden", "where was [Dir X] born", "Dir X", 0),
                 ("movies", "who directed the films [Al Pacino] starred in", "Al Pacino", 1),
                 ("movies", "when was [Top Gun] released", "Top Gun", 2),
                 ("golden", "what is the capital of nowhere", None, 2)]
    n = skipped = 0
    with open(dest, "w") as f:
        for (reasoner, params), (kgname, text, topic, row), salt in itertools.product(grid(), questions,
                                                                                      range(salts)):
            if (reasoners and reasoner not in reasoners) or (kgs_only and kgname not in kgs_only):
                continue
            entry = REASONERS.get(reasoner)
            try:
                p = entry.params(**{**params, **({"plan": str(plan)} if params.get("demos") else {})})
            except ValueError:
                skipped += 1
                continue
            kg = kgs[kgname]
            few = bool(h(salt, text) % 2)
            q = Question(f"q{row}", text, tuple(kg.ids_of([topic])) if topic else ())
            job = entry.impl(inp=ReasonInput(question=q, context="", kg=kg, index=Index(row),
                                             sampling=Sampling(few_shot=few, seed=salt)), params=p)
            backend = Scripted(salt)
            ((res, calls),) = run_batched(jobs=[job], client=LLMClient(backend, cache=None))
            case = {"reasoner": reasoner, "params": params, "kg": kgname, "q": text, "salt": salt,
                    "requests": backend.seen, "calls": [c.key for c in calls],
                    "answer": [res.answer, res.depth, res.fallback, res.unparseable, list(res.answers or ())],
                    "trace": json.dumps(res.trace, default=repr)}
            f.write(json.dumps(case) + "\n")
            n += 1
    print(f"{kgrag.__file__}: {n} cases written, {skipped} invalid combinations skipped", file=sys.stderr)
    return n


def compare(old: str, new: str) -> tuple[int, int, dict[str, int]]:
    """(cases compared, identical, per field how many differ) of two runs' files."""
    a = [json.loads(x) for x in open(old)]
    b = [json.loads(x) for x in open(new)]
    if len(a) != len(b):
        raise SystemExit(f"{len(a)} cases against {len(b)}: not the same grid")
    diff = {"requests": 0, "calls": 0, "answer": 0, "trace": 0}
    same = 0
    for x, y in zip(a, b):
        d = [k for k in diff if x[k] != y[k]]
        for k in d:
            diff[k] += 1
        same += not d
        if d and len(a) - same <= 3:
            print("differs:", d, x["reasoner"], x["params"], x["q"], "salt", x["salt"])
    return len(a), same, diff


if __name__ == "__main__":
    if sys.argv[1:2] == ["compare"]:
        n, same, diff = compare(sys.argv[2], sys.argv[3])
        print(f"{n} cases compared, {same} identical (requests, calls, traces, answers); differing: {diff}")
        sys.exit(0 if same == n else 1)
    run(sys.argv[2])
