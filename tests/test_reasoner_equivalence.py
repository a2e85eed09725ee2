"""The old-versus-new harness of the graph reasoners (tests/reasoner_equivalence.py) is only worth its word if two
runs of one checkout agree and every reasoner has cases: checked here on the five-edge KG, one salt."""

from __future__ import annotations

import json

from tests import reasoner_equivalence as eq


def test_two_runs_of_one_checkout_are_identical(tmp_path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    n = eq.run(str(a), salts=1, kgs_only=("golden",))
    assert eq.run(str(b), salts=1, kgs_only=("golden",)) == n
    assert eq.compare(str(a), str(b)) == (n, n, {"requests": 0, "calls": 0, "answer": 0, "trace": 0})
    rows = [json.loads(x) for x in a.read_text().splitlines()]
    assert {r["reasoner"] for r in rows} == {"tog", "fasttog", "agent", "explore"}
    # the scripted replies reach both kinds of decision: scored (continuations) and generated
    reqs = [q for r in rows for q in r["requests"]]
    assert any("continuations=()" in q for q in reqs) and any("continuations=('" in q for q in reqs)
