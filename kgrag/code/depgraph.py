"""The project's import graph, read from the source (no code is run): what a stage really reads.

DVC re-runs a stage when one of its ``deps`` changes, so a stage's deps must cover every project file its code
can run. This module computes that set for a stage command (``python -m stages.retrieve``):

1. the static import closure of the entry module over the project's own packages (``kgrag``, ``stages``,
   ``flows``): every ``import`` / ``from … import`` anywhere in a file, in functions too, plus the
   ``__init__.py`` of each package on the way;
2. the modules looked up by name: a file that uses a registry (``RETRIEVERS.get(...)``, any use but an import
   or ``@RETRIEVERS.register``) can run every built-in module of that kind (``kgrag.catalogue``); they join the
   closure, with their own closures, until nothing is added. The kinds are read from the code
   (``used_kinds``), not declared by hand.

The params files (``kgrag/params.py``, the framework ``kgrag/config/`` and each package's ``params.py``) touch
registries without running a module: they validate the sub-sections of params.yaml against the modules' params
models, which cannot change a stage's output beyond the params themselves, so their uses count for no kind (nor
do the registry itself, this module and the CLI's listing: ``VALIDATION_ONLY``). A test (``tests/test_deps.py``)
checks that every stage's deps in ``dvc.yaml`` cover its closure.

``kgrag deps`` prints the deps each stage needs; ``kgrag deps --write`` rewrites the code entries of the
``deps`` lists in the dvc.yaml files (data deps and comments are kept).
"""

from __future__ import annotations

import ast
import re
import threading
import time
from functools import lru_cache
from pathlib import Path

from kgrag.catalogue import BUILTINS

PACKAGES = ("kgrag", "stages", "flows")
#: registry constants (as named in kgrag.registry and re-exported) -> kind
REGISTRY_NAMES = {
    "LOADERS": "loader", "RETRIEVERS": "retriever", "TEXTUALIZERS": "textualizer", "BACKENDS": "backend",
    "REASONERS": "reasoner", "DETECTORS": "community_detector", "EXTRACTORS": "lego_extractor",
    "FILTERS": "lego_filter", "REFINERS": "lego_refiner", "SCORERS": "lego_scorer",
    "TASK_RUNNERS": "task_runner", "GRAPH_ENCODERS": "graph_encoder", "METRICS": "metric",
    "TRACE_VIEWS": "trace_view",
}
#: files that may name registries without declaring kinds (see the module docstring)
VALIDATION_ONLY = {"kgrag/params.py", "kgrag/registry.py", "kgrag/code/depgraph.py", "kgrag/cli.py",
                   "kgrag/config/base.py", "kgrag/config/load.py", "kgrag/config/yaml_doc.py",
                   *(f"kgrag/{pkg}/params.py" for pkg in ("kg", "index", "retrieval", "tune", "reasoning", "evaluation",
                                                          "reporting", "task_runners", "gretriever"))}


def module_file(root: Path, name: str) -> str | None:
    """Repo-relative path of project module ``name`` (a package's ``__init__.py``), or None if not ours."""
    if name.split(".")[0] not in PACKAGES:
        return None
    base = root.joinpath(*name.split("."))
    for cand in (base.with_suffix(".py"), base / "__init__.py"):
        if cand.is_file():
            return cand.relative_to(root).as_posix()
    return None


def _parents(root: Path, name: str) -> list[str]:
    """The ``__init__.py`` files Python runs before importing ``name``."""
    parts = name.split(".")
    out = []
    for i in range(1, len(parts)):
        f = module_file(root, ".".join(parts[:i]))
        if f and f.endswith("__init__.py"):
            out.append(f)
    return out


_AST_LOCK = threading.Lock()


@lru_cache(maxsize=None)
def _parse_text(text: str, filename: str) -> ast.Module:
    # CPython 3.11.7's ast keeps its recursion-depth counter per interpreter, not per thread (gh-106905):
    # ast.parse racing another thread's (Prefect's workers inspect source too) raises "SystemError: AST
    # constructor recursion depth mismatch" (seen once in a `dvc repro` retrieve stage). Parse under a lock,
    # and retry (up to 3 attempts) when another library's thread raced us anyway.
    for attempt in range(3):
        try:
            with _AST_LOCK:
                return ast.parse(text, filename=filename)
        except SystemError:
            if attempt == 2:
                raise
            time.sleep(0.05)
    raise AssertionError("unreachable")


def _module_name(rel: str) -> str:
    p = rel.removesuffix(".py").removesuffix("/__init__")
    return p.replace("/", ".")


