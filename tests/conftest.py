"""Shared fixtures: paths to the real data, tiny KGs for unit tests."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import yaml

import pyarrow as pa
import pytest

from kgrag import schema as S
from kgrag.env import setup
from kgrag.kg.duckdb_io import write_duckdb
from kgrag.kg.store import KGStore

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("KGRAG_SHARED", ROOT.parent / "shared"))
METAQA = SHARED / "data" / "metaqa"
E2E_SAMPLE = 12

# Tests get their own Prefect home and result store, so a `dvc repro` running in the repo meanwhile
# (which uses .kgrag_cache/) shares no Prefect database with them. Each parallel worker (pytest-xdist, `make test`)
# gets its own too (it inherits the controller's environment, so it sets them, not setdefault): each starts its own
# Prefect server, and two servers must not write one SQLite database.
_PREFECT = Path(tempfile.mkdtemp(prefix="kgrag-test-prefect-"))
_set = os.environ.__setitem__ if os.environ.get("PYTEST_XDIST_WORKER") else os.environ.setdefault
_set("PREFECT_HOME", str(_PREFECT / "home"))
_set("PREFECT_LOCAL_STORAGE_PATH", str(_PREFECT / "results"))
# One embedding cache for the session (kgrag.index.embed.encode): the 43k MetaQA names are encoded once, not once per
# project copy (e2e index stage, agent / explore fixtures, cluster run); stage subprocesses inherit it, and so do
# parallel workers (the controller sets it first): both caches write a temp file and rename it whole.
os.environ.setdefault("KGRAG_EMBED_CACHE", str(_PREFECT / "embeddings"))
# and one vector cache (kgrag.index.entity_vectors: a lazy index's entity names, encoded when first read), so the
# suite neither reads nor writes the user's ~/.cache/kgrag/vectors
os.environ.setdefault("KGRAG_VECTOR_CACHE", str(_PREFECT / "vectors"))
# and one folder of parsed import facts (kgrag.code.depgraph: the closure every flow stage hashes), not the user's
os.environ.setdefault("KGRAG_DEPGRAPH_CACHE", str(_PREFECT / "depgraph"))
# and one folder of converted GGUF weights (kgrag.llm.backends.llamacpp.converted_gguf), not one per project copy
os.environ.setdefault("KGRAG_MODEL_CACHE", str(_PREFECT / "models"))
setup(ROOT)

#: fixtures that build or change a real project (a `dvc repro` or more): a test that uses one is an e2e test,
#: whatever its file says, so `make test-fast` (``-m "not e2e"``) runs no pipeline
E2E_FIXTURES = frozenset({"e2e_project", "e2e_first_run", "shared_project"})


#: the test files that use the session's MetaQA project (E2E_FIXTURES, or test_lego_e2e through getfixturevalue):
#: parallel workers run them as one unit, so the project is built once (tests/test_setup.py checks the list)
E2E_PROJECT_FILES = frozenset({"test_e2e.py", "test_lego_e2e.py", "test_reliability.py", "test_report_browser.py",
                               "test_scheduled.py", "test_streaming.py"})
_WORKER = bool(os.environ.get("PYTEST_XDIST_WORKER"))


@pytest.hookimpl(tryfirst=True)  # before pytest's own -m selection reads the marks
def pytest_collection_modifyitems(config, items):
    """The e2e mark from the fixtures. In a parallel worker, the MetaQA project's files first (a stable sort, the
    same in every worker), so that the longest unit of work starts first."""
    for item in items:
        if E2E_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.e2e)
    if _WORKER:
        items.sort(key=lambda i: i.path.name not in E2E_PROJECT_FILES)


def pytest_xdist_make_scheduler(config, log):
    """Parallel workers (`make test`): one unit of work a test file, and one for all of E2E_PROJECT_FILES, handed
    out in collection order. (xdist's own ``--dist loadgroup`` marks do nothing under pytest 9.2: it rewrites
    ``item._nodeid``, which pytest no longer reads.)"""
    from xdist.scheduler import LoadScopeScheduling

    class ByProjectScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return "e2e-metaqa-project" if Path(path).name in E2E_PROJECT_FILES else path

    config.option.loadscopereorder = False  # collection order: the project's unit first
    return ByProjectScheduling(config, log)


_API = []


def pytest_configure(config):
    """One Prefect API for the whole session (Prefect's own temporary server, on the session's Prefect home):
    every stage and `dvc repro` subprocess a test starts reports to it through ``PREFECT_API_URL`` instead of
    starting a temporary server of its own (12-23 s each on 2 loaded cores; docs/testing.md). A configured
    ``PREFECT_API_URL`` is kept. Tests that need a server of their own (test_scheduled) set theirs."""
    if os.environ.get("PREFECT_API_URL") or config.getoption("collectonly", False):
        return
    if config.getoption("numprocesses", None) and not hasattr(config, "workerinput"):
        return  # xdist's controller runs no test: each worker starts its own
    from prefect.server.api.server import SubprocessASGIServer
    from prefect.settings import PREFECT_API_URL, temporary_settings

    server = SubprocessASGIServer()
    server.start(timeout=int(os.environ["PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"]))
    os.environ["PREFECT_API_URL"] = server.api_url  # subprocesses
    settings = temporary_settings(updates={PREFECT_API_URL: server.api_url})  # this process (settings read at import)
    settings.__enter__()
    _API.append((server, settings))


def pytest_unconfigure(config):
    for server, settings in _API:
        settings.__exit__(None, None, None)
        server.stop()


def tiny_tables(edges: list[tuple[str, str, str]], questions: list[dict] | None = None) -> dict[str, pa.Table]:
    """Tables of a small named KG."""
    names = sorted({h for h, _, _ in edges} | {t for _, _, t in edges})
    rels = sorted({r for _, r, _ in edges})
    eid = {n: i for i, n in enumerate(names)}
    rid = {n: i for i, n in enumerate(rels)}
    q = questions or []
    return {
        "entities": pa.table({S.ENTITY_ID: list(range(len(names))), S.NAME: names}, schema=S.ENTITIES),
        "relations": pa.table({S.RELATION_ID: list(range(len(rels))), S.NAME: rels}, schema=S.RELATIONS),
        "triples": pa.table(
            {S.HEAD: [eid[h] for h, _, _ in edges], S.RELATION: [rid[r] for _, r, _ in edges],
             S.TAIL: [eid[t] for _, _, t in edges]},
            schema=S.TRIPLES,
        ),
        "questions": pa.Table.from_pylist(q, schema=S.QUESTIONS),
    }


MOVIES = [
    ("Heat", "directed_by", "Michael Mann"),
    ("Heat", "starred_actors", "Al Pacino"),
    ("Heat", "starred_actors", "Robert De Niro"),
    ("Collateral", "directed_by", "Michael Mann"),
    ("Collateral", "starred_actors", "Tom Cruise"),
    ("The Irishman", "directed_by", "Martin Scorsese"),
    ("The Irishman", "starred_actors", "Robert De Niro"),
    ("The Irishman", "starred_actors", "Al Pacino"),
    ("Top Gun", "starred_actors", "Tom Cruise"),
    ("Top Gun", "release_year", "1986"),
    ("Island A", "has_tags", "Island B"),  # a component not connected to the rest
]


@pytest.fixture
def movies_db(tmp_path: Path) -> Path:
    """A DuckDB file of the tiny movie KG."""
    path = tmp_path / "kg.duckdb"
    write_duckdb(path, tiny_tables(MOVIES))
    return path


@pytest.fixture
def movies(movies_db: Path) -> KGStore:
    """The tiny movie KG as a store."""
    return KGStore(movies_db)


IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def need(ok: bool, what: str) -> None:
    """Skip the test for a missing prerequisite ``what``, or, in CI (``CI=true``), fail it: CI has the shared
    data beside the clone and the Makefile installs chromium, so a missing one there is a broken set-up, not a
    reason to pass silently."""
    if ok:
        return
    if IN_CI:
        pytest.fail(f"{what} (CI=true: a missing prerequisite is an error, not a skip)", pytrace=False)
    pytest.skip(what)


def metaqa_sample_store(folder: Path, *, sample: int = 2, seed: int = 0):
    """(KGStore of the real MetaQA KB, its first ``sample`` seeded 2-hop test questions) written under ``folder``,
    with the questions also as ``questions.parquet`` (the validate stage's: what the held-out leak guards read)."""
    from kgrag.kg.loaders.metaqa import load_metaqa
    from kgrag.kg.store import questions_from_table

    need((METAQA / "kb.txt").exists(), f"real MetaQA data not found at {METAQA}")
    t = load_metaqa(path=str(METAQA), hops=2, split="test", sample=sample, seed=seed)
    path = Path(folder) / "kg.duckdb"
    write_duckdb(path, {"entities": t.entities, "relations": t.relations, "triples": t.triples,
                        "questions": t.questions})
    import pyarrow.parquet as pq

    pq.write_table(t.questions, Path(folder) / "questions.parquet")
    return KGStore(path), questions_from_table(t.questions)


def run(cmd: list[str], cwd: Path) -> str:
    """Run a command in ``cwd`` with the venv on PATH; fail the test with its output tail if it fails."""
    # The project's own Prefect home and result store, not the test process's.
    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_HOME", "PREFECT_LOCAL_STORAGE_PATH")}
    env["PATH"] = f"{Path(os.sys.executable).parent}:{os.environ['PATH']}"
    p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=1500)
    out = p.stdout + p.stderr
    assert p.returncode == 0, f"{' '.join(cmd)} failed:\n{out[-4000:]}"
    return out


