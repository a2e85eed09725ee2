"""A scheduled experiment, end to end through real components: a Prefect server on 127.0.0.1 (a free port), a
process work pool and worker, a local Dask scheduler with 2 worker processes, and the deployment of
``prefect.yaml`` deployed with an interval schedule. Each scheduled run is one ``dvc exp run`` of the pipeline
(flows/experiment.py) whose retrieve and generate shards run on the Dask workers.

It runs in a copy of the session's e2e project (real MetaQA questions, the embedded SmolLM2, after a local
``dvc repro``), with the LLM call cache and shard files removed, so the first scheduled run calls the LLM on the
cluster. The overrides change only the shard sizes (params of retrieve and generate that change no row of their
outputs), so DVC re-runs retrieve and generate and their rows, the metrics and every other output must equal the
local run's; the second scheduled run of the same params must recompute nothing. Also: the experiment lock makes a second run wait for the first.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from tests.conftest import run
from tests.test_cluster import DaskCluster

pytestmark = pytest.mark.e2e


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _lock_of(project: Path) -> dict:
    """Each stage's outputs' md5 in ``dvc.lock``."""
    lock = yaml.safe_load((project / "dvc.lock").read_text())["stages"]
    return {name: {o["path"]: o.get("md5") for o in st.get("outs", [])} for name, st in lock.items()}


class PrefectServer:
    """``prefect server start`` on a free port with its own home (database), stopped by ``close``."""

    def __init__(self, home: Path, cwd: Path) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}/api"
        env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
        self.env = {**env, "PREFECT_HOME": str(home), "PREFECT_API_URL": self.url, "COLUMNS": "250",
                    "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
                    "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DO_NOT_TRACK": "1",
                    "PREFECT_SERVER_SERVICES_SCHEDULER_LOOP_SECONDS": "2",
                    "PREFECT_WORKER_QUERY_SECONDS": "2", "PREFECT_WORKER_PREFETCH_SECONDS": "2",
                    "PREFECT_SERVER_SERVICES_LATE_RUNS_ENABLED": "false"}
        self.log = open(home / "server.log", "w")
        self.proc = subprocess.Popen(["prefect", "server", "start", "--host", "127.0.0.1", "--port", str(self.port)],
                                     cwd=cwd, env=self.env, stdout=self.log, stderr=subprocess.STDOUT)
        self.procs = [self.proc]
        import urllib.request

        deadline = time.monotonic() + 240
        while True:
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            assert self.proc.poll() is None, f"prefect server exited: {(home / 'server.log').read_text()[-2000:]}"
            assert time.monotonic() < deadline, "prefect server did not answer /health in 240 s"
            time.sleep(1)

    def cli(self, *args: str, cwd: Path) -> str:
        """A Prefect CLI command against this server; its output (fails the test when it fails)."""
        p = subprocess.run(["prefect", *args], cwd=cwd, env=self.env, capture_output=True, text=True, timeout=300)
        out = p.stdout + p.stderr
        assert p.returncode == 0, f"prefect {' '.join(args)} failed:\n{out[-3000:]}"
        return out

    def start(self, args: list[str], cwd: Path, log: Path) -> subprocess.Popen:
        fh = open(log, "w")
        p = subprocess.Popen(args, cwd=cwd, env=self.env, stdout=fh, stderr=subprocess.STDOUT)
        self.procs.append(p)
        return p

    def close(self) -> None:
        for p in reversed(self.procs):
            p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
        self.log.close()


def _flow_runs(server: PrefectServer, deployment_id: str) -> list[dict]:
    """The deployment's flow runs (state and name), via the REST API."""
    import urllib.request

    import urllib.error

    body = json.dumps({"deployments": {"id": {"any_": [deployment_id]}}, "sort": "EXPECTED_START_TIME_ASC"})
    deadline = time.monotonic() + 120
    while True:  # a busy server answers 503 / 429: asked again, as Prefect's client does
        req = urllib.request.Request(f"{server.url}/flow_runs/filter", data=body.encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as e:
            if e.code not in (429, 503) or time.monotonic() > deadline:
                raise
        time.sleep(2)


def _deployment_id(server: PrefectServer) -> str:
    import urllib.request

    with urllib.request.urlopen(f"{server.url}/deployments/name/experiment/experiment", timeout=10) as r:
        return json.loads(r.read())["id"]


def _api(server: PrefectServer, method: str, path: str, body: dict) -> None:
    """A write to the server's REST API, retried as Prefect's own client retries: a busy server (its SQLite
    database locked by the scheduler and the worker) answers 503 or 429 (seen: 503 on the pause, under load)."""
    import urllib.error
    import urllib.request

    deadline = time.monotonic() + 120
    while True:
        req = urllib.request.Request(f"{server.url}{path}", data=json.dumps(body).encode(), method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=10):
                return
        except urllib.error.HTTPError as e:
            if e.code not in (429, 503) or time.monotonic() > deadline:
                raise
        time.sleep(2)


def _settle(server: PrefectServer, deployment_id: str) -> None:
    """Pause the deployment, cancel its runs that have not started and wait for the ones that have: a third
    scheduled run stopped mid-way by the test's teardown leaves ``dvc exp run`` interrupted, the workspace put back
    to its baseline (seen: the workspace then held the local run's params and outputs, not the experiment's)."""
    _api(server, "PATCH", f"/deployments/{deployment_id}", {"paused": True})
    deadline = time.monotonic() + 600
    while True:
        runs = _flow_runs(server, deployment_id)
        for r in runs:
            if r["state_type"] == "SCHEDULED":
                _api(server, "POST", f"/flow_runs/{r['id']}/set_state",
                     {"state": {"type": "CANCELLED", "name": "Cancelled"}, "force": True})
        busy = [r["state_type"] for r in runs if r["state_type"] in ("SCHEDULED", "PENDING", "RUNNING", "CANCELLING")]
        if not busy:
            return
        assert time.monotonic() < deadline, f"runs still going 600 s after the deployment was paused: {busy}"
        time.sleep(2)


def test_scheduled_deployment_runs_dvc_experiments_on_a_dask_cluster(shared_project, tmp_path):
    proj = tmp_path / "proj"
    shutil.copytree(shared_project, proj, symlinks=True)
    local_lock, local_metrics = _lock_of(proj), json.loads((proj / "reports" / "metrics.json").read_text())
    shutil.rmtree(proj / ".kgrag_cache")  # no LLM call, no shard file of the local run
    params = yaml.safe_load((proj / "params.yaml").read_text())
    params["generate"]["llamacpp"]["n_threads"] = 1  # one thread a worker process (2 workers on 2 cores)
    (proj / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    run(["git", "add", "params.yaml"], proj)  # an experiment's baseline: the committed params (n_threads is
    run(["git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "one thread"], proj)  # no DVC param)
    shards = {k: params[k]["shard_size"] for k in ("retrieve", "generate")}
    assert all(v != 5 for v in shards.values())

    home = tmp_path / "prefect_home"
    home.mkdir()
    server = PrefectServer(home, proj)
    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_HOME", "PREFECT_LOCAL_STORAGE_PATH")}
    cluster = DaskCluster(proj, {**env, "PYTHONPATH": str(proj), "OMP_WAIT_POLICY": "PASSIVE"})
    try:
        overrides = ["cluster.task_runner=dask", f"cluster.dask.address={cluster.address}",
                     "retrieve.shard_size=5", "generate.shard_size=5"]
        server.cli("work-pool", "create", "kgrag", "--type", "process", cwd=proj)
        out = server.cli("--no-prompt", "deploy", "--name", "experiment", "--interval", "5",
                         "--params", json.dumps({"overrides": overrides}), cwd=proj)
        assert "experiment/experiment" in out
        server.start(["prefect", "worker", "start", "--pool", "kgrag", "--type", "process"], proj,
                     tmp_path / "worker.log")
        dep = _deployment_id(server)
        deadline = time.monotonic() + 900
        while True:
            runs = _flow_runs(server, dep)
            done = [r for r in runs if r["state_type"] == "COMPLETED"]
            bad = [r for r in runs if r["state_type"] in ("FAILED", "CRASHED")]
            assert not bad, f"a scheduled run failed: {bad[0]['state']}\n{(tmp_path / 'worker.log').read_text()[-3000:]}"
            if len(done) >= 2:
                break
            assert time.monotonic() < deadline, f"2 scheduled runs did not complete in 900 s: {[r['state_type'] for r in runs]}"
            time.sleep(2)
        _settle(server, dep)
        tasks = cluster.shard_tasks()
        workers = cluster.workers()
        table = server.cli("flow-run", "ls", "--state-type", "COMPLETED", cwd=proj)
        deployments = server.cli("deployment", "ls", cwd=proj)
    finally:
        server.close()
        cluster.close()

    # both runs came from the schedule, one after the other (one at a time), and the CLI lists them
    first, second = sorted(done, key=lambda r: r["start_time"])[:2]
    assert first["auto_scheduled"] and second["auto_scheduled"]
    assert first["end_time"] <= second["start_time"]
    assert "COMPLETED" in table and first["name"] in table and "experiment/experiment" in deployments
    # the first run re-ran retrieve and generate on the cluster's workers; the outputs equal the local run's
    n_q = params["data"]["sample"]
    prefixes = sorted(r["key"].rsplit("-", 1)[0] for r in tasks)
    assert prefixes == ["generate_shard"] * -(-n_q // 5) + ["retrieve_shard"] * -(-n_q // 5), prefixes
    assert {r["worker"] for r in tasks} == set(workers)  # both workers took shards
    # retrieve's and generate's files hold the same rows in other Parquet row groups (one per shard of 5, not 6):
    # their tables must be equal; every other output byte-identical
    lock = _lock_of(proj)
    for stage, out in (("retrieve", "data/retrieve/retrieved.parquet"), ("generate", "data/generate/generations.parquet")):
        assert pq.read_table(proj / out).equals(pq.read_table(shared_project / out)), stage
        lock.pop(stage), local_lock.pop(stage)
    assert lock == local_lock
    assert json.loads((proj / "reports" / "metrics.json").read_text()) == local_metrics
    recorded = yaml.safe_load((proj / "dvc.lock").read_text())["stages"]
    assert recorded["generate"]["params"]["params.yaml"]["generate"]["shard_size"] == 5  # recorded as DVC's run
    # DVC sees both as experiments of the same params; the second one recomputed nothing (no new shard task)
    exps = subprocess.run(["dvc", "exp", "show", "--json"], cwd=proj, capture_output=True, text=True,
                          env={**env, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"})
    assert exps.returncode == 0, exps.stderr[-2000:]
    shown = json.loads(exps.stdout)
    names = [e["name"] for b in shown for e in (b.get("experiments") or []) for e in (e.get("revs") or [])]
    assert len(names) >= 2, names
    assert len(tasks) == 2 * -(-n_q // 5)


def test_experiment_lock_makes_a_second_run_wait(tmp_path):
    """Two processes take the experiment lock of one repository: the second waits until the first releases it
    (the intervals they hold it do not overlap); a process killed while holding it releases it."""
    code = ("import sys, time\nfrom pathlib import Path\nfrom flows.experiment import experiment_lock\n"
            "with experiment_lock(Path(sys.argv[1])) as waited:\n"
            "    t0 = time.time(); time.sleep(float(sys.argv[2])); print(t0, time.time(), waited, flush=True)\n")
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root)}
    a = subprocess.Popen([sys.executable, "-c", code, str(tmp_path), "1.5"], stdout=subprocess.PIPE, text=True,
                         env=env, cwd=root)
    lock = tmp_path / ".dvc" / "tmp" / "kgrag-experiment.lock"
    deadline = time.monotonic() + 60
    while not lock.exists():  # a holds it (or is about to): start b only then
        assert time.monotonic() < deadline
        time.sleep(0.05)
    b = subprocess.Popen([sys.executable, "-c", code, str(tmp_path), "0"], stdout=subprocess.PIPE, text=True,
                         env=env, cwd=root)
    (a0, a1, _), (b0, b1, b_waited) = ([float(x) for x in p.communicate(timeout=120)[0].split()] for p in (a, b))
    assert a1 <= b0 and b_waited > 0
    holder = subprocess.Popen([sys.executable, "-c", code, str(tmp_path), "60"], stdout=subprocess.PIPE, env=env,
                              cwd=root)
    time.sleep(3)
    holder.kill()
    holder.wait()
    c = subprocess.run([sys.executable, "-c", code, str(tmp_path), "0"], capture_output=True, text=True, env=env,
                       cwd=root, timeout=60)
    assert c.returncode == 0 and len(c.stdout.split()) == 3
