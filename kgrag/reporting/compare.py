"""Side-by-side comparison of DVC experiments: parse `dvc exp show --json`, render a markdown table and plots.

The functions here are pure (no subprocess, no reading of files); the ``kgrag compare`` command runs
``dvc exp show --json`` and writes what they return. Plots are written only by :func:`write_plots`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

# The metrics compared by default (keys of reports/metrics.json; those the experiments have: `accuracy` only for
# label tasks such as ExplaGraphs). Labels and directions are the metrics' own (`kgrag.evaluation.metrics.metric_keys`,
# the run records' `kgrag.timings.RUN_KEYS`).
KEY_METRICS: tuple[str, ...] = (
    "accuracy", "hit_at_1", "hit_any", "f1", "retrieval_recall", "failed", "reasoner_calls_per_question", "tokens_per_question",
)
# the metrics file's setup entries shown beside the params: which plan answered (relplan.source as resolved), linking
SETUP_KEYS: tuple[str, ...] = ("setup.plan", "setup.model", "setup.link_entities")
# `dvc exp show` executor states of experiments that have no (complete) results
NOT_DONE = frozenset({"queued", "running", "failed"})


@dataclass(frozen=True)
class Experiment:
    """One row of `dvc exp show`: a finished experiment, a baseline commit or the workspace."""

    name: str
    rev: str
    baseline: str  # name of the baseline commit it derives from (its own name for a baseline)
    kind: str  # "experiment" | "baseline" | "workspace"
    params: Mapping[str, Any] = field(default_factory=dict)  # dotted keys, e.g. "reason.fasttog.max_size"
    metrics: Mapping[str, Any] = field(default_factory=dict)  # dotted keys of the metrics files


@dataclass(frozen=True)
class Skipped:
    """A `dvc exp show` row left out of the comparison, and why (queued, running, failed, no metrics)."""

    name: str
    rev: str
    reason: str


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings as one mapping with dotted keys (lists and scalars are leaves)."""
    out: dict[str, Any] = {}
    for k, v in tree.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping) and v:
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def _files(section: Mapping[str, Any] | None, first: str) -> tuple[dict[str, Any], list[str]]:
    """Merged dotted keys of a params / metrics section (``first`` file's keys win), and the files with errors."""
    merged: dict[str, Any] = {}
    errors = []
    names = sorted((section or {}), key=lambda f: f != first)
    for name in names:
        entry = section[name] or {}
        if entry.get("error"):
            errors.append(name)
            continue
        for k, v in flatten(entry.get("data") or {}).items():
            merged.setdefault(k, v)
    return merged, errors


def _row(row: Mapping[str, Any], *, name: str, baseline: str, kind: str, primary_metrics: str,
         params_file: str) -> Experiment | Skipped:
    data = row.get("data") or {}
    rev = str(row.get("rev") or data.get("rev") or "")
    if row.get("error"):
        msg = (row["error"] or {}).get("msg") or "error"
        return Skipped(name=name, rev=rev, reason=f"error: {msg}")
    metrics, bad = _files(data.get("metrics"), primary_metrics)
    if primary_metrics in bad or primary_metrics not in (data.get("metrics") or {}):
        return Skipped(name=name, rev=rev, reason=f"no {primary_metrics}")
    params, _ = _files(data.get("params"), params_file)
    return Experiment(name=name, rev=rev, baseline=baseline, kind=kind, params=params, metrics=metrics)


