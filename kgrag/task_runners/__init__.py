"""Prefect task runners by name: where the retrieve and generate flows run their shard tasks.

Each runner is one file registered in ``TASK_RUNNERS`` (``cluster.task_runner`` picks one, its sub-section
``cluster.<name>`` holds its params). A runner is a class ``Runner(params)`` implementing ``TaskRunnerModule``;
Prefect and the cluster libraries are imported only when a runner is built, so params validation stays light.
"""

from kgrag.task_runners.core import TASK_RUNNERS, TaskRunnerModule  # noqa: F401
