"""What every benchmark records about the machine it ran on (see ``bench/_machine.py``)."""

from __future__ import annotations

from bench import _machine
from kgrag.code.versioning import machine  # noqa: F401 (re-exported for the bench scripts)

_machine.start()  # the load average before the bench: importing this module is the bench's first step


def write_result(path: str, result: dict) -> None:
    """Write a benchmark's JSON (keys sorted, with machine info, load before/after and the load warning)."""
    import json
    from pathlib import Path

    result = _machine.finish(result)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    print(f"wrote {path}")