def parse_exp_show(rows: Sequence[Mapping[str, Any]], *, primary_metrics: str = "reports/metrics.json",
                   params_file: str = "params.yaml") -> tuple[list[Experiment], list[Skipped]]:
    """Experiments with results, and skipped rows, from the parsed output of ``dvc exp show --json``.

    The output is a list: the workspace row, then one row per baseline commit whose ``experiments`` list
    holds ``{"name", "executor", "revs": [row]}`` entries. Experiments whose executor is queued, running or
    failed, rows with an error and rows without ``primary_metrics`` are returned as :class:`Skipped`.
    Params and metrics are flattened to dotted keys; on a key found in several files, ``params_file`` /
    ``primary_metrics`` wins.
    """
    done: list[Experiment] = []
    skipped: list[Skipped] = []

    def add(item: Experiment | Skipped) -> None:
        (done if isinstance(item, Experiment) else skipped).append(item)

    for row in rows:
        rev = str(row.get("rev") or "")
        if rev == "workspace":
            add(_row(row, name="workspace", baseline="workspace", kind="workspace",
                     primary_metrics=primary_metrics, params_file=params_file))
            continue
        base = row.get("name") or rev[:7]
        add(_row(row, name=base, baseline=base, kind="baseline", primary_metrics=primary_metrics,
                 params_file=params_file))
        for exp in row.get("experiments") or []:
            revs = exp.get("revs") or []
            last = revs[-1] if revs else {}
            name = exp.get("name") or last.get("name") or str(last.get("rev") or "")[:7]
            state = ((exp.get("executor") or {}).get("state") or "").lower()
            if state in NOT_DONE:
                skipped.append(Skipped(name=name, rev=str(last.get("rev") or ""), reason=state))
                continue
            if not last:
                skipped.append(Skipped(name=name, rev="", reason="no revision"))
                continue
            add(_row(last, name=name, baseline=base, kind="experiment", primary_metrics=primary_metrics,
                     params_file=params_file))
    return done, skipped


def select(experiments: Sequence[Experiment], names: Sequence[str], *,
           skipped: Sequence[Skipped] = ()) -> list[Experiment]:
    """The experiments named (by name, or a prefix of at least 4 characters of their rev), in that order.

    Raises
    ------
    KeyError
        A name matches no experiment (the message lists the known ones, and says if it was skipped) or
        several.
    """
    out = []
    for want in names:
        hits = [e for e in experiments if e.name == want]
        if not hits and len(want) >= 4:
            hits = [e for e in experiments if e.rev.startswith(want)]
        if len(hits) > 1:
            raise KeyError(f"experiment {want!r} is ambiguous: "
                           + ", ".join(f"{e.name} ({e.rev[:7]}, baseline {e.baseline})" for e in hits))
        if not hits:
            why = [s for s in skipped if s.name == want or (len(want) >= 4 and s.rev.startswith(want))]
            if why:
                raise KeyError(f"experiment {want!r} has no results ({why[0].reason})")
            known = ", ".join(e.name for e in experiments) or "(none)"
            raise KeyError(f"unknown experiment {want!r}; known: {known}")
        out.append(hits[0])
    return out


def differing_params(experiments: Sequence[Experiment]) -> list[str]:
    """Params keys whose value is not the same in every experiment (absent counts as a value), in file order."""
    keys: list[str] = []
    for e in experiments:
        keys += [k for k in e.params if k not in keys]
    missing = object()
    return [k for k in keys if len({_hashable(e.params.get(k, missing)) for e in experiments}) > 1]


