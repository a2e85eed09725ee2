"""Stage relplan: learn the relpath retriever's relation-path plan from a held-out question split."""

from __future__ import annotations

import shutil
import sys

from stages._common import params_from_argv, timed
from kgrag import io, timings
from kgrag.index.embed import encode
from kgrag.registry import LOADERS
from kgrag.index.relplan import train_plan
from kgrag.kg.store import KGStore, questions_on


def main(argv: list[str] | None = None) -> None:
    """Run the stage."""
    params = params_from_argv(__doc__, argv)
    p, d = params.relplan, params.data
    out = io.RELPLAN
    with timed("relplan", timings.stage_dir("relplan"), outputs=[out / "plan.parquet"]) as info:
        kg = KGStore(io.VALIDATED / "kg.duckdb")
        lp = d.loader_params()
        qs, note = [], ""
        if p.file is not None:  # the user's labelled questions over the same KG, read by the same loader
            tabs = LOADERS.get(d.dataset).impl(**{**lp.model_dump(), "questions": p.file, "sample": p.questions,
                                                  "seed": p.seed})
            qs = questions_on(kg, tabs)  # ids of the loader's own numbering -> the validated KG's, by name
            note = f"from {p.file}"
            if tabs.quarantine.num_rows:
                note += f" ({tabs.quarantine.num_rows} lines of the KG or the file quarantined by the loader)"
        elif getattr(type(lp), "SPLITS_ARE_DISJOINT", False) and "hops" in type(lp).model_fields:
            for hops in p.hops:
                tabs = LOADERS.get(d.dataset).impl(**{**lp.model_dump(), "hops": hops, "split": p.split,
                                                      "sample": p.questions, "seed": p.seed})
                qs += questions_on(kg, tabs)
        else:  # nothing held out (or no hop counts) to learn from: an empty plan, relpath then votes nothing
            note = (f"not trained: the {d.dataset} loader has no held-out k-hop question files; give a labelled "
                    "questions file of yours: relplan.file (docs/retrieval.md)")
            print(f"[relplan] {note}", file=sys.stderr)
        model, stats = train_plan(kg=kg, questions=qs, encode=lambda t: encode(t, model=params.index.model),
                                  model=params.index.model, log=lambda s: print(f"[relplan] {s}", file=sys.stderr))
        shutil.rmtree(out, ignore_errors=True)
        model.save(out, {**stats, "note": note, "split": p.split, "seed": p.seed})
        print(f"[relplan] {stats}", file=sys.stderr)
        info.update(stats)


if __name__ == "__main__":
    main()