def copy_repo(dst: Path, *, sample: int, shard_size: int) -> Path:
    """A copy of the repository's files (no outputs) whose params read ``sample`` real MetaQA questions
    in shards of ``shard_size``, with short answers."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.split()
    for f in files:
        src = ROOT / f
        if src.is_file() and not f.startswith(("reports/", "data/")):
            (dst / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst / f)
    params = yaml.safe_load((dst / "params.yaml").read_text())
    params["data"]["sample"] = sample
    params["data"]["path"] = str(METAQA)
    params["data"]["input"] = str(METAQA)  # what the ingest stage's DVC dependency tracks
    params["generate"]["max_tokens"] = 24
    params["generate"]["shard_size"] = shard_size
    params["retrieve"]["shard_size"] = shard_size
    params["finetune"]["questions"] = 40
    params["relplan"]["questions"] = 40
    (dst / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    return dst


def metaqa_entity_vectors(names: list[str], model: str = "all-MiniLM-L6-v2"):
    """Vectors of the MetaQA entity ``names`` (row = position) as a lazy index reads them
    (``kgrag.index.entity_vectors.EntityVectors`` through the session's vector cache): a name is encoded when a
    test first reads its row, once per test session."""
    import types

    import numpy as np

    from kgrag.index.entity_vectors import EntityVectors, VectorCache

    shim = types.SimpleNamespace(num_entities=len(names), entity_names=np.asarray(list(names), dtype=object))
    return EntityVectors(shim, VectorCache(model))


@pytest.fixture(scope="session")
def e2e_project(tmp_path_factory) -> Path:
    """A copy of the repository with a small real MetaQA sample in its params (git repo, no outputs)."""
    dst = copy_repo(tmp_path_factory.mktemp("e2e") / "proj", sample=E2E_SAMPLE, shard_size=6)
    run(["git", "init", "-q"], dst)
    run(["git", "add", "-A"], dst)
    run(["git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "init"], dst)
    return dst


@pytest.fixture(scope="session")
def e2e_first_run(e2e_project: Path) -> str:
    """`dvc repro` of the whole pipeline in the copy, once per test session. Its run records and reports (no DVC
    outputs: reports/timings.json, report.md, report.html, data/timings/) are kept beside the project, so that
    ``shared_project`` can put them back too."""
    out = run(["dvc", "repro"], e2e_project)
    keep = e2e_project.parent / "first_run"
    for rel in FIRST_RUN_RECORDS:
        src = e2e_project / rel
        if src.is_dir():
            shutil.copytree(src, keep / rel, dirs_exist_ok=True)
        elif src.exists():
            (keep / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, keep / rel)
    return out


#: what a run writes outside DVC's outputs (run records, reports that show them)
FIRST_RUN_RECORDS = ("reports/timings.json", "reports/report.md", "reports/report.html", "data/timings")


def dvc_status(project: Path) -> dict:
    """`dvc status --json` of the main pipeline (dvc.yaml) in ``project``: {} when every output matches."""
    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_HOME", "PREFECT_LOCAL_STORAGE_PATH")}
    env["PATH"] = f"{Path(os.sys.executable).parent}:{os.environ['PATH']}"
    p = subprocess.run(["dvc", "status", "--json", "dvc.yaml"], cwd=project, env=env, capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout or "{}")


def _snapshot(project: Path) -> dict:
    """(size, mtime, inode) of every file a test could change that `dvc status` or a later test reads: params.yaml,
    dvc.lock and everything under data/ and reports/ (DVC's outputs and the run records)."""
    files = [project / "params.yaml", project / "dvc.lock"]
    for top in ("data", "reports"):
        files += [p for p in (project / top).rglob("*") if not p.is_dir()]
    out = {}
    for p in files:
        st = p.lstat()
        out[str(p.relative_to(project))] = (st.st_size, st.st_mtime_ns, st.st_ino)
    return out


@pytest.fixture
def shared_project(e2e_project: Path, e2e_first_run: str) -> Path:
    """The session's e2e project after its first `dvc repro`, put back after the test whatever the test changed:
    params.yaml and dvc.lock as they were, every output as dvc.lock says (`dvc checkout` from DVC's cache, then
    `dvc repro` for the uncached metrics), checked by `dvc status`, and the first run's run records and reports
    (``FIRST_RUN_RECORDS``). So a later test that reads the project reads the first run's outputs and records
    (the embedded SmolLM2's), never an earlier test's experiment, whatever order the tests run in."""
    keep = {f: (e2e_project / f).read_bytes() for f in ("params.yaml", "dvc.lock")}
    before = _snapshot(e2e_project)
    yield e2e_project
    if _snapshot(e2e_project) == before:
        return  # the test changed no file of the project's params, lock, outputs or records: nothing to put back
    for f, data in keep.items():
        (e2e_project / f).write_bytes(data)
    run(["dvc", "checkout", "--force", "--quiet", "dvc.yaml"], e2e_project)  # the main pipeline only
    if dvc_status(e2e_project):
        run(["dvc", "repro"], e2e_project)
    left = dvc_status(e2e_project)
    assert not left, f"the shared e2e project could not be put back: {left}"
    assert {f: (e2e_project / f).read_bytes() for f in keep} == keep
    first = e2e_project.parent / "first_run"
    for rel in FIRST_RUN_RECORDS:
        if (first / rel).is_dir():
            shutil.rmtree(e2e_project / rel, ignore_errors=True)
            shutil.copytree(first / rel, e2e_project / rel)
        elif (first / rel).exists():
            shutil.copy2(first / rel, e2e_project / rel)


@pytest.fixture(scope="session")
def kg(tmp_path_factory) -> KGStore:
    """The tiny movie KG as a store, shared by the module tests (read-only)."""
    path = tmp_path_factory.mktemp("kg") / "kg.duckdb"
    write_duckdb(path, tiny_tables(MOVIES))
    return KGStore(path)


@pytest.fixture(scope="session")
def index(kg):
    """An embedding index (packaged MiniLM) over the tiny KG's entity and relation names."""
    import numpy as np

    from kgrag.index.embed import EmbeddingIndex, encode

    model = "all-MiniLM-L6-v2"
    return EmbeddingIndex(
        model=model,
        entity_vectors=encode(kg.names(np.arange(kg.num_entities)), model=model),
        relation_vectors=encode([str(r).replace("_", " ") for r in kg.relation_names], model=model),
    )


def flow_inputs(folder: Path, questions: list[dict], retrieved: list[dict] | None = None) -> dict:
    """The flows' file inputs for rows built in a test: ``questions`` (and ``retrieved`` when given) written as
    Parquet files under ``folder`` with the stages' schemas, and a fresh shard folder."""
    import pyarrow as pa

    from kgrag import io, schema as S
    folder = Path(folder)
    out = {"questions": str(folder / "questions.parquet"), "shard_dir": str(folder / "shards")}
    io.write_parquet(out["questions"], pa.Table.from_pylist(questions, schema=S.QUESTIONS), row_group_size=2)
    if retrieved is not None:
        out["retrieved"] = str(folder / "retrieved.parquet")
        io.write_parquet(out["retrieved"], pa.Table.from_pylist(retrieved, schema=S.RETRIEVED), row_group_size=2)
    return out


def experiment_params(*, retrieve=None, generate=None, reason=None, index_model: str | None = None,
                      separator: str = "|", store: str | None = None):
    """The whole ``Params`` the flows take (``kgrag.experiment`` assembles an experiment from it), built from the
    sections a test sets; every other section keeps its default."""
    from kgrag.params import Params, RetrieveParams

    sections: dict = {"evaluate": {"answer_separator": separator}}
    if retrieve is not None:
        sections["retrieve"] = retrieve
    if store is not None:
        sections["retrieve"] = (retrieve or RetrieveParams()).model_copy(update={"store": store})
    for name, sec in (("generate", generate), ("reason", reason)):
        if sec is not None:
            sections[name] = sec
    if index_model is not None:
        sections["index"] = {"model": index_model}
    return Params.model_validate({k: v.model_dump(mode="json", by_alias=True) if hasattr(v, "model_dump") else v
                                  for k, v in sections.items()})


def write_index(folder: Path, kg, model: str = "all-MiniLM-L6-v2") -> str:
    """A real embedding index of ``kg``'s entity and relation names (``model``) under ``folder``; returns it."""
    from kgrag.index.embed import encode, write_vectors

    folder = Path(folder)
    write_vectors(folder / "entities.parquet", np.arange(kg.num_entities),
                  encode(list(kg.names(np.arange(kg.num_entities))), model=model))
    write_vectors(folder / "relations.parquet", np.arange(len(kg.relation_names)),
                  encode([str(r) for r in kg.relation_names], model=model))
    return str(folder)


def shard_rows(paths: list[str]) -> list[dict]:
    """The rows of a flow's shard files, in order."""
    from kgrag import io
    return [r for p in paths for r in io.read_arrow(p).to_pylist()]
