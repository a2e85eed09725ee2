"""The held-out labelled questions a stage may train on (the relation-path plan, the tuned LLM), leak-guarded.

One rule for every training stage: ``relplan.file`` read by the experiment's loader when given, else the loader's
held-out part (MetaQA's ``relplan.split`` files of each ``relplan.hops``, an IRN file's seeded ``relplan.split``
part), else none; then the leak guard (:mod:`kgrag.kg.overlap`) against the evaluated questions
(``data/validated/questions.parquet``): a copy or superset stops the stage, a benchmark's own repeats are left out
and counted in the note.
"""

from __future__ import annotations

from pathlib import Path

from kgrag import io, schema as S
from kgrag.kg.overlap import guard
from kgrag.kg.store import questions_on
from kgrag.registry import LOADERS


def held_out_questions(params, kg, *, evaluated: str | Path, what: str, split: str | None = None) -> tuple[list, str]:
    """(questions with their answers, a note of where they came from and what the guard left out); raises
    ``kgrag.kg.overlap.LeakError`` when they hold the evaluated questions (``evaluated``: the validated questions
    file). ``what`` names the stage in the error. ``split``: the loader's own split of that name instead (a loader
    with a ``split`` param, e.g. ExplaGraphs' train file for the tune stage)."""
    p, d = params.relplan, params.data
    lp = d.loader_params()
    qs: list = []
    if split is not None:
        if "split" not in type(lp).model_fields or getattr(lp, "split", None) == split:
            raise ValueError(f"{what}: split {split!r}: the {d.dataset} loader has no other split of that name "
                             "(or it is the evaluated one)")
        tabs = LOADERS.get(d.dataset).impl(**{**lp.model_dump(), "split": split, "sample": p.questions, "seed": p.seed})
        qs = questions_on(kg, tabs)
        note = f"{d.dataset} {split} split"
    elif p.file is not None:  # the user's labelled questions over the same KG, read by the same loader
        tabs = LOADERS.get(d.dataset).impl(**{**lp.model_dump(), "questions": p.file, "sample": p.questions,
                                              "seed": p.seed})
        note = f"from {p.file}"
        if tabs.quarantine.num_rows:
            note += f" ({tabs.quarantine.num_rows} lines of the KG or the file quarantined by the loader)"
        qs = questions_on(kg, tabs)  # ids of the loader's own numbering -> the validated KG's, by name
    elif getattr(type(lp), "SPLITS_ARE_DISJOINT", False) and "split" in type(lp).model_fields:
        # the loader's held-out part: MetaQA's split files (each hop count's), IRN's seeded dev part
        for hops in (p.hops if "hops" in type(lp).model_fields else [None]):
            extra = {"hops": hops} if hops is not None else {}
            tabs = LOADERS.get(d.dataset).impl(**{**lp.model_dump(), **extra, "split": p.split,
                                                  "sample": p.questions, "seed": p.seed})
            qs += questions_on(kg, tabs)
        note = f"{d.dataset} {p.split} split"
    else:
        return [], (f"the {d.dataset} loader has no held-out question files and relplan.file is not set "
                    "(docs/retrieval.md)")
    ev = io.read_parquet(evaluated).select([S.QUESTION_ID, S.TEXT])
    keep, leak = guard(train_ids=[q.question_id for q in qs], train_texts=[q.text for q in qs],
                       eval_ids=ev[S.QUESTION_ID].to_pylist(), eval_texts=ev[S.TEXT].to_pylist(),
                       what=f"{what} ({note})")
    if leak["left_out_same_text"]:
        note += f" ({leak['left_out_same_text']} with an evaluated question's text left out)"
    return [q for q, k in zip(qs, keep) if k], note
