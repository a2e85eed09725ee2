"""The memory a process may still take (the stores' budgets read it)."""

from __future__ import annotations

from pathlib import Path


def available_memory() -> int:
    """Bytes of memory available now: the system's (``psutil``: free plus reclaimable cache), or less when a
    cgroup (a container) limits this process."""
    import psutil

    avail = int(psutil.virtual_memory().available)
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        used = int(Path("/sys/fs/cgroup/memory.current").read_text().strip())
        if limit != "max":
            avail = min(avail, max(int(limit) - used, 0))
    except (OSError, ValueError):
        pass
    return avail
