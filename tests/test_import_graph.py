"""The import graph of ``kgrag``: no circles between its modules, and imports point down the layers only.

Read from the source with ``ast`` (function-level imports count: a circle hidden in a function is still a
circle). Each module of ``kgrag`` is given a layer below; a new module must be placed in one, so the test fails
until it is. A lower layer never imports a higher one: storage knows nothing of retrieval, retrieval nothing
of evaluation, and so on up to the apps.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import ROOT

#: layer of each module or package (longest prefix wins), lowest first
LAYERS: dict[str, int] = {}
for _layer, _names in enumerate([
    # 0 foundation: columns, value types, files, config, the registries and code versions
    ["schema", "types", "io", "env", "catalogue", "registry", "params", "depgraph", "versioning", "timings",
     "ranking"],
    # 1 the KG: tables, stores, views, loaders, validation, synthetic KGs
    ["duckdb_io", "store_duckdb", "kgview", "store", "loaders", "validate", "synth", "linking"],
    # 2 the index: embeddings, relation plans
    ["embed", "relplan"],
    # 3 the LLM: calls and cache, clients, backends, prompts, textualizers, constraints; the G-Retriever model
    ["llm", "clients", "backends", "generate", "textualize", "constrain", "task_runners", "gretriever.convert",
     "gretriever.data", "gretriever.encoders", "gretriever.model", "gretriever.train", "gretriever.presets"],
    # 4 retrieval: the LEGO modules and scorers, retrievers, the retrieve runner, scorer fine-tuning
    ["lego", "retrievers", "runner", "finetune"],
    # 5 reasoning: community detectors, reasoners, answering
    ["community", "reasoners", "answering"],
    # 6 evaluation
    ["evaluate", "metrics"],
    # 7 reporting
    ["report", "report_html", "compare"],
    # 8 apps and experiment runners
    ["experiment", "ask", "serve", "cli", "lego.table", "gretriever.datasets", "gretriever.report", "gretriever.run",
     "gretriever"],
]):
    for _n in _names:
        LAYERS[_n] = _layer


def _modules() -> dict[str, Path]:
    out = {}
    for p in (ROOT / "kgrag").rglob("*.py"):
        name = ".".join(p.relative_to(ROOT / "kgrag").with_suffix("").parts)
        out[name.removesuffix(".__init__") if name != "__init__" else ""] = p
    return out


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def import_graph() -> dict[str, set[str]]:
    """Module (dotted, without ``kgrag.``) -> the kgrag modules it imports, at any depth of its code."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for mod, path in modules.items():
        pkg = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:  # relative: from the package, up level - 1 packages
                    base = [x for x in pkg.split(".") if x]
                    base = base[: len(base) - node.level + 1]
                    stem = ".".join(["kgrag", *base, *([node.module] if node.module else [])])
                else:
                    stem = node.module or ""
                # `from kgrag.lego import spec` imports the module kgrag.lego.spec; `from kgrag.io import read` kgrag.io
                names = [f"{stem}.{a.name}" if f"{stem}.{a.name}".removeprefix("kgrag.") in modules else stem
                         for a in node.names]
            else:
                continue
            for n in names:
                if n == "kgrag" or n.startswith("kgrag."):
                    t = _resolve(n.removeprefix("kgrag").removeprefix("."), modules)
                    if t and t != mod:
                        targets.add(t)
        graph[mod] = targets
    return graph


def layer_of(mod: str) -> int | None:
    parts = mod.split(".")
    for i in range(len(parts), 0, -1):
        if ".".join(parts[:i]) in LAYERS:
            return LAYERS[".".join(parts[:i])]
    return None


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module, between packages or top-level modules (files of one
    package importing each other through the package's __init__ are not counted)."""
    top = {}
    for a, bs in graph.items():
        ga = a.split(".")[0]
        for b in bs:
            gb = b.split(".")[0]
            if ga and gb and ga != gb:
                top.setdefault(ga, set()).add(gb)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(top.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(top):
        if v not in index:
            visit(v)
    return out


def test_every_module_has_a_layer():
    missing = sorted(m for m in _modules() if m and layer_of(m) is None)
    assert not missing, f"place these modules in a layer of tests/test_import_graph.py LAYERS: {missing}"


def test_no_import_circles_between_kgrag_modules():
    assert circles(import_graph()) == []


def upward(graph: dict[str, set[str]]) -> list[str]:
    """Every import from a module to one of a higher layer."""
    return sorted(f"kgrag.{a} (layer {layer_of(a)}) imports kgrag.{b} (layer {layer_of(b)})"
                  for a, bs in graph.items() if a for b in bs
                  if layer_of(a) is not None and layer_of(b) is not None and layer_of(b) > layer_of(a))


def test_imports_point_down_the_layers():
    assert upward(import_graph()) == []


def test_the_checks_see_a_planted_circle_and_an_upward_import():
    """The checks can fail: a circle and an upward import planted in a copy of the graph are both found."""
    graph = {k: set(v) for k, v in import_graph().items()}
    graph["schema"].add("evaluate")  # foundation -> evaluation: upward, and evaluate already imports schema
    assert any({"evaluate", "schema"} <= set(c) for c in circles(graph))
    assert upward(graph) == ["kgrag.schema (layer 0) imports kgrag.evaluate (layer 6)"]