#: folder of each file's parsed facts (``_facts``), keyed by its path and bytes and by this module's own source; unset:
#: ``$XDG_CACHE_HOME/kgrag/depgraph`` (``~/.cache``). Every flow stage process hashes its closure for its cache keys
#: (``kgrag.code.versioning.closure_version``): parsing ~150 files took 1.0-1.1 s a process, reading their facts
#: a few ms.
CACHE_ENV = "KGRAG_DEPGRAPH_CACHE"
_FACTS: dict[tuple[str, str], tuple[frozenset[str], frozenset[str]]] = {}


def _cache_dir() -> Path:
    import os

    folder = os.environ.get(CACHE_ENV)
    if folder:
        return Path(folder)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kgrag" / "depgraph"


@lru_cache(maxsize=1)
def _own_source() -> bytes:
    return Path(__file__).read_bytes()


def _facts(root: Path, rel: str) -> tuple[frozenset[str], frozenset[str]]:
    """(the module names file ``rel`` imports, the kinds it looks up): parsed once per file content, then read
    from the disk cache (JSON; an unwritable cache folder only means parsing again)."""
    import hashlib
    import json
    import os

    data = (root / rel).read_bytes()
    key = hashlib.sha256(_own_source() + b"\0" + rel.encode() + b"\0" + data).hexdigest()[:32]
    hit = _FACTS.get((rel, key))
    if hit is not None:
        return hit
    path = _cache_dir() / f"{key}.json"
    try:
        raw = json.loads(path.read_text())
        facts = (frozenset(raw["imports"]), frozenset(raw["kinds"]))
    except (OSError, ValueError, KeyError, TypeError):
        tree = _parse_text(data.decode("utf-8"), str(root / rel))
        facts = (frozenset(_imported_names(tree, rel)), frozenset(_kinds(tree, rel)))
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f"{path.stem}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps({"file": rel, "imports": sorted(facts[0]), "kinds": sorted(facts[1])}))
            os.replace(tmp, path)  # a parallel reader sees the whole file or none
        except OSError:
            pass
    _FACTS[(rel, key)] = facts
    return facts


def direct_imports(root: Path, rel: str) -> set[str]:
    """Project files that file ``rel`` imports directly (with their packages' ``__init__.py``)."""
    names, _ = _facts(Path(root), rel)
    out: set[str] = set()
    for n in names:
        f = module_file(root, n)
        if f:
            out.add(f)
            out.update(_parents(root, n))
    out.discard(rel)
    return out


def _imported_names(tree: ast.Module, rel: str) -> set[str]:
    """The module names (and ``module.name`` of a ``from`` import) the parsed file ``rel`` imports anywhere."""
    here = _module_name(rel)
    pkg = here if rel.endswith("__init__.py") else here.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")
                base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
                mod = ".".join([*base, node.module] if node.module else base)
            else:
                mod = node.module or ""
            names.add(mod)
            names.update(f"{mod}.{a.name}" for a in node.names)  # `from pkg import submodule`
    return names


def used_kinds(root: Path, rel: str) -> set[str]:
    """Kinds whose modules a file looks up, derived from its code: the registry names (``RETRIEVERS``, ...) it
    uses other than in imports and ``.register`` (none for the validation-only files, see the module
    docstring)."""
    return set(_facts(Path(root), rel)[1])


def _kinds(tree: ast.Module, rel: str) -> set[str]:
    if rel in VALIDATION_ONLY:
        return set()
    registering = {id(n.value) for n in ast.walk(tree)
                   if isinstance(n, ast.Attribute) and n.attr == "register" and isinstance(n.value, ast.Name)}
    return {REGISTRY_NAMES[n.id] for n in ast.walk(tree)
            if isinstance(n, ast.Name) and n.id in REGISTRY_NAMES and id(n) not in registering}


def closure(root: Path, entry: str) -> set[str]:
    """Every project file module ``entry`` (``stages.retrieve``) can run: static imports plus the built-in
    modules of every kind declared on the way, to a fixed point."""
    root = Path(root)
    first = module_file(root, entry)
    if first is None:
        raise ValueError(f"{entry}: not a module of this project ({', '.join(PACKAGES)})")
    seen: set[str] = set()
    todo = [first, *_parents(root, entry)]
    while todo:
        f = todo.pop()
        if f in seen:
            continue
        seen.add(f)
        todo.extend(direct_imports(root, f) - seen)
        for kind in sorted(used_kinds(root, f)):
            for mod in BUILTINS[kind].values():
                m = module_file(root, mod)
                if m and m not in seen:
                    todo.extend([m, *_parents(root, mod)])
    return seen


