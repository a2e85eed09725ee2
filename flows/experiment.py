"""The experiment flow: the retrieve, generate and evaluate stages as one Prefect flow, for running as a
deployment on a work pool (README "Run on a cluster").

Each step runs the DVC stage's own command (``python -m stages.<name>`` with the same ``--params`` /
``--set`` arguments) in its own process, so it reads the same params, writes the same outputs and, with
``kgrag.env`` applied before Prefect loads its settings, keeps its shard files in the same
``.kgrag_cache/shards`` as a ``dvc repro`` run, however this flow was started (a worker's flow run imports
Prefect before this module). The stages' flows report to this flow's Prefect API.
``cluster.task_runner`` decides where their shards run. The inputs of ``retrieve`` (``dvc repro index relplan``, and
``dvc repro finetune/dvc.yaml`` for the LEGO presets that read the fine-tuned scorer) must exist; DVC does not see these runs (``dvc commit``
records their outputs).

    python -m flows.experiment --set cluster.task_runner=dask   # one run here
"""

from __future__ import annotations

from kgrag.env import setup

setup()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

from prefect import flow, task  # noqa: E402
from prefect.cache_policies import NO_CACHE  # noqa: E402

from flows.runners import shared_api  # noqa: E402
from kgrag import io  # noqa: E402

STAGES = ("retrieve", "generate", "evaluate")


@task(name="stage", cache_policy=NO_CACHE, persist_result=False)
def run_stage(stage: str, argv: list[str], api_url: str) -> None:
    """Run ``python -m stages.<stage> <argv>`` here, reporting to ``api_url``; fails when the stage fails."""
    env = {**os.environ, "PREFECT_API_URL": api_url}
    subprocess.run([sys.executable, "-m", f"stages.{stage}", *argv], env=env, check=True)


@flow(name="experiment", log_prints=False, persist_result=False)
def experiment_flow(params: str = "params.yaml", overrides: list[str] | None = None) -> dict:
    """Run the retrieve, generate and evaluate stages with ``params`` and ``overrides`` (``key=value``, as
    ``--set``); returns the metrics."""
    argv = ["--params", params, *(a for o in overrides or [] for a in ("--set", o))]
    with shared_api() as url:
        for stage in STAGES:
            run_stage(stage, argv, url)
    return io.read_json(io.REPORTS / "metrics.json")


def main(argv: list[str] | None = None) -> None:
    """Run the experiment flow once in this process."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--params", default="params.yaml", help="params file (default: params.yaml)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a param")
    args = ap.parse_args(argv)
    metrics = experiment_flow(params=args.params, overrides=args.set)
    print(json.dumps({k: v for k, v in metrics.items() if isinstance(v, (int, float))}), file=sys.stderr)


if __name__ == "__main__":
    main()
