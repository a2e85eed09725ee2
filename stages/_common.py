"""Shared glue of the stage entry points."""

from __future__ import annotations

import argparse
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Sequence

from kgrag.env import setup, short_errors
from kgrag.io import file_hash, write_json
from kgrag.params import Params, ParamsError, load


def args_and_params(ap: argparse.ArgumentParser, argv: list[str] | None = None) -> tuple[argparse.Namespace, Params]:
    """Add ``--params`` / ``--set`` to a stage's parser, parse, and validate the whole params file (exit 2 on
    invalid params)."""
    setup()
    short_errors()
    ap.add_argument("--params", default="params.yaml", help="params file (default: params.yaml)")
    ap.add_argument("--set", "-S", action="append", default=[], metavar="KEY=VALUE", help="override a param")
    args = ap.parse_args(argv)
    try:
        return args, load(args.params, args.set)
    except ParamsError as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None


def params_from_argv(description: str, argv: list[str] | None = None) -> Params:
    """Parse ``--params`` / ``--set`` and validate the whole params file (exit 2 on invalid params)."""
    return args_and_params(argparse.ArgumentParser(description=description), argv)[1]


@contextmanager
def timed(stage: str, folder: str | Path, extra: dict | None = None, outputs: Sequence[str | Path] = ()):
    """Time the block and write ``<folder>/timing.json`` (seconds, and the hash of each of ``outputs``, the
    files the record describes) when it succeeds. The default DAG's stages pass ``io.TIMINGS / <stage>``, no
    DVC output (``kgrag.timings``)."""
    t0 = time.perf_counter()
    info: dict = dict(extra or {})
    yield info
    info["stage"] = stage
    info["seconds"] = round(time.perf_counter() - t0, 3)
    if outputs:
        info["outputs"] = {Path(p).as_posix(): file_hash(p) for p in outputs}  # read by kgrag.timings
    write_json(Path(folder) / "timing.json", info)
    print(f"[{stage}] done in {info['seconds']:.1f}s", file=sys.stderr)
