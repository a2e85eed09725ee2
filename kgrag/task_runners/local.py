"""``local``: the shard tasks one after another in a thread of the stage's own process (the default)."""

from __future__ import annotations

from typing import Any, ClassVar

from kgrag.registry import NoParams
from kgrag.task_runners.core import TASK_RUNNERS


@TASK_RUNNERS.register("local", params=NoParams)
class LocalRunner:
    """One shard at a time in this process: the in-process LLM (llama.cpp) is not thread-safe."""

    separate_processes: ClassVar[bool] = False

    def __init__(self, params: NoParams) -> None:
        self.params = params

    def task_runner(self) -> Any:
        """Prefect's thread pool with one thread."""
        from prefect.task_runners import ThreadPoolTaskRunner

        return ThreadPoolTaskRunner(max_workers=1)
