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


def timed_run(cmd: list[str], **kwargs):
    """``cmd`` under ``/usr/bin/time``: (the completed process, wall seconds, peak RSS in KiB); the two figures are
    None when the process failed or printed no time line (the caller reports ``p.stderr``'s tail)."""
    import subprocess

    p = subprocess.run(["/usr/bin/time", "-f", "KGRAG_TIME %e %M", *cmd], capture_output=True, text=True, **kwargs)
    line = next((x for x in p.stderr.splitlines()[::-1] if x.startswith("KGRAG_TIME")), None)
    if p.returncode != 0 or line is None:
        return p, None, None
    _, wall, rss_kib = line.split()
    return p, float(wall), int(rss_kib)
