"""Learning-curve plot of one run and the Table 3 / Table 6 summary of every finished run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from kgrag.gretriever.presets import PAPER, PRESETS


def plot_history(history: Sequence[dict[str, Any]], path: str | Path, *, title: str) -> None:
    """Train / validation loss (left axis) and validation score (right axis) per epoch, as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.6))
    ep = [r["epoch"] for r in history]
    ax.plot(ep, [r["train_loss"] for r in history], "o-", label="train loss")
    if any(r.get("val_loss") is not None for r in history):
        ax.plot(ep, [r.get("val_loss") for r in history], "s-", label="validation loss")
    ax.set_xlabel("epoch")
    ax.set_ylabel("target cross-entropy")
    lines, labels = ax.get_legend_handles_labels()
    if any(r.get("val_score") is not None for r in history):
        ax2 = ax.twinx()
        ax2.plot(ep, [r.get("val_score") for r in history], "^--", color="tab:green", label="validation score")
        ax2.set_ylabel("validation score")
        ax2.set_ylim(0, 1)
        l2, lab2 = ax2.get_legend_handles_labels()
        lines, labels = lines + l2, labels + lab2
    ax.legend(lines, labels, loc="best", fontsize=8)
    ax.set_title(title, fontsize=9)
    if ep:
        ax.set_xticks(ep)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _fmt(x: Any, pct: bool = False) -> str:
    if x is None:
        return "–"
    return f"{100 * x:.2f}" if pct else f"{x:.4f}"


def run_minutes(summary: dict[str, Any]) -> float:
    """Minutes of a run: setup + training (summed over the processes of a resumed run) + test."""
    sec = summary["seconds"]
    parts = [sec.get(k) for k in ("setup", "train", "test")]
    return round((sum(parts) if None not in parts else sec["total"]) / 60, 1)


def collect(root: str | Path) -> dict[str, dict[str, Any]]:
    """Summaries of the finished runs under ``root`` (``{dataset}-{preset}/summary.json``), by run name."""
    out = {}
    for f in sorted(Path(root).glob("*/summary.json")):
        out[f.parent.name] = json.loads(f.read_text())
    return out


def table(runs: dict[str, dict[str, Any]], *, hide_missing: bool = False) -> tuple[str, list[dict[str, Any]]]:
    """Markdown table (one row per preset: ours on ExplaGraphs and MetaQA 2-hop, the paper's numbers, run
    times, training budget) and its rows as dicts; ``hide_missing`` leaves out presets with no run."""
    rows = []
    for name, p in PRESETS.items():
        ex, mq = runs.get(f"explagraphs-{name}"), runs.get(f"metaqa-{name}")
        rows.append({
            "preset": name, "table": p.table, "row": p.row,
            "explagraphs_accuracy": ex["test"].get("accuracy") if ex else None,
            "metaqa_hit": mq["test"].get("hit") if mq else None,
            "metaqa_hit_at_1": mq["test"].get("hit_at_1") if mq else None,
            "paper_explagraphs": PAPER.get(name, {}).get("explagraphs"),
            "paper_webqsp": PAPER.get(name, {}).get("webqsp"),
            "explagraphs_minutes": run_minutes(ex) if ex else None,
            "metaqa_minutes": run_minutes(mq) if mq else None,
            "explagraphs_epochs": ex.get("epochs_run") if ex else None,
            "metaqa_epochs": mq.get("epochs_run") if mq else None,
            "explagraphs_train_rows": ex["sizes"]["train"] if ex else None,
            "metaqa_train_rows": mq["sizes"]["train"] if mq else None,
        })
    head = ("| Table | Preset | ExplaGraphs acc. (ours) | MetaQA-2 Hit (ours) | MetaQA-2 Hit@1 strict (ours) "
            "| ExplaGraphs acc. (paper) | WebQSP Hit@1 (paper) | minutes (ExplaGraphs / MetaQA) "
            "| training rows × epochs run (ExplaGraphs / MetaQA) |\n"
            "|---|---|---|---|---|---|---|---|---|\n")

    def line(r: dict[str, Any]) -> str:
        web = "–" if r["paper_webqsp"] is None else f"{r['paper_webqsp']:.2f}"
        mins = " / ".join("–" if r[k] is None else str(r[k]) for k in ("explagraphs_minutes", "metaqa_minutes"))
        budget = " / ".join("–" if r[f"{d}_epochs"] is None else
                            ("no training" if not r[f"{d}_epochs"] else f"{r[f'{d}_train_rows']} × {r[f'{d}_epochs']}")
                            for d in ("explagraphs", "metaqa"))
        return (f"| {r['table']} | {r['row']} | {_fmt(r['explagraphs_accuracy'])} | {_fmt(r['metaqa_hit'], True)} "
                f"| {_fmt(r['metaqa_hit_at_1'], True)} | {_fmt(r['paper_explagraphs'])} | {web} | {mins} | {budget} |\n")

    if hide_missing:
        rows = [r for r in rows if any(r[k] is not None for k in ("explagraphs_accuracy", "metaqa_hit"))]
    body = "".join(line(r) for r in rows)
    return head + body, rows
