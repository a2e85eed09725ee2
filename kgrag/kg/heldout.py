"""The held-out labelled questions a stage may train on (the relation-path plan, the tuned LLM), leak-guarded.

One rule for every training stage: ``relplan.file`` read by the experiment's loader when given, else the loader's
held-out part (MetaQA's ``relplan.split`` files of each ``relplan.hops``, an IRN file's seeded ``relplan.split``
part), else none; then the leak guard (:mod:`kgrag.kg.overlap`) against the evaluated questions
(``data/validated/questions.parquet``): a copy or superset stops the stage, a benchmark's own repeats are left out
and counted in the note.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kgrag import io, schema as S
from kgrag.kg.overlap import guard
from kgrag.kg.store import questions_from_table, questions_on
from kgrag.registry import LOADERS


def held_out_split(params, kg, *, evaluated: str | Path, what: str, split: str | None = None) -> tuple[Any, list, str]:
    """The held-out questions, read once: the loader's split ``split`` (e.g. ExplaGraphs' train file for the tune
    stage), or with ``split`` None ``relplan.file``, else the loader's held-out part. Returns (their tables when the
    questions bring their own graphs, else None; the questions with their answers, less those the leak guard
    leaves out; a note of where they came from and what the guard left out). Raises
    ``kgrag.kg.overlap.LeakError`` when they hold the evaluated questions (``evaluated``: the validated questions
    file); ``what`` names the stage in the error.

    Questions with their own graphs (ExplaGraphs' train file, a RoG-format ``relplan.file``) keep the tables' own
    ids: those graphs are not in the evaluated KG, so a training stage builds a store of the tables
    (``kgrag.experiment.own_graphs_experiment``). Others are mapped onto ``kg``'s ids by name."""
    tables, note = _held_out_tables(params, what, split)
    if len(tables) == 1 and brings_graphs(tables[0]):
        own = tables[0]
        return own, *_guarded(questions_from_table(own.questions, declared_hops=True), note, evaluated=evaluated,
                              what=what)
    return None, *_guarded([q for tabs in tables for q in questions_on(kg, tabs)], note, evaluated=evaluated,
                           what=what)


def brings_graphs(tables) -> bool:
    """Whether a loader's tables are per-question graphs (triples carrying a ``graph_id``)."""
    t = tables.triples
    return S.GRAPH_ID in t.column_names and t[S.GRAPH_ID].null_count < t.num_rows


def _held_out_tables(params, what: str, split: str | None) -> tuple[list, str]:
    """The loader's tables of the held-out questions (one per file read) and where they came from; [] and the
    reason when there are none."""
    p, d = params.relplan, params.data
    lp = d.loader_params()
    if split is not None:
        if "split" not in type(lp).model_fields or getattr(lp, "split", None) == split:
            raise ValueError(f"{what}: split {split!r}: the {d.dataset} loader has no other split of that name "
                             "(or it is the evaluated one)")
        return ([LOADERS.get(d.dataset).impl(**{**lp.model_dump(), "split": split, "sample": p.questions,
                                                "seed": p.seed})], f"{d.dataset} {split} split")
    if p.file is not None:  # the user's labelled questions over the same KG, read by the same loader
        # read through the loader's questions file param (validated params: it has one)
        kw = {**lp.model_dump(), d.questions_file_field(): p.file, "sample": p.file_questions, "seed": p.seed}
        if getattr(type(lp), "SPLITS_ARE_DISJOINT", False) and "split" in type(lp).model_fields:
            kw["split"] = "all"  # the user's file whole, not the part of it that the evaluated split's seed picks
        tabs = LOADERS.get(d.dataset).impl(**kw)
        note = f"from {p.file}"
        if tabs.quarantine.num_rows:
            note += f" ({tabs.quarantine.num_rows} lines of the KG or the file quarantined by the loader)"
        return [tabs], note
    if getattr(type(lp), "SPLITS_ARE_DISJOINT", False) and "split" in type(lp).model_fields:
        # the loader's held-out part: MetaQA's split files (each hop count's), IRN's seeded dev part
        out = []
        for hops in (p.hops if "hops" in type(lp).model_fields else [None]):
            extra = {"hops": hops} if hops is not None else {}
            # per hop count's file: relplan.questions (MetaQA); one file's part: every one (file_questions)
            out.append(LOADERS.get(d.dataset).impl(**{**lp.model_dump(), **extra, "split": p.split,
                                                      "sample": p.questions if extra else p.file_questions,
                                                      "seed": p.seed}))
        return out, f"{d.dataset} {p.split} split"
    return [], (f"the {d.dataset} loader has no held-out question files and relplan.file is not set "
                "(docs/retrieval.md)")


def _guarded(qs: list, note: str, *, evaluated: str | Path, what: str) -> tuple[list, str]:
    """``qs`` less those the leak guard leaves out (an evaluated question's text), and the note saying so;
    raises ``LeakError`` on a copy or superset of the evaluated questions."""
    if not qs:
        return [], note
    ev = io.read_parquet(evaluated).select([S.QUESTION_ID, S.TEXT])
    keep, leak = guard(train_ids=[q.question_id for q in qs], train_texts=[q.text for q in qs],
                       eval_ids=ev[S.QUESTION_ID].to_pylist(), eval_texts=ev[S.TEXT].to_pylist(),
                       what=f"{what} ({note})")
    if leak["left_out_same_text"]:
        note += f" ({leak['left_out_same_text']} with an evaluated question's text left out)"
    return [q for q, k in zip(qs, keep) if k], note
