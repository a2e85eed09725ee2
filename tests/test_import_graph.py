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

#: layer of each package or top-level module (longest prefix wins), lowest first: kgrag's folders are its layers
LAYERS: dict[str, int] = {}
for _layer, _names in enumerate([
    # 0 foundation: columns, value types, files, config, the registries; the project's code as data (code/)
    ["schema", "types", "io", "env", "catalogue", "registry", "params", "timings", "ranking", "code"],
    # 1 kg/: tables, stores behind KGView, loaders, validation, linking, synthetic KGs
    ["kg"],
    # 2 index/: embeddings, relation-path plans
    ["index"],
    # 3 llm/: calls and cache, clients, backends, prompts, textualizers, constraints; task runners; the
    #   G-Retriever model (gretriever/ is its own pipeline, whose modules sit in the layers below)
    ["llm", "task_runners", "gretriever.convert", "gretriever.data", "gretriever.encoders", "gretriever.model",
     "gretriever.train", "gretriever.presets"],
    # 4 retrieval/: retrievers, the LEGO chain, the shared scorers, scorer fine-tuning, the retrieve run
    ["retrieval"],
    # 5 reasoning/: reasoners, community detectors, the answering run
    ["reasoning"],
    # 6 evaluation/
    ["evaluation"],
    # 7 reporting/
    ["reporting"],
    # 8 the experiment assembly and the apps (apps/, cli); G-Retriever's runners
    ["experiment", "apps", "cli", "gretriever.datasets", "gretriever.report", "gretriever.run", "gretriever"],
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
                # `from kgrag.retrieval.lego import spec` imports the module kgrag.retrieval.lego.spec; `from kgrag.io import read` kgrag.io
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


def group_of(mod: str) -> str:
    """The unit circles are counted between: a module or sub-package of a layer's package (``llm.backends``,
    ``llm.prompts``, ``kg.loaders``), a top-level module, or one of gretriever's modules (its own pipeline,
    spread over the layers)."""
    parts = mod.split(".")
    for i in range(len(parts), 0, -1):
        key = ".".join(parts[:i])
        if key in LAYERS:
            return key if key.startswith("gretriever") or (ROOT / "kgrag" / f"{key}.py").exists() or i == len(parts) \
                else ".".join(parts[: i + 1])
    return parts[0]


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module, between the groups of :func:`group_of` (files of one
    layer's package importing each other are not counted)."""
    top = {}
    for a, bs in graph.items():
        ga = group_of(a)
        for b in bs:
            gb = group_of(b)
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
    graph["schema"].add("evaluation.evaluate")  # foundation -> evaluation: upward; evaluate imports schema
    assert any({"evaluation.evaluate", "schema"} <= set(c) for c in circles(graph))
    assert upward(graph) == ["kgrag.schema (layer 0) imports kgrag.evaluation.evaluate (layer 6)"]


def test_the_top_level_holds_about_a_dozen_modules():
    """The folders show the layers: at kgrag's top level only the foundation, the experiment assembly and the
    CLI (issue 25: "at most about 12 modules"); everything else sits in its layer's package."""
    top = sorted(p.stem for p in (ROOT / "kgrag").glob("*.py") if p.stem != "__init__")
    assert len(top) <= 12, top
    assert all(LAYERS.get(m) in (0, 8) for m in top), [m for m in top if LAYERS.get(m) not in (0, 8)]


def test_an_old_flat_module_name_says_where_it_moved():
    """Code written against the flat layout gets the new place in its import error (kgrag.MOVED)."""
    import importlib

    import pytest

    with pytest.raises(ModuleNotFoundError) as e:
        importlib.import_module("kgrag.store")
    assert "kgrag.store moved to kgrag.kg.store" in str(e.value)
    with pytest.raises(ModuleNotFoundError) as e:
        importlib.import_module("kgrag.reasoners.tog")
    assert "kgrag.reasoners moved to kgrag.reasoning.reasoners" in str(e.value)  # the parent package first
    with pytest.raises(ModuleNotFoundError) as e:  # a name that never existed: Python's own error
        importlib.import_module("kgrag.no_such_module")
    assert "moved" not in str(e.value)
    import kgrag

    for old, new in kgrag.MOVED.items():  # every new place exists
        assert importlib.util.find_spec(f"kgrag.{new}") is not None, new
