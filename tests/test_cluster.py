"""Cluster: the retrieve and generate shards on a real local Dask cluster (2 worker processes) through
prefect-dask give the outputs, metrics and Prefect cache keys of the single-process run.

The e2e test runs in its own copy of the repository (``tests/conftest.py: copy_repo``) on a real MetaQA
sample with the embedded SmolLM2 (llama.cpp in each worker process).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml

from kgrag import schema as S

from kgrag.params import ParamsError, parse
from kgrag.registry import NoParams
from kgrag.task_runners import TASK_RUNNERS
from tests.conftest import copy_repo, metaqa_entity_vectors, metaqa_sample_store, run

SAMPLE = 8
SHARD = 3
N_SHARDS = 3  # per flow: 3 + 3 + 2 questions


# ------------------------------------------------------------------ params and registry (fast)

def test_cluster_params_pick_a_registered_runner():
    p = parse({"cluster": {"task_runner": "dask", "dask": {"address": "tcp://10.0.0.1:8786"}}})
    assert p.cluster.name == "dask" and p.cluster.module_params().address == "tcp://10.0.0.1:8786"
    assert parse({}).cluster.name == "local"
    with pytest.raises(ParamsError) as e:
        parse({"cluster": {"task_runner": "spark"}})
    assert "unknown task_runner module 'spark'" in str(e.value) and "dask, local" in str(e.value)
    with pytest.raises(ParamsError) as e:
        parse({"cluster": {"task_runner": "dask", "dask": {"n_worker": 2}}})
    assert "cluster.dask.n_worker" in str(e.value)
    with pytest.raises(ParamsError):
        parse({"cluster": {"dask": {"n_workers": 0}}})


def test_runners_build_prefect_task_runners():
    from prefect.task_runners import ThreadPoolTaskRunner
    from prefect_dask import DaskTaskRunner

    local = TASK_RUNNERS.get("local").impl(NoParams()).task_runner()
    assert isinstance(local, ThreadPoolTaskRunner) and local._max_workers == 1
    dask = TASK_RUNNERS.get("dask")
    built = dask.impl(dask.params(n_workers=3, threads_per_worker=2)).task_runner()
    assert isinstance(built, DaskTaskRunner) and built.address is None
    assert built.cluster_kwargs == {"n_workers": 3, "threads_per_worker": 2, "processes": True,
                                    "dashboard_address": ":0"}
    remote = dask.impl(dask.params(address="tcp://127.0.0.1:8786")).task_runner()
    assert remote.address == "tcp://127.0.0.1:8786" and not remote.cluster_kwargs


# ------------------------------------------------------------------ the real pipeline on a Dask cluster

def _prepare(project: Path) -> None:
    """The inputs of retrieve: ``data/validated/kg.duckdb`` written by the MetaQA loader (the sample of the
    project's params; validation, which finds nothing to quarantine in MetaQA, skipped), then the index stage's
    output: the repository's MetaQA entity vectors when they verifiably match (else encoded, minutes) and the
    relation names encoded here, then the relplan stage's plan (the default retriever's; 40 dev questions a hop
    count in these params)."""
    from kgrag.embed import encode, write_vectors

    kg, _ = metaqa_sample_store(project / "data" / "validated", sample=SAMPLE)
    ids = np.nonzero(kg.entity_names != None)[0]  # noqa: E711 (as the index stage)
    index = project / "data" / "index"
    write_vectors(index / "entities.parquet", ids, metaqa_entity_vectors(kg.names(ids)))
    rel = [str(n).replace("_", " ") for n in kg.relation_names]
    write_vectors(index / "relations.parquet", np.arange(len(rel)), encode(rel, model="all-MiniLM-L6-v2"))
    run([sys.executable, "-m", "stages.relplan"], project)


def _outputs(project: Path) -> dict:
    """Metrics, predictions, retrieved and generated rows: whole (what a run took is in the run records,
    data/timings/ and reports/timings.json, not in these)."""
    metrics = json.loads((project / "reports" / "metrics.json").read_text())

    def table(path: Path) -> list[dict]:
        return pq.read_table(path).to_pylist()

    return {
        "metrics": metrics,
        "predictions": table(project / "reports" / "predictions.parquet"),
        "retrieved": table(project / "data" / "retrieve" / "retrieved.parquet"),
        "generations": table(project / "data" / "generate" / "generations.parquet"),
    }


def _cache_keys(project: Path) -> set[str]:
    """The shard files (``flows.cache``: each named by its cache key), as ``<task>/<key>.arrow``."""
    root = project / ".kgrag_cache" / "shards"
    return {p.relative_to(root).as_posix() for p in root.glob("*/*.arrow")}


class DaskCluster:
    """``distributed.LocalCluster(n_workers=2, processes=True)`` in its own process started in ``cwd`` (the
    workers import ``flows`` and ``kgrag`` from there), and a client of it."""

    def __init__(self, cwd: Path, env: dict[str, str]) -> None:
        code = ("import sys, time\nfrom distributed import LocalCluster\n"
                "c = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=':0')\n"
                "print(c.scheduler_address, flush=True)\nsys.stdin.read()\nc.close()\n")
        self.proc = subprocess.Popen([sys.executable, "-c", code], cwd=cwd, env=env, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        self.address = self.proc.stdout.readline().strip()
        assert self.address.startswith("tcp://"), "the local Dask cluster did not start"
        from distributed import Client

        self.client = Client(self.address, timeout=60)
        self.client.wait_for_workers(2, timeout=120)
        self.client.get_task_stream()  # starts the scheduler's task-stream record

    def workers(self) -> dict[str, int]:
        """Worker address → its process id."""
        return self.client.run(os.getpid)

    def shard_tasks(self) -> list[dict]:
        """Task-stream records of the shard tasks that ran so far (key, worker, start/stop)."""
        return [r for r in self.client.get_task_stream(start=0) if "_shard" in r["key"]]

    def close(self) -> None:
        self.client.close()
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def _small_llm_params(project: Path) -> None:
    """Shorter prompts and replies, one llama.cpp thread per process (2 worker processes on 2 cores)."""
    params = yaml.safe_load((project / "params.yaml").read_text())
    params["generate"]["max_context_triples"] = 20
    params["generate"]["max_tokens"] = 16
    params["generate"]["llamacpp"]["n_threads"] = 1
    (project / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))


@pytest.mark.e2e
def test_dask_cluster_run_equals_single_process_run(tmp_path):
    """The experiment flow (retrieve → generate → evaluate, each stage in its process) once with the `local`
    runner (every shard in the stage's process) and once with its shards on a 2-worker Dask cluster, each from
    empty caches: same metrics, predictions and rows, the same shard cache keys (shard file names), and
    every shard task ran on a cluster worker, both workers taking some."""
    project = copy_repo(tmp_path / "proj", sample=SAMPLE, shard_size=SHARD)
    _small_llm_params(project)
    _prepare(project)
    experiment = [sys.executable, "-m", "flows.experiment"]

    t0 = time.perf_counter()
    run(experiment, project)
    single_s = time.perf_counter() - t0
    single, single_keys = _outputs(project), _cache_keys(project)
    assert len(single_keys) == 2 * N_SHARDS, single_keys  # the retrieve and the generate shards

    shutil.rmtree(project / ".kgrag_cache")  # no Prefect result, no LLM call of the first run
    for out in ("data/retrieve", "data/generate", "reports"):
        shutil.rmtree(project / out)
    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_HOME", "PREFECT_LOCAL_STORAGE_PATH")}
    cluster = DaskCluster(project, {**env, "PYTHONPATH": str(project)})
    try:
        t0 = time.perf_counter()
        log = run([*experiment, "--set", "cluster.task_runner=dask", "--set", f"cluster.dask.address={cluster.address}"],
                  project)
        cluster_s = time.perf_counter() - t0
        tasks = cluster.shard_tasks()
        workers = cluster.workers()
    finally:
        cluster.close()
    print(f"experiment flow: one process {single_s:.0f} s, Dask (2 workers) {cluster_s:.0f} s")

    assert "[evaluate] hit_at_1=" in log
    assert _outputs(project) == single
    assert _cache_keys(project) == single_keys
    gen = pq.read_table(project / "data" / "timings" / "generate" / "questions.parquet")  # run records
    assert sum(gen.column(S.CACHED).to_pylist()) == 0, "the cluster run must have called the LLM itself"
    prefixes = sorted(r["key"].rsplit("-", 1)[0] for r in tasks)
    assert prefixes == ["generate_shard"] * N_SHARDS + ["retrieve_shard"] * N_SHARDS, prefixes
    ran_on = {r["worker"] for r in tasks}
    assert ran_on == set(workers) and len(set(workers.values())) == 2, (ran_on, workers)
