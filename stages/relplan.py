"""Stage relplan: the relpath retriever's relation-path plan, from held-out labelled questions or the KG alone."""

from __future__ import annotations

import shutil
import sys
from dataclasses import replace

import numpy as np

from stages._common import params_from_argv, timed
from kgrag import io, timings
from kgrag.index.embed import encode
from kgrag.index.pseudo import fit_for_kg
from kgrag.index.zeroshot import Weights
from kgrag.experiment import Experiment, Files, own_graphs_experiment
from kgrag.index.relplan import PlanModel, cached_vectors, mirror_pairs, question_vectors, train_plan
from kgrag.kg.heldout import held_out_split
from kgrag.kg.overlap import LeakError
from kgrag.kg.store import KGStore, StoreTooBig, check_memory, resolve_store


def zero_shot_labeller(kg, index, folder, questions=()):
    """``label(question)``: the relation sequence the zero-shot relpath retriever (its default params, the KG's
    mirrors in the plan written to ``folder``, no vote) chooses for a question over ``kg`` (with its ``index``),
    as (relation name, forward) steps; None when it finds none. The texts of ``questions`` are encoded up front in
    one batched call, as the retrieve stage encodes a shard's (one call a question took 30 of relplan's 44 s on
    WorldCup2014's 677 dev questions)."""
    from kgrag.retrieval.retrievers.relpath import RelPathParams, retrieve_relpath

    rpp = RelPathParams(plan=str(folder), paths=1, fallback=None, base="lexical")
    texts = list(dict.fromkeys(q.text for q in questions))
    vecs = dict(zip(texts, index.encode(texts))) if texts else {}

    def label(q):
        qv = vecs[q.text] if q.text in vecs else index.encode([q.text])[0]
        sub = retrieve_relpath(question=q, query_vec=qv, kg=kg, index=index, params=rpp, hops=0, max_edges=0)
        rels, dirs = sub.trace.get("relations") or [], sub.trace.get("directions") or []
        return tuple((r, bool(f)) for r, f in zip(rels[0], dirs[0])) if rels else None

    return label


def _wordnet_links(on: bool):
    """relplan.wordnet's matcher and a note: (None, "") when off; (None, why) where WordNet's files are missing:
    the plan then matches words without them, and plan.json ``wordnet_note`` says so."""
    if not on:
        return None, ""
    from kgrag.index.zeroshot import default_wordnet_matcher

    try:
        return default_wordnet_matcher(), ""
    except FileNotFoundError as e:
        return None, f"relplan.wordnet: off for this plan: {e}"


