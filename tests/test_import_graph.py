"""The import graph of ``kgrag``: no circles between its modules, and imports point down the layers only.

Read from the source with ``ast`` (function-level imports count: a circle hidden in a function is still a
circle). Each module of ``kgrag`` is given a layer below; a new module must be placed in one, so the test fails
until it is. A lower layer never imports a higher one: storage knows nothing of retrieval, retrieval nothing
of evaluation, and so on up to the apps. Circles are looked for twice: between the rooms of the layers
(:func:`group_of`) and between single modules, so that two files of one package (the loaders, say) cannot
import each other either. Layers are whole folders or top-level modules: no package is split across layers
(G-Retriever's sits on top, its LLM backend with it).
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import ROOT

#: layer of each package or top-level module (longest prefix wins), lowest first: kgrag's folders are its layers
LAYERS: dict[str, int] = {}
for _layer, _names in enumerate([
    # 0 foundation: columns, value types, files, the params framework (config/), the registries; the project's
    #   code as data (code/)
    ["schema", "types", "io", "env", "catalogue", "registry", "config", "timings", "ranking", "arrays", "code"],
    # 1 kg/: tables, stores behind KGView, loaders, validation, linking, synthetic KGs
    ["kg"],
    # 2 index/: embeddings, relation-path plans
    ["index"],
    # 3 llm/: calls and cache, clients, backends, prompts, textualizers, constraints; task runners
    ["llm", "task_runners"],
    # 4 retrieval/: retrievers, the LEGO chain, the shared scorers, scorer fine-tuning, the retrieve run
    ["retrieval"],
    # 5 reasoning/: reasoners, community detectors, the answering run
    ["reasoning"],
    # 6 evaluation/
    ["evaluation"],
    # 7 reporting/
    ["reporting"],
    # 8 the experiment assembly and the apps (apps/, cli); G-Retriever (gretriever/: its own pipeline, model,
    #   training, runs and its LLM backend, built on llm/, retrieval/ and evaluation/; reached from below only by
    #   name, through the backend registry)
    #   the tuned scorer (tune/: rows from an Experiment's retriever, LoRA training, the merged GGUF)
    #   the whole params.yaml (params: every package's section assembled)
    ["experiment", "apps", "cli", "gretriever", "tune", "params"],
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
    """The room of a layer: a module or sub-package of a layer's package (``llm.backends``, ``llm.prompts``,
    ``kg.loaders``, ``gretriever.data``) or a top-level module."""
    parts = mod.split(".")
    for i in range(len(parts), 0, -1):
        key = ".".join(parts[:i])
        if key in LAYERS:
            return key if (ROOT / "kgrag" / f"{key}.py").exists() or i == len(parts) else ".".join(parts[: i + 1])
    return parts[0]


def circles(graph: dict[str, set[str]], group=group_of) -> list[list[str]]:
    """Strongly connected groups of more than one unit, the units being ``group(module)``: the rooms of
    :func:`group_of` by default (files of one room importing each other are not counted there), single modules
    with ``group=str``."""
    top = {}
    for a, bs in graph.items():
        ga = group(a)
        for b in bs:
            gb = group(b)
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


def test_no_import_circles_between_the_rooms():
    found = circles(import_graph())
    assert len(found) == 0, found


def test_no_import_circles_between_kgrag_modules_at_all():
    """Not even between two files of one package (the loaders, G-Retriever's modules): a circle hidden in a
    function-level import counts too."""
    found = circles(import_graph(), group=str)
    assert len(found) == 0, found


def test_no_package_is_split_across_layers():
    """Every layer is made of whole folders or top-level modules, so a folder's place is one line of LAYERS."""
    assert [k for k in LAYERS if "." in k] == []


def test_gretriever_is_one_package_on_top_that_nothing_below_imports():
    """G-Retriever's modules share one layer, above the llm, retrieval and evaluation layers it imports; no
    module outside the package imports it (the generate stage reaches its backend by name, through the backend
    registry and ``kgrag.catalogue``)."""
    from kgrag.catalogue import BUILTINS

    graph = import_graph()
    mine = {m for m in graph if m == "gretriever" or m.startswith("gretriever.")}
    assert {layer_of(m) for m in mine} == {LAYERS["gretriever"]}
    below = {b for m in mine for b in graph[m] if b not in mine}
    assert {"llm.prompts", "llm.textualize", "retrieval.run", "evaluation.evaluate"} <= below
    assert all(layer_of(b) <= LAYERS["gretriever"] for b in below)
    importers = sorted(a for a, bs in graph.items() if a not in mine and bs & mine)
    assert importers == []
    assert BUILTINS["backend"]["gretriever"] == "kgrag.gretriever.backend"


def upward(graph: dict[str, set[str]]) -> list[str]:
    """Every import from a module to one of a higher layer."""
    return sorted(f"kgrag.{a} (layer {layer_of(a)}) imports kgrag.{b} (layer {layer_of(b)})"
                  for a, bs in graph.items() if a for b in bs
                  if layer_of(a) is not None and layer_of(b) is not None and layer_of(b) > layer_of(a))


def test_imports_point_down_the_layers():
    found = upward(import_graph())
    assert len(found) == 0, found


def test_the_checks_see_a_planted_circle_and_an_upward_import():
    """The checks can fail: a circle and an upward import planted in a copy of the graph are both found."""
    graph = {k: set(v) for k, v in import_graph().items()}
    graph["schema"].add("evaluation.evaluate")  # foundation -> evaluation: upward; evaluate imports schema
    assert any({"evaluation.evaluate", "schema"} <= set(c) for c in circles(graph))
    assert upward(graph) == ["kgrag.schema (layer 0) imports kgrag.evaluation.evaluate (layer 6)"]
    # a circle inside one package: not one between rooms, but one between modules
    graph = {k: set(v) for k, v in import_graph().items()}
    graph["kg.loaders.triples_arrow"].add("kg.loaders.triples")  # the circle there was: triples imports triples_arrow
    assert circles(graph) == []
    assert circles(graph, group=str) == [["kg.loaders.triples", "kg.loaders.triples_arrow"]]
    # G-Retriever imported from the llm layer: upward
    graph["llm.backends.openai"].add("gretriever.backend")
    assert upward(graph) == ["kgrag.llm.backends.openai (layer 3) imports kgrag.gretriever.backend (layer 8)"]


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
