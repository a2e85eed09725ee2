"""The experiment flow: one ``dvc exp run`` of the pipeline as a Prefect flow, for runs on a schedule and on a
work pool (docs/cluster.md, ``prefect.yaml``).

The flow runs DVC's own pipeline (``dvc exp run -S key=value ...`` in the repository the worker started in), so a
scheduled run is an experiment like any other: DVC re-runs only the stages whose code, params or inputs
changed, records ``dvc.lock``, and ``dvc exp show`` / ``kgrag compare`` list it. The stages' flows report to this
flow's Prefect API (``PREFECT_API_URL`` handed to DVC's stage processes); ``cluster.*`` overrides
(``cluster.task_runner=dask``, ``cluster.dask.address=tcp://...``) send their shard tasks to a Dask cluster
without changing any output or cache key (``cluster`` is no DVC param of the stages).

One experiment at a time per repository: a run holds an exclusive lock (``.dvc/tmp/kgrag-experiment.lock``,
``fcntl.flock``) while DVC runs, so a run that arrives while another is running waits for it (it queues) instead
of both writing the workspace; ``prefect.yaml`` also limits the deployment to one run at a time (ENQUEUE).

    python -m flows.experiment -S cluster.task_runner=dask   # one run here, as `dvc exp run -S ...`
"""

from __future__ import annotations

from kgrag.env import setup

setup()

import argparse  # noqa: E402
import fcntl  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Iterator, Sequence  # noqa: E402
from contextlib import contextmanager  # noqa: E402
from pathlib import Path  # noqa: E402

from prefect import flow, get_run_logger, task  # noqa: E402
from prefect.cache_policies import NO_CACHE  # noqa: E402

from flows.runners import shared_api  # noqa: E402
from kgrag import io  # noqa: E402

LOCK = Path(".dvc") / "tmp" / "kgrag-experiment.lock"


@contextmanager
def experiment_lock(root: Path = Path(".")) -> Iterator[float]:
    """Hold the repository's experiment lock (blocking until a running experiment releases it); yields the
    seconds waited. The lock is released when the holder exits, however it exits (the OS drops a flock of a
    dead process)."""
    path = root / LOCK
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        t0 = time.monotonic()
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield time.monotonic() - t0
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def dvc_command(overrides: Sequence[str], name: str | None = None) -> list[str]:
    """``dvc exp run`` with each override as ``-S key=value`` (DVC's own syntax, as ``dvc exp run -S``)."""
    cmd = [sys.executable, "-m", "dvc", "exp", "run"]
    if name:
        cmd += ["--name", name]
    for o in overrides:
        if "=" not in o:
            raise ValueError(f"override {o!r} is not key=value (e.g. cluster.task_runner=dask)")
        cmd += ["-S", o]
    return cmd


@task(name="dvc exp run", cache_policy=NO_CACHE, persist_result=False)
def run_dvc(cmd: list[str], api_url: str) -> str:
    """Run ``cmd`` (a ``dvc exp run``) here, its stages reporting to ``api_url``; its output, or a
    RuntimeError with its last lines when it fails."""
    env = {**os.environ, "PREFECT_API_URL": api_url}
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    out = done.stdout + done.stderr
    if done.returncode != 0:
        tail = "\n".join(out.strip().splitlines()[-8:])
        raise RuntimeError(f"`{' '.join(cmd[2:])}` failed (exit {done.returncode}):\n{tail}")
    return out


@flow(name="experiment", log_prints=False, persist_result=False)
def experiment_flow(overrides: list[str] | None = None, name: str | None = None) -> dict:
    """One ``dvc exp run`` with ``overrides`` (``key=value``, as ``-S``) under the repository's experiment lock;
    returns the numbers of ``reports/metrics.json`` and which stages DVC ran (``ran``) or skipped."""
    log = get_run_logger()
    cmd = dvc_command(overrides or [], name)
    with experiment_lock() as waited:
        if waited > 1:
            log.info("waited %.0f s for the running experiment", waited)
        with shared_api() as url:
            out = run_dvc(cmd, url)
    ran = sorted({line.split("'")[1] for line in out.splitlines() if line.startswith("Running stage '")})
    skipped = sorted({line.split("'")[1] for line in out.splitlines()
                      if line.startswith("Stage '") and "didn't change, skipping" in line})
    log.info("dvc exp run: ran %s, skipped %s", ran or "nothing", skipped)
    metrics = io.read_json(io.REPORTS / "metrics.json")
    return {"ran": ran, "skipped": skipped, "waited_s": round(waited, 1),
            "metrics": {k: v for k, v in metrics.items() if isinstance(v, (int, float))}}


def main(argv: list[str] | None = None) -> None:
    """Run the experiment flow once in this process."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-S", "--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a param, as `dvc exp run -S` (repeatable)")
    ap.add_argument("--name", default=None, help="the experiment's name (dvc exp run --name)")
    args = ap.parse_args(argv)
    print(json.dumps(experiment_flow(overrides=args.set, name=args.name)), file=sys.stderr)


if __name__ == "__main__":
    main()
