"""Cluster: the task-runner params and registry, and ``DaskCluster`` (a real local Dask cluster of 2 worker
processes) for the end-to-end test of a scheduled experiment on it (tests/test_scheduled.py: its retrieve and
generate shards run on the workers and give the outputs of the local run).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kgrag.params import ParamsError, parse
from kgrag.registry import NoParams
from kgrag.task_runners import TASK_RUNNERS

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
    with pytest.raises(ParamsError):  # dask chosen: at load
        parse({"cluster": {"task_runner": "dask", "dask": {"n_workers": 0}}})
    unchosen = {"cluster": {"dask": {"n_workers": 0}}}  # local chosen: dask's section on use, or by `kgrag check`
    with pytest.raises(ParamsError):
        parse(unchosen, modules="all")
    with pytest.raises(ParamsError) as e:
        parse(unchosen).cluster.module_params("dask")
    assert "cluster.dask.n_workers" in str(e.value)


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
