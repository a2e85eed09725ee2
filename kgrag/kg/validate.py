"""Data-quality checks (great-expectations) on ingested tables; failing rows are quarantined with a reason.

Questions that are well-formed but cannot be answered from the KG are not bad rows: they are kept and flagged
``answerable = false`` (``kgrag.schema.ANSWERABLE``), which every metric scores as a miss. That is a question
whose gold answers are not in the KG (or in its own graph), one with no topic entity (no entity linked from its
text, ``data.link_entities``), and one whose given topic entity is not in the KG: the benchmark protocol counts
every question. The last is also written to the quarantine with its reason (a ``kept`` check: the row stays in
its table), its unknown topic ids dropped from the clean table, as a question that links to nothing has none.

great-expectations is imported inside ``validate_tables`` only: it takes seconds to import.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from kgrag import schema as S
@dataclass(frozen=True)
class Check:
    """One expectation on one table: a GX expectation class name and its kwargs."""

    table: str
    expectation: str
    kwargs: dict[str, Any]
    reason: str
    keep_first: bool = False  # for uniqueness: the first copy is valid, later ones are quarantined
    kept: bool = False  # the failing row is recorded in the quarantine but stays (flagged not answerable)


#: the quarantine reason of a question whose given topic entity is not in the KG (kept, scored as a miss)
KEPT_UNKNOWN_TOPIC = "topic entity not in the KG (kept, scored as a miss)"
GRAPH_KEY = "_graph"  # graph_id with null (the global KG) as "": a triple is unique within its graph


#: the derived triples columns that say whether head, tail and relation are known ids (null where the id is null,
#: which the not-null checks count): the id sets stay out of the expectations' configuration, which
#: great-expectations copies value by value on every access (with MetaQA's 43k entity ids as a ``value_set``, the
#: validate stage spent 40 of its 50 s there)
KNOWN = {S.HEAD: "_head_known", S.TAIL: "_tail_known", S.RELATION: "_relation_known"}


def _checks(graphs: bool = False) -> list[Check]:
    triple_key = [S.HEAD, S.RELATION, S.TAIL] + ([GRAPH_KEY] if graphs else [])
    return [
        Check("entities", "ExpectColumnValuesToNotBeNull", {"column": S.ENTITY_ID}, "null entity_id"),
        Check("entities", "ExpectColumnValuesToNotBeNull", {"column": S.NAME}, "null entity name"),
        Check("entities", "ExpectColumnValuesToBeUnique", {"column": S.ENTITY_ID}, "duplicate entity_id", True),
        Check("relations", "ExpectColumnValuesToNotBeNull", {"column": S.RELATION_ID}, "null relation_id"),
        Check("relations", "ExpectColumnValuesToBeUnique", {"column": S.RELATION_ID}, "duplicate relation_id", True),
        Check("triples", "ExpectColumnValuesToNotBeNull", {"column": S.HEAD}, "null head"),
        Check("triples", "ExpectColumnValuesToNotBeNull", {"column": S.TAIL}, "null tail"),
        Check("triples", "ExpectColumnValuesToBeInSet", {"column": KNOWN[S.HEAD], "value_set": [True]},
              "head is not an entity"),
        Check("triples", "ExpectColumnValuesToBeInSet", {"column": KNOWN[S.TAIL], "value_set": [True]},
              "tail is not an entity"),
        Check("triples", "ExpectColumnValuesToBeInSet", {"column": KNOWN[S.RELATION], "value_set": [True]},
              "relation is not a relation"),
        Check("triples", "ExpectCompoundColumnsToBeUnique", {"column_list": triple_key},
              "duplicate triple", True),
        Check("questions", "ExpectColumnValuesToNotBeNull", {"column": S.QUESTION_ID}, "null question_id"),
        Check("questions", "ExpectColumnValuesToBeUnique", {"column": S.QUESTION_ID}, "duplicate question_id", True),
        Check("questions", "ExpectColumnValuesToBeBetween", {"column": "_n_unknown_topics", "max_value": 0},
              KEPT_UNKNOWN_TOPIC, kept=True),
        Check("questions", "ExpectColumnValuesToBeBetween", {"column": "_n_answers", "min_value": 1},
              "no answers"),
        Check("questions", "ExpectColumnValuesToBeBetween", {"column": "_n_answers_not_choices", "max_value": 0},
              "answer is not one of the question's choices"),
    ]


def _graph_nodes(triples: pa.Table) -> dict[str, set[int]]:
    """Per-question graphs: graph id → the entities its triples hold."""
    if S.GRAPH_ID not in triples.column_names:
        return {}
    out: dict[str, set[int]] = {}
    for g, h, t in zip(triples.column(S.GRAPH_ID).to_pylist(), triples.column(S.HEAD).to_pylist(),
                       triples.column(S.TAIL).to_pylist()):
        if g is not None:
            out.setdefault(g, set()).update(x for x in (h, t) if x is not None)
    return out


def _known_question_ids(q: pa.Table, entity_ids: np.ndarray) -> set[int]:
    """The topic and answer ids of ``q`` that are entity ids (membership for the question checks, without a set
    of every entity)."""
    refs = [i for col in (S.TOPIC_IDS, S.ANSWER_IDS) if col in q.column_names
            for ids in q.column(col).to_pylist() for i in (ids or []) if i is not None]
    ids = np.unique(np.asarray(refs, dtype=np.int64))
    return set(ids[np.isin(ids, entity_ids)].tolist())


def _question_frame(q: pa.Table, entity_set: set[int], graphs: dict[str, set[int]] | None = None) -> pd.DataFrame:
    df = q.to_pandas()
    graphs = graphs or {}

    def known(ids):
        return sum(1 for i in (ids if ids is not None else []) if i is not None and i in entity_set)

    df["_n_topics"] = df[S.TOPIC_IDS].map(lambda x: 0 if x is None else len(x))
    df["_n_unknown_topics"] = df["_n_topics"] - df[S.TOPIC_IDS].map(known)
    df["_n_answers"] = df[S.ANSWERS].map(lambda x: 0 if x is None else len(x))
    # a label task's answers are labels (``choices``), not KG entities: they are checked against the choices
    choices = df[S.CHOICES] if S.CHOICES in df else pd.Series([None] * len(df), index=df.index, dtype=object)
    labelled = choices.map(lambda c: c is not None and len(c) > 0)
    # answerable: a gold answer entity is in the KG, and in the question's own graph when it has one (a
    # question that is not is kept and scored as a miss; it is no bad row)
    graph = df[S.GRAPH_ID] if S.GRAPH_ID in df else pd.Series([None] * len(df), index=df.index, dtype=object)
    in_graph = [
        any(i is not None and i in entity_set and (not isinstance(g, str) or i in graphs.get(g, set()))
            for i in (ids if ids is not None else []))
        for ids, g in zip(df[S.ANSWER_IDS], graph)]
    # a question with no topic entity (its linking found none: ``data.link_entities``) is kept, not answerable: the
    # benchmark protocol counts it, a miss, instead of dropping it from the denominator
    # so is one whose given topic entity is not in the KG (a miss as well, not a smaller denominator)
    df["_has_topic"] = (df["_n_topics"] > 0) | labelled
    df["_answerable"] = ((pd.Series(in_graph, index=df.index) | labelled) & df["_has_topic"]
                         & (df["_n_unknown_topics"] == 0))
    df["_n_answers_not_choices"] = [
        sum(1 for a in (ans if ans is not None else []) if a not in set(c)) if lab else 0
        for ans, c, lab in zip(df[S.ANSWERS], choices, labelled)]
    return df


@dataclass(frozen=True)
class ValidationResult:
    """Clean tables, quarantined rows and a per-table / per-check summary."""

    tables: dict[str, pa.Table]
    quarantine: pa.Table
    summary: dict[str, Any]


def validate_tables(tables: dict[str, pa.Table]) -> ValidationResult:
    """Run the checks with great-expectations; bad rows leave their table for the quarantine."""
    import great_expectations as gx

    # ids as arrays, not Python lists or sets: at 10^7-10^8 triples those took gigabytes
    entity_ids = tables["entities"].column(S.ENTITY_ID).drop_null().to_numpy().astype(np.int64)
    relation_ids = tables["relations"].column(S.RELATION_ID).drop_null().to_numpy().astype(np.int64)
    known_refs = _known_question_ids(tables["questions"], entity_ids)  # the questions' ids that are entities
    frames = {n: t.to_pandas() for n, t in tables.items() if n != "questions"}
    frames["questions"] = _question_frame(tables["questions"], known_refs, _graph_nodes(tables["triples"]))
    graphs = S.GRAPH_ID in tables["triples"].column_names
    if graphs:
        frames["triples"][GRAPH_KEY] = frames["triples"][S.GRAPH_ID].fillna("")
    triples = frames["triples"]
    for col, ids in ((S.HEAD, entity_ids), (S.TAIL, entity_ids), (S.RELATION, relation_ids)):
        known = triples[col].isin(ids).astype("boolean")
        known[triples[col].isna()] = pd.NA  # a null id is the not-null check's row, as GX skips nulls in a set check
        triples[KNOWN[col]] = known

    from great_expectations.data_context.types.base import ProgressBarsConfig

    ctx = gx.get_context(mode="ephemeral")
    ctx.variables.progress_bars = ProgressBarsConfig(globally=False)
    source = ctx.data_sources.add_pandas("kgrag")
    bad: dict[str, dict[int, list[str]]] = {n: {} for n in frames}
    kept: dict[str, dict[int, list[str]]] = {n: {} for n in frames}  # recorded, not removed
    checks_out = []
    for check in _checks(graphs):
        df = frames[check.table]
        batch = (
            source.add_dataframe_asset(f"{check.table}-{len(checks_out)}")
            .add_batch_definition_whole_dataframe("all")
            .get_batch(batch_parameters={"dataframe": df})
        )
        exp = getattr(gx.expectations, check.expectation)(**check.kwargs)
        res = batch.validate(exp, result_format={"result_format": "COMPLETE"})
        idx = list((res.result or {}).get("unexpected_index_list") or [])
        rows = [int(i) if not isinstance(i, dict) else int(next(iter(i.values()))) for i in idx]
        if check.keep_first and rows:
            cols = check.kwargs.get("column_list") or [check.kwargs["column"]]
            dup = df.duplicated(subset=cols, keep="first")
            rows = [r for r in rows if dup.iloc[r]]
        for r in rows:
            (kept if check.kept else bad)[check.table].setdefault(r, []).append(check.reason)
        checks_out.append(
            {"table": check.table, "expectation": check.expectation, "success": bool(res.success),
             "reason": check.reason, "bad_rows": len(rows), **({"kept": True} if check.kept else {})}
        )

    qrows: list[dict[str, Any]] = []
    clean: dict[str, pa.Table] = {}
    summary: dict[str, Any] = {"tables": {}, "checks": checks_out}
    for name, df in frames.items():
        bad_idx = sorted(bad[name])
        for r in sorted(set(bad[name]) | set(kept[name])):
            rec = {k: v for k, v in tables[name].slice(r, 1).to_pylist()[0].items()}
            qrows.append({S.TABLE: name, S.ROW: r, S.REASON: "; ".join(bad[name].get(r, []) + kept[name].get(r, [])),
                          S.RECORD: json.dumps(rec, default=str)[:2000]})
        keep = np.ones(len(df), dtype=bool)
        keep[np.fromiter(bad[name], dtype=np.int64, count=len(bad[name]))] = False
        mask = pa.array(keep)
        clean[name] = tables[name].filter(mask)
        if name == "questions" and kept[name]:  # unknown topic ids leave the kept rows (as if none was linked)
            topics = [[i for i in (t or []) if i is not None and i in known_refs] if r in kept[name] else t
                      for r, t in enumerate(tables[name].column(S.TOPIC_IDS).to_pylist())]
            col = clean[name].schema.get_field_index(S.TOPIC_IDS)
            clean[name] = clean[name].set_column(col, clean[name].schema.field(col),
                                                 pa.array(topics, type=clean[name].schema.field(col).type).filter(mask))
        if name == "questions":
            flag = pa.array(df["_answerable"].astype(bool).tolist(), type=pa.bool_()).filter(mask)
            if S.ANSWERABLE in clean[name].column_names:  # validated before: checked again
                clean[name] = clean[name].drop_columns([S.ANSWERABLE])
            clean[name] = clean[name].append_column(S.ANSWERABLE, flag)
            no_topic = pa.array((~df["_has_topic"]).tolist(), type=pa.bool_()).filter(mask)
            summary["answerable"] = {"questions": clean[name].num_rows,
                                     "not_answerable": int(clean[name].num_rows - sum(flag.to_pylist())),
                                     "no_topic": int(sum(no_topic.to_pylist()))}
        summary["tables"][name] = {"rows": len(df), "bad": len(bad_idx),
                                   "bad_fraction": (len(bad_idx) / len(df)) if len(df) else 0.0}
    quarantine = pa.Table.from_pylist(qrows, schema=S.QUARANTINE)
    return ValidationResult(clean, quarantine, summary)


def reason_counts(quarantines: dict[str, pa.Table]) -> list[dict]:
    """Quarantined rows per (stage, reason), most frequent first: what the validate summary and the report show."""
    from collections import Counter

    out = []
    for stage, table in quarantines.items():
        for reason, n in Counter(table.column(S.REASON).to_pylist()).items():
            out.append({"stage": stage, "reason": reason, "rows": n})
    return sorted(out, key=lambda r: (-r["rows"], r["stage"], r["reason"]))
