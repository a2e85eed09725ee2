"""What every benchmark records about the machine it ran on."""

from __future__ import annotations

from kgrag.versioning import machine  # noqa: F401 (re-exported for the bench scripts)


def write_result(path: str, result: dict) -> None:
    """Write a benchmark's JSON (keys sorted) and say where."""
    import json
    from pathlib import Path

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    print(f"wrote {path}")
