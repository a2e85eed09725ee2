"""The task-runner registry and the shared protocol of its modules."""

from __future__ import annotations

from typing import Any, ClassVar, Protocol

from pydantic import BaseModel

from kgrag.registry import TASK_RUNNERS



class TaskRunnerModule(Protocol):
    """Builds the Prefect task runner that a flow's shard tasks are submitted to."""

    #: the shard tasks run in other processes (maybe other machines): they reach the Prefect API by URL and
    #: import ``kgrag`` and ``flows`` themselves
    separate_processes: ClassVar[bool]

    def __init__(self, params: BaseModel) -> None: ...

    def task_runner(self) -> Any:
        """A new ``prefect.task_runners.TaskRunner`` (one per flow run)."""
        ...
