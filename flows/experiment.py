"""The experiment flow: the retrieve, generate and evaluate stages as one Prefect flow, for running as a
deployment on a work pool (README "Run on a cluster").

Each step is the DVC stage's own entry point with the same ``--params`` / ``--set`` arguments, so it reads
the same params, writes the same outputs and shares the same caches; ``cluster.task_runner`` decides where
the retrieve and generate shards run. The inputs of ``retrieve`` (``dvc repro index``, and ``finetune`` for
the LEGO presets that read it) must exist. DVC does not see these runs: ``dvc commit`` records the outputs.

    python -m flows.experiment --set cluster.task_runner=dask   # one run here
"""

from __future__ import annotations

from kgrag.env import setup

setup()

import argparse  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402

from prefect import flow  # noqa: E402

from flows.runners import project_settings  # noqa: E402
from kgrag import io  # noqa: E402

STAGES = ("retrieve", "generate", "evaluate")


@flow(name="experiment", log_prints=False)
def experiment_flow(params: str = "params.yaml", overrides: list[str] | None = None) -> dict:
    """Run the retrieve, generate and evaluate stages with ``params`` and ``overrides`` (``key=value``, as
    ``--set``); returns the metrics."""
    import importlib

    argv = ["--params", params, *(a for o in overrides or [] for a in ("--set", o))]
    with project_settings():
        for stage in STAGES:
            importlib.import_module(f"stages.{stage}").main(argv)
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
