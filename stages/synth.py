"""Stage synth: a SYNTHETIC KG (typed, power-law degrees) and questions answered by construction → synth.out."""

from __future__ import annotations

from stages._common import params_from_argv, timed
from kgrag.synth import write_synth


def main(argv: list[str] | None = None) -> None:
    """Run the stage."""
    p = params_from_argv(__doc__, argv).synth
    with timed("synth", p.out) as info:
        m = write_synth(**p.model_dump())
        info.update(triples=m["triples"], entities=m["entities"], questions=m["questions"], bad_lines=m["bad_lines"],
                    seed=p.seed, synthetic=True)
    print(f"[synth] {info}")


if __name__ == "__main__":
    main()
