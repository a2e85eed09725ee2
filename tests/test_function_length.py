"""No function in ``kgrag/`` is longer than a screen and a half (issue 56's target: 100 lines, docstring included):
a longer one is split by job before it lands, as the reasoners' main loops were."""

from __future__ import annotations

import ast

from tests.conftest import ROOT

LIMIT = 100


def test_no_function_in_kgrag_is_over_100_lines():
    long = []
    for path in sorted((ROOT / "kgrag").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > LIMIT:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({n} lines)")
    assert not long, "functions over 100 lines (split them by job): " + "; ".join(long)
