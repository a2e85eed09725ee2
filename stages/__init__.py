"""DVC stage entry points: read params, do I/O, call kgrag. Run as ``python -m stages.<name>``."""

import sys as _sys

try:  # the stage commands in dvc.yaml call `python`: it must be the project's environment
    import pyarrow  # noqa: F401
    import kgrag  # noqa: F401
except ModuleNotFoundError as _e:
    raise SystemExit(
        f"error: {_sys.executable} lacks the project's packages ({_e.name}). The stage commands run the `python` on "
        "PATH: run `make install`, then `source .venv/bin/activate` (or use `make repro`, which puts .venv/bin on "
        "PATH itself)."
    ) from None