def _hashable(v: Any) -> Any:
    if isinstance(v, list):
        return tuple(_hashable(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((k, _hashable(x)) for k, x in v.items()))
    return v


def _keys() -> dict:
    """What every known metric key means: the registered metrics' declarations and the run records'."""
    from kgrag.evaluation.metrics import metric_keys
    from kgrag.timings import RUN_KEYS

    return {**metric_keys(), **RUN_KEYS}


def direction(metric: str) -> int:
    """+1 when a higher value of ``metric`` is better, -1 when lower is, 0 when unknown (nothing declared)."""
    k = _keys().get(metric)
    return k.better if k else 0


def _number(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (isinstance(v, float) and math.isnan(v)):
        return None
    return float(v)


def best(values: Sequence[Any], sign: int) -> set[int]:
    """Indices of the best numeric values (all tied ones); none when ``sign`` is 0, fewer than two values are
    numbers, or all numbers are equal."""
    nums = [(i, x) for i, x in enumerate(map(_number, values)) if x is not None]
    if sign == 0 or len(nums) < 2 or len({x for _, x in nums}) == 1:
        return set()
    top = max(sign * x for _, x in nums)
    return {i for i, x in nums if math.isclose(sign * x, top, rel_tol=1e-12, abs_tol=1e-12)}


def fmt(v: Any) -> str:
    """A table cell: floats with 3 decimals (1 from 100 up), None as ``null``, lists and mappings by size."""
    if v is None:
        return "null"
    if isinstance(v, float):
        return f"{v:.3f}" if abs(v) < 100 else f"{v:.1f}"
    if isinstance(v, (list, dict)):
        return f"({len(v)} items)"
    return str(v).replace("|", "\\|")


def sweep_param(experiments: Sequence[Experiment]) -> str | None:
    """The params key of a one-parameter sweep: the only key that differs, numeric in every experiment with
    at least two distinct values; else None."""
    keys = differing_params(experiments)
    if len(experiments) < 2 or len(keys) != 1:
        return None
    vals = [_number(e.params.get(keys[0])) for e in experiments]
    if any(v is None for v in vals) or len(set(vals)) < 2:
        return None
    return keys[0]


def interval(metrics: Mapping[str, Any], metric: str) -> str:
    """`` [low, high]``: the metric's bootstrap 95% interval (``ci95.<metric>.low`` / ``.high`` of the metrics
    file), or "" when the run has none."""
    low, high = _number(metrics.get(f"ci95.{metric}.low")), _number(metrics.get(f"ci95.{metric}.high"))
    return f" [{fmt(low)}, {fmt(high)}]" if low is not None and high is not None else ""


def label(metric: str) -> str:
    """Short column label of a metric key (its metric's declared label; the key itself when undeclared)."""
    k = _keys().get(metric)
    return k.label if k else metric


def plot_files(metrics: Sequence[str], *, sweep: str | None) -> dict[str, str]:
    """File names (inside the plots folder) of the plots :func:`write_plots` makes: one bar chart per metric,
    and ``sweep.png`` for a one-parameter sweep."""
    out = {m: f"{re.sub(r'[^A-Za-z0-9_.-]+', '_', m)}.png" for m in metrics}
    if sweep:
        out["__sweep__"] = "sweep.png"
    return out


def render(experiments: Sequence[Experiment], *, metrics: Sequence[str], skipped: Sequence[Skipped] = (),
           plots_dir: str | None = None, title: str = "Experiment comparison", note: str = "",
           metrics_file: str = "reports/metrics.json") -> str:
    """Markdown: one row per experiment, columns = the params that differ and ``metrics``; best in bold.

    ``plots_dir`` (relative to the markdown file) adds links to the plots named by :func:`plot_files`.
    """
    params = differing_params(experiments)
    sweep = sweep_param(experiments)
    out = [f"# {title}", ""]
    if note:
        out += [note, ""]
    out += [f"{len(experiments)} experiments; params that differ between them, then metrics "
            "(**bold**: best; ↑ higher is better, ↓ lower is better). `–`: param not set in that experiment.", ""]
    arrows = {1: " ↑", -1: " ↓", 0: ""}
    # what answered, as the metrics file's setup records it (e.g. which relation-path plan: relplan.source)
    # (those that differ, as params are; all of them for one experiment)
    setup = [k for k in SETUP_KEYS if any(k in e.metrics for e in experiments)
             and (len(experiments) == 1 or len({str(e.metrics.get(k)) for e in experiments}) > 1)]
    head = (["experiment", "rev"] + [f"`{p}`" for p in params] + [f"`{k}`" for k in setup]
            + [f"{label(m)}{arrows[direction(m)]}" for m in metrics])
    out += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    marks = {m: best([e.metrics.get(m) for e in experiments], direction(m)) for m in metrics}
    for i, e in enumerate(experiments):
        cells = [e.name, e.rev[:7] if e.kind != "workspace" else "–"]
        cells += [fmt(e.params[p]) if p in e.params else "–" for p in params]
        cells += [str(e.metrics.get(k, "–")).replace("|", "/") for k in setup]
        for m in metrics:
            v = e.metrics.get(m)
            c = fmt(v) if m in e.metrics else "–"
            c = f"**{c}**" if i in marks[m] else c
            cells.append(c + interval(e.metrics, m))
        out.append("| " + " | ".join(cells) + " |")
    out += ["", f"Metric keys (`{metrics_file}`): "
            + ", ".join(f"{label(m)} = `{m}`" for m in metrics) + "."]
    if any(interval(e.metrics, m) for e in experiments for m in metrics):
        out += ["", "`[low, high]`: the seeded bootstrap 95% interval over the questions (`ci95` of the metrics "
                "file); runs whose intervals overlap may differ by sampling noise alone."]
    if not params:
        out += ["", "The experiments' params are identical."]
    if skipped:
        out += ["", "Skipped (no results to compare): "
                + ", ".join(f"{s.name} ({s.reason})" for s in skipped) + "."]
    if plots_dir is not None:
        files = plot_files(metrics, sweep=sweep)
        out += ["", "## Plots", ""]
        if sweep:
            out += [f"Metrics against `{sweep}` (the only param that differs):", "",
                    f"![sweep over {sweep}]({plots_dir}/{files['__sweep__']})", ""]
        for m in metrics:
            out += [f"![{label(m)}]({plots_dir}/{files[m]})"]
    return "\n".join(out) + "\n"


def write_plots(experiments: Sequence[Experiment], *, metrics: Sequence[str], folder: str | Path) -> list[Path]:
    """PNG bar chart per metric across the experiments, and a line plot of every metric against the sweep
    param when :func:`sweep_param` finds one; returns the files written (names from :func:`plot_files`)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    sweep = sweep_param(experiments)
    files = plot_files(metrics, sweep=sweep)
    names = [e.name for e in experiments]
    written = []
    for m in metrics:
        vals = [_number(e.metrics.get(m)) for e in experiments]
        fig, ax = plt.subplots(figsize=(max(4.0, 0.7 * len(names) + 2.0), 3.4), dpi=110)
        marked = best(vals, direction(m))
        bars = ax.bar(range(len(names)), [0.0 if v is None else v for v in vals],
                      color=["#d62728" if i in marked else "#4c72b0" for i in range(len(names))])
        for b, v in zip(bars, vals):
            ax.annotate("n/a" if v is None else fmt(v), (b.get_x() + b.get_width() / 2, b.get_height()),
                        ha="center", va="bottom", fontsize=7)
        tilt = len(names) > 3
        ax.set_xticks(range(len(names)), names, rotation=30 if tilt else 0, ha="right" if tilt else "center",
                      fontsize=8)
        arrow = {1: " (higher is better)", -1: " (lower is better)", 0: ""}[direction(m)]
        ax.set_title(f"{label(m)}{arrow}", fontsize=10)
        ax.set_ylabel(m, fontsize=8)
        ax.grid(axis="y", alpha=0.3)
        fig.tight_layout()
        path = folder / files[m]
        fig.savefig(path)
        plt.close(fig)
        written.append(path)
    if sweep:
        order = sorted(range(len(experiments)), key=lambda i: float(experiments[i].params[sweep]))
        xs = [float(experiments[i].params[sweep]) for i in order]
        cols = min(3, len(metrics)) or 1
        rows = math.ceil(len(metrics) / cols) or 1
        fig, axes = plt.subplots(rows, cols, figsize=(3.6 * cols, 2.8 * rows), dpi=110, squeeze=False)
        for ax, m in zip(axes.flat, metrics):
            ys = [_number(experiments[i].metrics.get(m)) for i in order]
            ax.plot(xs, [math.nan if y is None else y for y in ys], marker="o")
            ax.set_title(label(m), fontsize=9)
            ax.set_xlabel(sweep, fontsize=8)
            if min(xs) > 0 and max(xs) / min(xs) >= 8:  # e.g. M = 1, 2, 4, 8: evenly spaced on a log axis
                ax.set_xscale("log", base=2)
            ax.set_xticks(xs, [fmt(experiments[i].params[sweep]) for i in order])
            ax.grid(alpha=0.3)
        for ax in list(axes.flat)[len(metrics):]:
            ax.axis("off")
        fig.tight_layout()
        path = folder / files["__sweep__"]
        fig.savefig(path)
        plt.close(fig)
        written.append(path)
    return written


def numeric_metric_keys(experiments: Iterable[Experiment]) -> list[str]:
    """Metric keys holding a number in at least one experiment (what ``--metrics`` may name)."""
    keys: list[str] = []
    for e in experiments:
        keys += [k for k, v in e.metrics.items() if _number(v) is not None and k not in keys]
    return keys
