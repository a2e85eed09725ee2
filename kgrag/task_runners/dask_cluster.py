"""``dask``: the shard tasks on the worker processes of a Dask cluster, through prefect-dask.

With ``address`` empty a temporary ``distributed.LocalCluster`` of ``n_workers`` processes is started for the
flow run and closed after it; with an address the tasks go to that running cluster's workers, which must run
in a checkout of this repository (``flows`` and ``kgrag`` importable, the same data paths).
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field

from kgrag.config.base import Strict
from kgrag.task_runners.core import TASK_RUNNERS


class DaskParams(Strict):
    """Params of the ``dask`` task runner."""

    address: str | None = Field(
        None, description="scheduler of a running Dask cluster (tcp://host:8786); null = a temporary local cluster"
    )
    n_workers: int = Field(2, ge=1, description="local cluster: worker processes")
    threads_per_worker: int = Field(
        1, ge=1, description="local cluster: threads per worker (1: the in-process LLM is not thread-safe)"
    )


@TASK_RUNNERS.register("dask", params=DaskParams)
class DaskRunner:
    """prefect-dask's ``DaskTaskRunner``: a running cluster by address, else a temporary LocalCluster."""

    separate_processes: ClassVar[bool] = True

    def __init__(self, params: DaskParams) -> None:
        self.params = params

    def cluster_kwargs(self) -> dict[str, Any]:
        """Arguments of the temporary ``distributed.LocalCluster`` (worker processes; its HTTP endpoint on a free port)."""
        p = self.params
        return {"n_workers": p.n_workers, "threads_per_worker": p.threads_per_worker, "processes": True,
                "dashboard_address": ":0"}

    def task_runner(self) -> Any:
        """A ``DaskTaskRunner`` for the configured cluster."""
        from prefect_dask import DaskTaskRunner

        if self.params.address:
            return DaskTaskRunner(address=self.params.address)
        return DaskTaskRunner(cluster_class="distributed.LocalCluster", cluster_kwargs=self.cluster_kwargs())