def main(argv: list[str] | None = None) -> None:
    """Run the stage."""
    params = params_from_argv(__doc__, argv)
    p = params.relplan
    out = io.RELPLAN
    db = io.VALIDATED / "kg.duckdb"
    # a KG that fits the memory budget (retrieve.memory_budget_gb) is walked in memory, as always; one over it is
    # read through the DuckDB store (as retrieve.store: auto resolves it), where the mirrors and the zero-shot
    # labeller (source kg) run alike. Labels from labelled questions walk every sequence to their answers in
    # memory: source labelled stops over the budget, and auto falls back to kg there
    try:
        check_memory(db, params.retrieve.memory_budget_gb, "relplan.source: labelled")
        too_big = None
    except StoreTooBig as e:
        too_big = e
    if too_big is not None and p.source == "labelled":
        raise SystemExit(f"error: {too_big}\nOr: relplan.source: kg (the plan from the KG alone runs on the DuckDB "
                         "store).")
    if too_big is not None:
        params = resolve_store(params, db)  # auto -> duckdb; store: memory stops here with its short error
    with timed("relplan", timings.stage_dir("relplan"), outputs=[out / "plan.parquet"]) as info:
        exp = Experiment(params, Files.of())
        kg = KGStore(db) if too_big is None else exp.kg
        log = lambda s: print(f"[relplan] {s}", file=sys.stderr)  # noqa: E731
        try:  # the leak guard inside: no evaluated question (by id or by text) trains the plan
            own, qs, note = (held_out_split(params, kg, evaluated=io.VALIDATED / "questions.parquet", what="relplan")
                             if p.source != "none" else (None, [], "relplan.source: none"))
        except LeakError as e:
            raise SystemExit(f"relplan: {e}") from None
        source = p.source
        if source == "auto":
            source = "labelled" if any(q.answer_ids for q in qs) else "kg"
        if source == "labelled" and too_big is not None:  # auto found labelled questions: not walked here
            note = f"{note}: labelled questions, but the KG is over the memory budget, so their texts only"
            source = "kg"
        if source == "labelled" and not any(q.answer_ids for q in qs):
            raise SystemExit(f"relplan: source labelled, but there are no labelled questions ({note}); give "
                             "relplan.file, or set relplan.source: kg (the plan from the KG alone)")
        # the KG the held-out questions are labelled on: the evaluated one, or (questions that bring their own
        # graphs, e.g. a RoG-format relplan.file) a store of their graphs, with an index where the zero-shot
        # labeller needs one; relation names are shared, ids are not
        train = exp if own is None else own_graphs_experiment(exp, own, io.CACHE / "relplan", log=log,
                                                               with_index=source == "kg")
        train_kg = kg if own is None else train.kg
        encoder = lambda t: encode(t, model=params.index.model)  # noqa: E731
        # the plan's question vectors go through the vector cache, where retrieve reads them by text (a packaged
        # model: not in the stage's output, whose bytes must not depend on the processor's kernels)
        plan_encoder = ((lambda t: question_vectors(params.index.model, t)) if cached_vectors(params.index.model)
                        else encoder)
        shutil.rmtree(out, ignore_errors=True)
        pairs = mirror_pairs(kg)
        train_mirrors = pairs if train_kg is kg else None  # train_plan's mirrors: these, unless it walks other graphs
        mirrors = sorted(pairs)
        # source kg: the zero-shot planner's weights fitted on the KG's own pseudo-questions (relplan.pseudo)
        # the plan's weights: fitted on the pseudo-questions, else relplan.base_weights, else None (the shipped ones)
        base = Weights(**p.base_weights) if p.base_weights else None
        weights, fit = base, {}
        links, links_note = _wordnet_links(p.wordnet)
        if links_note:
            log(links_note)
        if source == "kg" and p.pseudo:
            # the index's model embeds the phrases; its entity vectors, where the index stage wrote any, as relpath
            ent = getattr(exp.index, "entity_vectors", None) if own is None else None
            weights, fit = fit_for_kg(kg, encoder, pairs, [q.topic_ids for q in qs], p.pseudo, p.seed,
                                      entity_vectors=ent, over_budget=too_big is not None, own_graphs=own is not None,
                                      types=p.pseudo_types, prior=p.pseudo_prior, wordnet=links, base=base)
            weights = weights or base
            log(f"weights fitted on {fit['pseudo_questions']} pseudo-questions of the KG: {fit.get('weights')}"
                if fit.get("weights") is not None else f"pseudo-questions: {fit['pseudo_note']}")
        if links_note:  # plan.json says why the plan matches words without WordNet
            fit = {**fit, "wordnet_note": links_note}
        # the KG's mirrored relations alone: the plan of source none, and the walk of the kg labeller
        PlanModel(model=params.index.model, texts=[], hops=np.zeros(0, np.int64), labels=[],
                  vectors=np.zeros((0, 1), np.float32), mirrors=tuple(mirrors),
                  mirror_of=tuple(sorted(pairs.items())), weights=weights, wordnet=links is not None).save(
            out, {"source": "none", "note": note, "labelled": 0, "mirrored_relations": mirrors, **fit})
        stats: dict = {"mirrored_relations": mirrors, "labelled": 0, **fit}
        if source == "labelled":
            model, stats = train_plan(kg=train_kg, questions=qs, encode=plan_encoder, model=params.index.model, log=log,
                                      mirror_of=train_mirrors)
            replace(model, weights=weights, wordnet=links is not None).save(
                out, {**stats, **fit, "source": source, "note": note, "split": p.split, "seed": p.seed})
        elif source == "kg" and qs:
            # texts and topics only: no answer, and no declared hop count (the zero-shot planner chooses the length)
            unlabelled = [replace(q, answer_ids=(), answers=(), hops=None) for q in qs]
            model, stats = train_plan(kg=train_kg, questions=unlabelled, encode=plan_encoder, model=params.index.model,
                                      log=log, label=zero_shot_labeller(train_kg, train.index, out, unlabelled),
                                      mirror_of=train_mirrors)
            note = f"{note}: texts only, labelled by the zero-shot planner"
            stats = {**stats, **fit}
            replace(model, weights=weights, wordnet=links is not None).save(
                out, {**stats, "source": source, "note": note, "split": p.split, "seed": p.seed})
        elif source == "kg":
            PlanModel.load(out).save(out, {"source": source, "note": f"{note}: the zero-shot planner alone",
                                           "labelled": 0, "mirrored_relations": mirrors, **fit})
        print(f"[relplan] source {source}: {stats}", file=sys.stderr)
        info.update({**stats, "source": source})


if __name__ == "__main__":
    main()
