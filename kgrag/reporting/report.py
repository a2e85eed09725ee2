"""The human-readable report: metrics table, per-question-type breakdown, examples, reasoner traces, a figure."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Sequence

import numpy as np

from kgrag.timings import RUN_KEYS, call_runs


def names() -> dict[str, str]:
    """The report's metric rows: each ``reports/metrics.json`` key with the name its metric declares
    (``kgrag.evaluation.metrics.metric_keys``: a newly registered metric shows up without editing this module)."""
    from kgrag.evaluation.metrics import metric_keys

    return {k: v.name for k, v in metric_keys().items()}


def timing_names() -> dict[str, str]:
    """The run-record rows (reports/timings.json, ``kgrag.timings.RUN_KEYS``): what this run took, not what it
    found."""
    return {k: v.name for k, v in RUN_KEYS.items()}


def _fmt(v, spec: str | None = None) -> str:
    """A value for a table cell; ``spec`` is the metric's declared format (``MetricKey.fmt``)."""
    if v is None:
        return "–"
    if spec and isinstance(v, (int, float)) and not isinstance(v, bool):
        if spec == "d":
            return f"{int(v):,d}" if float(v).is_integer() else f"{v:.3f}"
        return f"{v:{spec}}" if abs(v) < 100 else f"{v:,.0f}"
    if isinstance(v, float):
        return f"{v:.3f}" if abs(v) < 100 else f"{v:,.0f}"
    return str(v)


def _cell(text: str) -> str:
    """Text for a markdown table cell: its ``|`` escaped (rouge_l's label names the ' | ' separator)."""
    return text.replace("|", "\\|")


def figure_recall_vs_context(rows: Sequence[dict], path: str | Path) -> None:
    """Scatter of retrieval answer recall against context size, coloured by Hit."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = np.array([r["context_triples"] for r in rows], dtype=float)
    y = np.array([np.nan if r["retrieval_recall"] is None else r["retrieval_recall"] for r in rows])
    hit = np.array([r["hit_any"] for r in rows]) > 0
    rng = np.random.default_rng(0)
    jitter = rng.uniform(-0.015, 0.015, size=len(y))
    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=120)
    ax.scatter(x[~hit], y[~hit] + jitter[~hit], s=14, alpha=0.6, label="answer missed (Hit = 0)", color="#999999")
    ax.scatter(x[hit], y[hit] + jitter[hit], s=14, alpha=0.8, label="answer hit (Hit = 1)", color="#d62728")
    ax.set_xscale("symlog", linthresh=1)
    ax.set_xlabel("retrieved triples (context size, log scale)")
    ax.set_ylabel("retrieval answer recall")
    ax.set_ylim(-0.05, 1.05)
    ax.set_title("Is the answer retrieved, and does the LLM find it?", fontsize=10)
    ax.legend(loc="lower right", fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def _short(value, limit: int) -> str:
    """One line of at most ``limit`` characters for a table cell (JSON for structures)."""
    text = value if isinstance(value, str) else json.dumps(value, default=str, ensure_ascii=False)
    text = " ".join(text.split()).replace("|", "\\|")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _yes(v) -> str:
    return "–" if v is None else ("yes" if v else "no")


def render_trace(row: dict, *, limit: int = 300) -> list[str]:
    """Markdown lines of one question's reasoner trace: its steps (chains, communities, actions, thoughts,
    whatever the reasoner recorded) and every LLM call with its reply."""
    try:
        trace = json.loads(row.get("trace") or "{}")
    except json.JSONDecodeError:
        trace = {"unreadable trace": row.get("trace")}
    calls = trace.pop("calls", [])
    runs = call_runs(row)  # cached / attempts per call: run records, when joined
    out = [f"**{row['question']}** — reasoner `{row.get('reasoner')}`, depth {row.get('depth')}, "
           f"{len(calls)} LLM calls; prediction `{_short(row.get('prediction') or '', 120)}`; "
           f"gold {_short(' | '.join(row.get('gold') or []), 120)}", ""]
    if trace:
        out += ["| step | recorded |", "|---|---|"]
        out += [f"| {k} | {_short(v, limit)} |" for k, v in trace.items()]
        out.append("")
    if calls:
        out += ["| call | key | tokens in / out | cached | attempts | reply or error |", "|---|---|---|---|---|---|"]
        for i, c in enumerate(calls, 1):
            said = c.get("error") or c.get("reply") or ""
            cached, attempts = runs[i - 1] if i <= len(runs) else (None, None)
            out.append(f"| {i} | `{c.get('key')}` | {c.get('tokens_in')} / {c.get('tokens_out')} | "
                       f"{_yes(cached)} | {'–' if attempts is None else attempts} | {_short(said, 160)} |")
        out.append("")
    return out


def by_hops_table(metrics: dict) -> list[str]:
    """Markdown lines of the ``baselines`` metric's ``by_hops`` (a question set mixing declared hop counts): per
    hop count, Hit@1 and F1 beside the no-LLM baselines and the lift; no lines for a single hop count."""
    by = metrics.get("by_hops") or {}
    if not by:
        return []
    out = ["", "## By hop count (no-LLM baselines beside the answer)", "",
           "| hop count | questions | Hit@1 | F1 | first candidate | random candidate | LLM lift |",
           "|---|---|---|---|---|---|---|"]
    for k, v in sorted(by.items(), key=lambda kv: int(kv[0])):
        out.append(f"| {k} | {v.get('questions')} | {_fmt(v.get('hit_at_1'))} | {_fmt(v.get('f1'))} | "
                   f"{_fmt(v.get('baseline_first'))} | {_fmt(v.get('baseline_random'))} | {_fmt(v.get('llm_lift'))} |")
    return out


def label_counts_table(metrics: dict) -> list[str]:
    """Markdown lines of a label task's predicted label counts (a constant answer shows at once)."""
    counts = metrics.get("label_counts") or {}
    if not counts:
        return []
    total = sum(counts.values()) or 1
    out = ["", "## Predicted labels", "", "| label | predictions | share |", "|---|---|---|"]
    out += [f"| {_cell(str(k))} | {v} | {v / total:.3f} |" for k, v in counts.items()]
    return out


