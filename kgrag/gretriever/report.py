"""Learning-curve plot of one run and the Table 3 / Table 6 summary of every finished run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping, Sequence

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


def run_minutes(summary: dict[str, Any], record: Mapping[str, Any] | None = None) -> float | None:
    """Minutes of a run: setup + training (summed over the processes of a resumed run) + test, from its run
    record (``run_seconds`` of ``data/timings/gretriever/.../timing.json``), else from ``seconds`` of a
    summary written before the wall times left it; None when neither has them."""
    sec = (record or {}).get("run_seconds") or summary.get("seconds")
    if not sec:
        return None
    parts = [sec.get(k) for k in ("setup", "train", "test")]
    return round((sum(parts) if None not in parts else sec["total"]) / 60, 1)


def rescore(summary: dict[str, Any], predictions: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """A run's test scores recomputed from its predictions (``id``, ``prediction``, ``gold``) under kgrag's rules
    and G-Retriever's (``kgrag.gretriever.datasets.score_rows``): so that runs made before a rule existed or changed
    are reported by today's rules without re-running them. ExplaGraphs runs are label tasks (support / counter)."""
    from kgrag.gretriever.datasets import score_rows

    choices: tuple[str, ...] = ()
    if summary.get("dataset") == "explagraphs":
        from kgrag.kg.loaders.explagraphs import STANCES

        choices = tuple(STANCES)
    return score_rows([(r["prediction"], list(r["gold"]), choices) for r in predictions])


def collect(root: str | Path) -> dict[str, dict[str, Any]]:
    """Summaries of the finished runs under ``root`` (``{dataset}-{preset}/summary.json``), by run name; when a
    run's ``predictions.json`` is there its ``test`` scores are recomputed from it (``rescore``)."""
    out = {}
    for f in sorted(Path(root).glob("*/summary.json")):
        summary = json.loads(f.read_text())
        preds = f.parent / "predictions.json"
        if preds.exists():
            summary["test"] = {**summary.get("test", {}), **rescore(summary, json.loads(preds.read_text()))}
        out[f.parent.name] = summary
    return out


LEGEND = (
    "Scores under two rules, named: *kgrag* (strict: `kgrag.evaluation.evaluate.parse_label` / whole-word Hit on "
    "normalized text) and *G-Retriever* (its own code's rules: the first `support|Support|Counter|counter` "
    "match decides the ExplaGraphs label; Hit is a substring test after `|` becomes a line break — the number "
    "its paper reports as WebQSP Hit@1). Compare with the paper only in the G-Retriever-rule columns; every "
    "rule is in docs/metrics.md.\n\n"
)


def table(runs: dict[str, dict[str, Any]], *, hide_missing: bool = False,
          records: Mapping[str, Mapping[str, Any]] | None = None) -> tuple[str, list[dict[str, Any]]]:
    """Markdown table (one row per preset: ours on ExplaGraphs and MetaQA 2-hop, the paper's numbers, run
    times, training budget) and its rows as dicts; ``hide_missing`` leaves out presets with no run. Run times
    come from ``records`` (the runs' current run records by run name, ``kgrag.timings``), "–" without one."""
    rows = []
    records = records or {}
    for name, p in PRESETS.items():
        ex, mq = runs.get(f"explagraphs-{name}"), runs.get(f"metaqa-{name}")
        rows.append({
            "preset": name, "table": p.table, "row": p.row,
            "explagraphs_accuracy": ex["test"].get("accuracy") if ex else None,
            "explagraphs_accuracy_gretriever": ex["test"].get("accuracy_gretriever") if ex else None,
            "metaqa_hit": mq["test"].get("hit") if mq else None,
            "metaqa_hit_gretriever": mq["test"].get("hit_gretriever") if mq else None,
            "metaqa_hit_at_1": mq["test"].get("hit_at_1") if mq else None,
            "paper_explagraphs": PAPER.get(name, {}).get("explagraphs"),
            "paper_webqsp": PAPER.get(name, {}).get("webqsp"),
            "explagraphs_minutes": run_minutes(ex, records.get(f"explagraphs-{name}")) if ex else None,
            "metaqa_minutes": run_minutes(mq, records.get(f"metaqa-{name}")) if mq else None,
            "explagraphs_epochs": ex.get("epochs_run") if ex else None,
            "metaqa_epochs": mq.get("epochs_run") if mq else None,
            "explagraphs_train_rows": ex["sizes"]["train"] if ex else None,
            "metaqa_train_rows": mq["sizes"]["train"] if mq else None,
        })
    head = ("| Table | Preset | ExplaGraphs acc., kgrag rule (ours) | ExplaGraphs acc., G-Retriever rule (ours) "
            "| ExplaGraphs acc., G-Retriever rule (paper) | MetaQA-2 Hit, kgrag rule (ours) "
            "| MetaQA-2 Hit, G-Retriever rule (ours) | MetaQA-2 Hit@1 strict (ours) "
            "| WebQSP Hit@1 = G-Retriever-rule Hit (paper) | minutes (ExplaGraphs / MetaQA) "
            "| training rows × epochs run (ExplaGraphs / MetaQA) |\n"
            "|---|---|---|---|---|---|---|---|---|---|---|\n")

    def line(r: dict[str, Any]) -> str:
        web = "–" if r["paper_webqsp"] is None else f"{r['paper_webqsp']:.2f}"
        mins = " / ".join("–" if r[k] is None else str(r[k]) for k in ("explagraphs_minutes", "metaqa_minutes"))
        budget = " / ".join("–" if r[f"{d}_epochs"] is None else
                            ("no training" if not r[f"{d}_epochs"] else f"{r[f'{d}_train_rows']} × {r[f'{d}_epochs']}")
                            for d in ("explagraphs", "metaqa"))
        return (f"| {r['table']} | {r['row']} | {_fmt(r['explagraphs_accuracy'])} "
                f"| {_fmt(r['explagraphs_accuracy_gretriever'])} | {_fmt(r['paper_explagraphs'])} "
                f"| {_fmt(r['metaqa_hit'], True)} | {_fmt(r['metaqa_hit_gretriever'], True)} "
                f"| {_fmt(r['metaqa_hit_at_1'], True)} | {web} | {mins} | {budget} |\n")

    if hide_missing:
        rows = [r for r in rows if any(r[k] is not None for k in ("explagraphs_accuracy", "metaqa_hit"))]
    body = "".join(line(r) for r in rows)
    return head + body, rows
