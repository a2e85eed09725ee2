"""kgrag.experiment: the one place an experiment's parts are built from params.

Unit tests of the assembly (files, the store choice, derived experiments, the stage order) on a real DuckDB
KG, and a structural test: no stage, flow, app or bench builds a KG store, index or LLM client of the
experiment by hand (each exception is listed with its reason), so the parts cannot differ between them.
"""

from __future__ import annotations

import ast
from pathlib import Path


from kgrag.experiment import Experiment, Files, stage_order
from kgrag.params import Params, RetrieveParams

ROOT = Path(__file__).resolve().parents[1]

#: calls that build an experiment's parts by hand
BUILDERS = {"open_store", "open_index", "client_for", "KGStore", "DuckKGStore", "EmbeddingIndex.load", "Sampling"}
#: (file, builder) pairs allowed outside kgrag/experiment.py, each for a reason
ALLOWED = {
    # the builders' own modules (definitions and their process-wide caches)
    ("kgrag/kg/store.py", "KGStore"), ("kgrag/kg/store.py", "DuckKGStore"), ("kgrag/index/embed.py", "EmbeddingIndex.load"),
    ("kgrag/kg/store_duckdb.py", "DuckKGStore"),  # ensure_edge_groups: the KG file's groups, written once a stage
    ("kgrag/reasoning/generate.py", "Sampling"),  # sampling_of: the reasoners' settings from Params
    ("kgrag/reasoning/reasoners/core.py", "Sampling"),  # ReasonInput's default (tests, reasoners run alone)
    ("kgrag/llm/clients.py", "client_for"),  # llm_client: a retrieval module's own LLM (retrieve.lego.llm)
    ("stages/evaluate.py", "client_for"),  # another section's client: the evaluate judge
    # stages that read the whole KG into memory by design (index embeds every name; relplan and
    # finetune_path_scorer walk it)
    ("stages/index.py", "KGStore"), ("stages/relplan.py", "KGStore"), ("stages/finetune_path_scorer.py", "KGStore"),
    # G-Retriever's training pipeline (its own dvc.yaml, not the experiment)
    ("kgrag/gretriever/run.py", "KGStore"), ("kgrag/gretriever/run.py", "EmbeddingIndex.load"),
    # benches that time or compare the parts themselves
    ("bench/constrain.py", "client_for"),  # a fresh, uncached client per backend variant (cold-load timing)
    ("bench/scale.py", "KGStore"), ("bench/scale.py", "DuckKGStore"),  # compares the two stores
    ("bench/lego.py", "KGStore"),  # its own --kg; needs whole edge arrays
    ("bench/retrieval_frontier.py", "KGStore"), ("bench/retrieval_frontier.py", "EmbeddingIndex.load"),  # --kg
    ("bench/reasoners.py", "Sampling"),  # fixed sampling for the batching comparison
    ("bench/relplan_scale.py", "KGStore"),  # builds synthetic KGs of given sizes and times the plan on each
    ("bench/relplan_scale.py", "DuckKGStore"),  # the same KG files read through the DuckDB store (--store duckdb)
    ("bench/relpath_hubs.py", "DuckKGStore"),  # relpath timed through the DuckDB store (--store duckdb)
    ("bench/relpath_hubs.py", "KGStore"),  # a synthetic KG of a given size, relpath with hub sampling on and off
    ("bench/relplan_labels.py", "KGStore"),  # stores an IRN release's tables (dev only) to time relplan's labels
    ("bench/linking.py", "DuckKGStore"),  # linking time on a synthetic DuckDB store, outside any experiment
    ("bench/transfer.py", "KGStore"),  # the paraphrase subset's gold paths: a work copy's KG walked after its run
}


def _calls(path: Path) -> set[str]:
    """Names of the builder calls in a file (``f(...)`` and ``C.load(...)``)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else (
                f"{f.value.id}.{f.attr}" if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) else "")
            if name in BUILDERS:
                out.add(name)
    return out


def test_no_runner_assembles_an_experiment_by_hand():
    """Stages, flows, apps and benches get the KG store, index, LLM client and sampling from the experiment.
    Fails when a file builds one itself (a new runner must use kgrag.experiment, or be listed with a reason)."""
    found = set()
    for folder in ("kgrag", "stages", "flows", "bench"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel == "kgrag/experiment.py":
                continue
            found |= {(rel, name) for name in _calls(path)}
    assert found - ALLOWED == set(), f"parts built by hand, not by kgrag.experiment: {sorted(found - ALLOWED)}"
    stale = ALLOWED - found
    assert not stale, f"allowed but no longer there (remove from ALLOWED): {sorted(stale)}"


def test_the_checker_sees_a_hand_built_client(tmp_path):
    """The structural test can fail: a planted hand-built client and store are found."""
    f = tmp_path / "x.py"
    f.write_text("from kgrag.llm.clients import client_for\nc = client_for(p.generate)\nkg = KGStore(db)\n")
    assert _calls(f) == {"client_for", "KGStore"}


def test_files_of_a_working_directory_are_absolute(tmp_path):
    files = Files.of(tmp_path)
    assert files.db == str(tmp_path.resolve() / "data/validated/kg.duckdb")
    assert files.index == str(tmp_path.resolve() / "data/index")
    assert files.cache.endswith(".kgrag_cache/llm_calls.sqlite") and files.shards.endswith(".kgrag_cache/shards")
    assert not files.has_index()  # nothing built there


def test_the_store_is_the_one_retrieve_store_chooses(movies_db, tmp_path):
    """``retrieve.store`` picks the store every part reads through: memory -> KGStore, duckdb -> DuckKGStore;
    both name the same entities."""
    from kgrag.kg.store import KGStore
    from kgrag.kg.store_duckdb import DuckKGStore

    files = Files(db=str(movies_db))
    mem = Experiment(Params(), files)
    duck = Experiment(Params(retrieve=RetrieveParams(store="duckdb")), files)
    assert isinstance(mem.kg, KGStore) and isinstance(duck.kg, DuckKGStore)
    assert mem.kg.num_entities == duck.kg.num_entities
    assert mem.kg.names([0, 1]) == duck.kg.names([0, 1])
    assert mem.index is None  # no index folder: parts that need none still work
    assert mem.kg is mem.kg  # built once


def test_derived_experiments_keep_files_and_change_one_section(movies_db):
    files = Files(db=str(movies_db), cache=None)
    exp = Experiment(Params(), files, client_overrides={"n_threads": 1})
    other = exp.with_retrieve(RetrieveParams(method="khop", hops=1))
    assert other.files == files and other.client_overrides == {"n_threads": 1}
    assert other.params.retrieve.method == "khop" and other.params.reason == exp.params.reason


def test_params_json_round_trip_is_what_a_shard_task_rebuilds(movies_db):
    """A shard task gets the params as JSON and rebuilds the same experiment."""
    p = Params(retrieve=RetrieveParams(method="khop", hops=1, store="duckdb"))
    exp = Experiment.from_json(p.model_dump_json(by_alias=True), Files(db=str(movies_db)))
    assert exp.params == p


def test_stage_order_is_dvc_yaml_s():
    """The one written stage order; evaluate's run records list the stages before it in that order."""
    import yaml

    from stages.evaluate import upstream_stages

    order = stage_order(ROOT / "dvc.yaml")
    assert order == list(yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"])
    assert order[:2] == ["ingest", "validate"] and "generate" in order
    assert upstream_stages() == order[: order.index("evaluate")]