def render(*, metrics: dict, rows: Sequence[dict], figure: str, examples: int, validation: dict | None,
           traces: int = 0, timings: dict | None = None) -> str:
    """Markdown of the report; ``timings`` (``reports/timings.json``) adds what the run took, when given."""
    run = timings or {}
    out = _setup_lines(metrics.get("setup", {})) + _metrics_lines(metrics, run)
    out += by_hops_table(metrics) + label_counts_table(metrics)
    out += _stage_lines(run) + _modules_lines(metrics, run) + _type_lines(rows)
    out += ["", "## Answer recall against context size", "", f"![recall vs context]({figure})", ""]
    out += _validation_lines(validation) + _example_lines(rows, examples)
    with_trace = [r for r in rows if r.get("trace")][:traces]
    if with_trace:
        out += ["## Reasoner traces", "",
                "Each question's steps as its reasoner recorded them, then every LLM call (the prompt is in the "
                "call cache `.kgrag_cache/llm_calls.sqlite` under the key).", ""]
        for r in with_trace:
            out += render_trace(r)
    return "\n".join(out) + "\n"


def _setup_lines(setup: dict) -> list[str]:
    """The title and what ran: dataset, retrieval, generation, sample seed, an oracle's warning, the plan."""
    out = ["# kgrag report", ""]
    hops = f" {setup['hops']}-hop" if setup.get("hops") is not None else ""
    out.append(
        f"Dataset **{setup.get('dataset')}**{hops} {setup.get('split')}"
        + (f" ({setup['task']} task)" if setup.get("task") else "") + ", "
        f"retrieval **{setup.get('retrieve')}**, generation **{setup.get('backend')}** "
        f"(context: {setup.get('context')}), sample seed {setup.get('seed')}."
    )
    if setup.get("oracle_hops"):
        out += ["", "**oracle**: `retrieve.oracle_hops: true` handed each question's declared hop count to "
                "retrieval; users' questions carry none, so these numbers are not those of the default."]
    if setup.get("plan"):
        out += ["", f"Relation-path plan: {setup['plan']}."]
    return out


def _metrics_lines(metrics: dict, run: dict) -> list[str]:
    """The metrics table: each registered metric the run has, with its interval (a paired lift with its questions
    won and lost), then the run's timings."""
    out = ["", "## Metrics", "", "| metric | value | 95% interval |", "|---|---|---|"]
    ci = metrics.get("ci95") or {}
    from kgrag.evaluation.metrics import metric_keys

    for k, key in metric_keys().items():  # names() without listing the registry a second time
        if k in metrics:
            iv = ci.get(k) or {}
            band = f"[{_fmt(iv['low'])}, {_fmt(iv['high'])}]" if "low" in iv else ""
            v = metrics[k]
            if isinstance(v, dict) and "lift" in v:  # a paired lift: its mean, interval, questions won and lost
                lo, hi = v.get("ci95") or (None, None)
                band = f"[{_fmt(lo)}, {_fmt(hi)}] (won {v.get('won')}, lost {v.get('lost')})"
                v = v["lift"]
            out.append(f"| {_cell(key.name)} (`{k}`) | {_fmt(v, key.fmt)} | {band} |")
    for k, label in timing_names().items():
        if run.get(k) is not None:
            out.append(f"| {_cell(label)} (`{k}`) | {_fmt(run[k])} | |")
    if ci:
        out += ["", "95% interval: seeded bootstrap over the questions (1,000 resamples; docs/metrics.md)."]
    return out


