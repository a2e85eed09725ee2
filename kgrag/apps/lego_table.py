"""Every LEGO-GraphRAG instance on the same questions: per-module metrics and time (the paper's Figures 1-4,
Tables 4 and 6 on our data), as rows and as a markdown table.

Each preset runs through the pipeline's own retrieval code (``runner.retrieve_rows``) and is scored with the
pipeline's own per-module metrics (``evaluate.stage_metrics``), so the table and a `dvc exp run` of the
same preset agree.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from typing import Any

from kgrag.evaluation.evaluate import percentile, stage_metrics, summarize
from kgrag.retrieval.lego.presets import PRESETS
from kgrag.types import Question

STAGES = ("extract", "prune", "filter", "refine")


def uses_llm(preset: str) -> bool:
    """Whether a preset calls the LLM (an ``llm`` scorer or refiner anywhere in its stages)."""
    return '"llm"' in json.dumps(PRESETS[preset])


def modules_of(preset: str) -> dict[str, str]:
    """``stage -> module`` of a preset (scorers shown as ``scorer`` after their stage's module)."""
    out = {}
    for stage in STAGES:
        spec = PRESETS[preset].get(stage)
        if spec is None:
            out[stage] = "-"
        elif stage == "prune":
            sc = spec["scorer"]
            out[stage] = sc["name"] + ("-ft" if sc.get("params", {}).get("model") else "")
        else:
            sc = spec.get("params", {}).get("scorer")
            name = spec["name"]
            if sc:
                name += f"({sc['name']}{'-ft' if sc.get('params', {}).get('model') else ''})"
            out[stage] = name
    return out


def row_key(*, preset: str, params_json: str, question_ids: Sequence[str], code: str) -> str:
    """Identity of one table row: a finished row with the same key is reused, not recomputed."""
    blob = json.dumps([preset, params_json, list(question_ids), code])
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def instance_row(
    *, preset: str, questions: Sequence[Question], question_rows: Sequence[dict], retrieve: Callable[..., list[dict]],
    params: Any,
) -> dict[str, Any]:
    """Run one preset on ``questions`` and summarise it: final answer recall / hit, triples, time, and each
    module's precision, recall, F1, hit ratio and ms per question.

    References
    ----------
    Cao et al., LEGO-GraphRAG (2024), Figures 1-4 (per-module P / R / F1 / hit ratio), Table 6 (time).
    """
    from kgrag import schema as S
    rows = retrieve(questions=questions, params=params)
    recalls, hits, triples = [], [], []
    answers = {q.question_id: set(q.answer_ids) for q in questions}
    for r in rows:
        trace = json.loads(r[S.TRACE] or "{}")
        recalls.append(trace.get("answer_recall"))
        gold = answers.get(r[S.QUESTION_ID]) or set()
        if gold:
            hits.append(float(bool(gold & set(r[S.NODE_IDS]))))
        triples.append(float(len(r[S.TRIPLE_HEADS])))
    return {
        "preset": preset, "modules": modules_of(preset), "llm": uses_llm(preset), "questions": len(rows),
        "recall": summarize(recalls), "hit": summarize(hits), "triples_mean": summarize(triples),
        "ms_median": percentile([r[S.RETRIEVE_MS] for r in rows], 50),
        "ms_mean": summarize([r[S.RETRIEVE_MS] for r in rows]),
        "stages": stage_metrics(questions=question_rows, retrieved=rows),
    }


def _f(x: Any, nd: int = 3) -> str:
    return "-" if x is None else (f"{x:.{nd}f}" if isinstance(x, float) else str(x))


def render(rows: Sequence[dict], *, title: str, note: str = "") -> str:
    """The instance table (one line per preset) and the per-module table, as markdown."""
    out = [f"# {title}", ""]
    if note:
        out += [note, ""]
    out += ["## Instances (final retrieval output)", "",
            "| instance | extraction | pruning | path filtering | path refinement | questions | answer recall | "
            "hit ratio | triples | median ms / question |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        m = r["modules"]
        out.append(f"| {r['preset']} | {m['extract']} | {m['prune']} | {m['filter']} | {m['refine']} | "
                   f"{r['questions']} | {_f(r['recall'])} | {_f(r['hit'])} | {_f(r['triples_mean'], 1)} | "
                   f"{_f(r['ms_median'], 1)} |")
    out += ["", "## Per module (answer entities in each module's output; median time per question)", "",
            "| instance | stage | module | precision | recall | F1 | hit ratio | nodes | median ms |",
            "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        for s in r["stages"]:
            if s["stage"] == "neighbourhood":
                continue
            out.append(f"| {r['preset']} | {s['stage']} | {s['module']} | {_f(s['precision'])} | {_f(s['recall'])} | "
                       f"{_f(s['f1'])} | {_f(s['hit'])} | {_f(s['nodes_mean'], 1)} | {_f(s.get('ms_median'), 1)} |")
    return "\n".join(out) + "\n"
