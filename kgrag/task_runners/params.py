"""Params ``cluster``: where the retrieve and generate flows run their shard tasks."""

from __future__ import annotations

from pydantic import ConfigDict, Field

from kgrag.config.base import ModuleSection
from kgrag.registry import TASK_RUNNERS


class ClusterParams(ModuleSection, registry=TASK_RUNNERS, selector="task_runner", section="cluster"):
    """Where the retrieve and generate flows run their shard tasks: ``task_runner`` picks the Prefect task
    runner (``local``: one after another in the stage's process; ``dask``: on Dask worker processes); its
    sub-section (``cluster.dask``) holds its params. Outputs and cache keys do not depend on it."""

    model_config = ConfigDict(json_schema_extra={"yaml": (
        "stages retrieve and generate: where their shard tasks run (Prefect task runner); outputs and cache keys do "
        "not depend on it (docs/cluster.md)"
    )})

    task_runner: str = Field("local", description="local (one shard after another in the stage's process) | dask "
                             "(Dask workers)")
