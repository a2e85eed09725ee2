"""Stage synth: a SYNTHETIC KG (typed, power-law degrees) and questions answered by construction → synth.out.

The output folder holds what the params determine only; the stage's run record (seconds, counts, the hash of
each file) goes to ``data/timings/synth/timing.json``, no DVC output (``kgrag.timings``)."""

from __future__ import annotations

from pathlib import Path

from stages._common import params_from_argv, timed
from kgrag import io
from kgrag.kg.synth import write_synth


def main(argv: list[str] | None = None) -> None:
    """Run the stage."""
    p = params_from_argv(__doc__, argv).synth
    files: list[Path] = []  # the files the record describes, hashed when the block ends
    with timed("synth", io.TIMINGS / "synth", outputs=files) as info:
        m = write_synth(**p.model_dump())
        files += [Path(p.out) / f for f in (*m["files"].values(), "manifest.json")]
        info.update(triples=m["triples"], entities=m["entities"], questions=m["questions"], bad_lines=m["bad_lines"],
                    seed=p.seed, synthetic=True)
    print(f"[synth] {info}")


if __name__ == "__main__":
    main()
