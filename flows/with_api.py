"""Run a command (``dvc repro``, ``dvc exp run``) with one Prefect API for all of its stage processes.

    python -m flows.with_api dvc repro [ARGS...]

Without ``PREFECT_API_URL``, every stage process that runs a flow starts Prefect's temporary server of its own:
12-23 s a stage on a loaded 2-core machine, against 2 s with a running API (docs/testing.md, "Prefect's server
start"). Here that server (Prefect's own ``SubprocessASGIServer``, on this project's Prefect home,
``.kgrag_cache/prefect_home``) starts once, the command runs with ``PREFECT_API_URL`` pointing at it, and the
server stops when the command ends. A ``PREFECT_API_URL`` already set (a real server, a cluster) is used as it is.
The flows run exactly as without it: Prefect stays their runner; only where its API lives changes.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def run_with_api(cmd: list[str], root: str | Path = ".") -> int:
    """Run ``cmd`` with ``PREFECT_API_URL`` set (the configured one, else one temporary server for the whole
    command); its exit code."""
    from kgrag.env import setup

    setup(root)  # Prefect's home under .kgrag_cache, as every stage's
    if os.environ.get("PREFECT_API_URL"):
        return subprocess.call(cmd)
    from flows.runners import shared_api

    with shared_api() as url:
        return subprocess.call(cmd, env={**os.environ, "PREFECT_API_URL": url})


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if argv else 2
    return run_with_api(argv)


if __name__ == "__main__":
    sys.exit(main())