def compress(root: Path, files: set[str]) -> list[str]:
    """Fewest dvc deps covering ``files``: a package folder when every .py file below it is in the set."""
    root = Path(root)
    out: set[str] = set(files)
    dirs = sorted({str(Path(f).parent) for f in files}, key=lambda d: d.count("/"))
    for d in dirs:
        if d in PACKAGES or d == ".":  # never a whole top-level package
            continue
        below = {p.relative_to(root).as_posix() for p in (root / d).rglob("*.py")}
        if below and below <= files:
            out = {f for f in out if not f.startswith(d + "/")} | {d}
    return sorted(out, key=lambda p: (p.split("/")[0] != "stages", p.split("/")[0] != "flows", p))


def covered(path: str, deps: list[str]) -> bool:
    """Whether a dvc dep list covers ``path`` (the file itself or a folder above it)."""
    return any(path == d.rstrip("/") or path.startswith(d.rstrip("/") + "/") for d in deps)


_CMD = re.compile(r"python\s+-m\s+([\w.]+)")


def stage_entries(dvc_yaml: Path) -> dict[str, str]:
    """Stage name -> entry module of its ``cmd`` (``python -m stages.x``), for every stage (matrix stages by
    their base name)."""
    import yaml

    doc = yaml.safe_load(Path(dvc_yaml).read_text()) or {}
    out = {}
    for name, st in (doc.get("stages") or {}).items():
        cmd = st.get("cmd", "")
        cmd = " ".join(cmd) if isinstance(cmd, list) else cmd
        m = _CMD.search(cmd)
        if m:
            out[name] = m.group(1)
    return out


def stage_deps(dvc_yaml: Path) -> dict[str, list[str]]:
    """Stage name -> its deps as written (templated ones as text)."""
    import yaml

    doc = yaml.safe_load(Path(dvc_yaml).read_text()) or {}
    return {name: [str(d) for d in (st.get("deps") or [])] for name, st in (doc.get("stages") or {}).items()}


def _code(dep: str) -> bool:
    return dep.split("/")[0] in PACKAGES


def check(root: Path, dvc_yaml: Path) -> dict[str, list[str]]:
    """Stage -> project files its code can run that its deps do not cover (empty lists: all covered)."""
    root = Path(root)
    deps = stage_deps(dvc_yaml)
    wdir = _wdir(dvc_yaml)
    out = {}
    for name, entry in stage_entries(dvc_yaml).items():
        have = [_norm(root, wdir, d) for d in deps.get(name, [])]
        out[name] = sorted(f for f in closure(root, entry) if not covered(f, have))
    return out


def _wdir(dvc_yaml: Path) -> Path:
    """The folder a dvc.yaml's stages run in (its own folder, or its stages' common ``wdir``)."""
    import yaml

    doc = yaml.safe_load(Path(dvc_yaml).read_text()) or {}
    wdirs = {st.get("wdir", ".") for st in (doc.get("stages") or {}).values()}
    return (Path(dvc_yaml).parent / (wdirs.pop() if len(wdirs) == 1 else ".")).resolve()


def _norm(root: Path, wdir: Path, dep: str) -> str:
    """A dep path as written in a dvc.yaml (relative to its folder, or to ``wdir: ..``) made repo-relative."""
    p = (wdir / dep).resolve()
    try:
        return p.relative_to(root.resolve()).as_posix()
    except ValueError:
        return dep


def write(root: Path, dvc_yaml: Path, *, wdir: Path | None = None) -> list[str]:
    """Rewrite the code entries (``kgrag/``, ``stages/``, ``flows/``) of every stage's deps in ``dvc_yaml`` from
    its closure; other entries and comments stay. Returns the stages whose deps changed."""
    root = Path(root)
    dvc_yaml = Path(dvc_yaml)
    prefix = "" if wdir is None else wdir.as_posix().rstrip("/") + "/"
    entries = stage_entries(dvc_yaml)
    lines = dvc_yaml.read_text().splitlines()
    out: list[str] = []
    changed = []
    i = 0
    stage = None
    while i < len(lines):
        line = lines[i]
        m = re.match(r"^  ([\w@-]+):\s*$", line)
        if m:
            stage = m.group(1)
        if stage in entries and re.match(r"^    deps:\s*$", line):
            out.append(line)
            i += 1
            block = []
            while i < len(lines) and re.match(r"^      (- |#)", lines[i]):
                block.append(lines[i])
                i += 1
            old = [b for b in block
                   if re.match(r"^      - ", b) and _code(b.strip()[2:].split("#")[0].strip().removeprefix(prefix))]
            rest = [b for b in block if b not in old]
            new = [f"      - {prefix}{d}" for d in compress(root, closure(root, entries[stage]))]
            if [o.split("#")[0].rstrip() for o in old] != new:
                changed.append(stage)
            out.extend(new + rest)
            continue
        out.append(line)
        i += 1
    dvc_yaml.write_text("\n".join(out) + "\n")
    return changed
