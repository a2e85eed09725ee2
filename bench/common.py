"""What every benchmark records about the machine it ran on."""

from __future__ import annotations

import os
import platform


def machine() -> dict:
    """Where the numbers were taken."""
    cpu = ""
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"cpu": cpu or platform.processor(), "cores": os.cpu_count(), "python": platform.python_version(),
            "platform": platform.platform()}


def write_result(path: str, result: dict) -> None:
    """Write a benchmark's JSON (keys sorted) and say where."""
    import json
    from pathlib import Path

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    print(f"wrote {path}")
