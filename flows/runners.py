"""Run a flow with the task runner that ``params.cluster`` selects (``kgrag.task_runners``)."""

from __future__ import annotations

from contextlib import ExitStack, contextmanager
from typing import Any, Iterator

from kgrag.params import ClusterParams
from kgrag.task_runners import TASK_RUNNERS


def default_task_runner() -> Any:
    """The ``local`` runner's task runner: the flows' default when they are called without ``run_flow``."""
    from kgrag.registry import NoParams

    return TASK_RUNNERS.get("local").impl(NoParams()).task_runner()


def run_flow(flow: Any, cluster: ClusterParams, **kwargs: Any) -> Any:
    """Call ``flow(**kwargs)`` with the selected task runner; runners whose tasks run in other processes get a
    Prefect API they can reach (``shared_api``)."""
    from kgrag.env import short_errors

    short_errors()  # a failed shard: a few lines, not Prefect's tracebacks (KGRAG_TRACEBACK=1 shows them)
    module = TASK_RUNNERS.get(cluster.task_runner).impl(cluster.module_params())
    with ExitStack() as stack:
        if module.separate_processes:
            stack.enter_context(shared_api())
        return flow.with_options(task_runner=module.task_runner())(**kwargs)


@contextmanager
def shared_api() -> Iterator[str]:
    """The Prefect API URL for this block: the configured one, else this process's temporary server (started
    here if it is not yet), so that tasks in other processes report to the same API instead of each starting
    a temporary server of its own. Task runners pass the settings on to their workers."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    url = PREFECT_API_URL.value()
    if url:
        yield url
        return
    from prefect.server.api.server import SubprocessASGIServer

    server = SubprocessASGIServer()  # one per process: the one Prefect's own client starts
    server.start()
    with temporary_settings(updates={PREFECT_API_URL: server.api_url}):
        yield server.api_url