def _stage_lines(run: dict) -> list[str]:
    out = ["", "## Time per stage", ""]
    if run.get("stage_seconds"):
        out += ["| stage | seconds |", "|---|---|"]
        out += [f"| {s} | {v:.1f} |" for s, v in run["stage_seconds"].items()]
    else:
        out.append("No run records (`reports/timings.json`): the stages' timings were not kept with these outputs.")
    return out


def _modules_lines(metrics: dict, run: dict) -> list[str]:
    """LEGO's retrieval modules: the answer entities in each module's output, and its time."""
    if not metrics.get("retrieval_modules"):
        return []
    # times: the run records' (reports/timings.json), or those of a metrics file written before they left it
    ms = {(t["stage"], t["module"]): t.get("ms_mean") for t in run.get("retrieval_modules_ms") or []}
    out = ["", "## Retrieval modules (answer entities in each module's output)", "",
           "| stage | module | precision | recall | F1 | hit ratio | nodes | ms / question |",
           "|---|---|---|---|---|---|---|---|"]
    for m in metrics["retrieval_modules"]:
        t = ms.get((m["stage"], m["module"]), m.get("ms_mean"))
        out.append(f"| {m['stage']} | {m['module']} | {_fmt(m['precision'])} | {_fmt(m['recall'])} | "
                   f"{_fmt(m['f1'])} | {_fmt(m['hit'])} | {_fmt(m['nodes_mean'])} | {_fmt(t)} |")
    return out


def _type_lines(rows: Sequence[dict]) -> list[str]:
    """The scores by question type, the most frequent type first."""
    by_type: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        by_type[r.get("qtype") or "(none)"].append(r)
    out = ["", "## By question type", "",
           "| question type | n | accuracy (label questions) | Hit@1 | Hit | F1 | retrieval recall |",
           "|---|---|---|---|---|---|---|"]
    for t, rs in sorted(by_type.items(), key=lambda kv: -len(kv[1])):
        rr = [r["retrieval_recall"] for r in rs if r["retrieval_recall"] is not None]
        acc = [r["correct"] for r in rs if r.get("correct") is not None]
        out.append(
            f"| {t} | {len(rs)} | {_fmt(float(np.mean(acc)) if acc else None)} "
            f"| {np.mean([r['hit_at_1'] for r in rs]):.3f} | {np.mean([r['hit_any'] for r in rs]):.3f} "
            f"| {np.mean([r['f1'] for r in rs]):.3f} | {(np.mean(rr) if rr else float('nan')):.3f} |"
        )
    return out


def _validation_lines(validation: dict | None) -> list[str]:
    """Rows per table and quarantined, and the quarantine's reasons (the first 15)."""
    if not validation:
        return []
    out = ["## Data validation", "", "| table | rows | quarantined |", "|---|---|---|"]
    for n, v in validation.get("tables", {}).items():
        out.append(f"| {n} | {v['rows']} | {v['bad']} |")
    out += ["", f"Lines quarantined at ingest: {validation.get('ingest_quarantined', 0)}.", ""]
    reasons = validation.get("quarantine_reasons") or []
    if reasons:
        out += ["Quarantined rows by reason (`data/quarantine/*.parquet` hold each row with its file and line):",
                "", "| stage | reason | rows |", "|---|---|---|"]
        out += [f"| {r['stage']} | {r['reason']} | {r['rows']} |" for r in reasons[:15]]
        if len(reasons) > 15:
            out.append(f"| | ({len(reasons) - 15} more reasons) | {sum(r['rows'] for r in reasons[15:])} |")
        out.append("")
    return out


def _example_lines(rows: Sequence[dict], examples: int) -> list[str]:
    """The first ``examples`` questions: gold, prediction, their scores and their context's first triple."""
    if not examples:
        return []
    out = ["## Examples", ""]
    for r in rows[:examples]:
        ctx = (r.get("retrieved_triples") or "").splitlines()
        out += [
            f"**{r['question']}**  ",
            f"gold: {' | '.join(r['gold'][:8])}{' …' if len(r['gold']) > 8 else ''}  ",
            f"prediction: `{(r['prediction'] or '').strip()[:200]}`  ",
            (f"label {r['label'] or '(unparseable)'} of {' / '.join(r['choices'])}, correct {r['correct']:.0f}; "
             if r.get("correct") is not None else "") +
            f"Hit@1 {r['hit_at_1']:.0f}, Hit {r['hit_any']:.0f}, F1 {r['f1']:.2f}, retrieval recall "
            f"{_fmt(r['retrieval_recall'])}, {len(ctx)} triples"
            + (f"; first: `{ctx[0][:120]}`" if ctx else ""),
            "",
        ]
    return out
