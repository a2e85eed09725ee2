"""The ``kgrag`` command line: list modules, check params, ask the ingested KG a question (or serve a page to ask
it), compare experiments, fetch the datasets."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from kgrag.env import setup


def _modules(args: argparse.Namespace) -> int:
    from kgrag.registry import all_registries

    regs = all_registries()
    if args.json:
        print(json.dumps({kind: reg.names() for kind, reg in regs.items()}, indent=2))
    else:
        for kind, reg in regs.items():
            for name in reg.names():
                print(f"{kind} {name}")
    return 0


PIPELINES = ("dvc.yaml", "finetune/dvc.yaml", "gretriever/dvc.yaml", "synth/dvc.yaml")


def _deps(args: argparse.Namespace) -> int:
    from kgrag.code import depgraph
    root = Path.cwd()
    missing = 0
    for rel in PIPELINES:
        path = root / rel
        if not path.exists():
            continue
        if args.write:
            changed = depgraph.write(root, path)
            print(f"{rel}: {'rewrote deps of ' + ', '.join(changed) if changed else 'deps up to date'}")
        for stage, files in depgraph.check(root, path).items():
            missing += len(files)
            if files or not (args.write or args.check):
                entry = depgraph.stage_entries(path)[stage]
                need = depgraph.compress(root, depgraph.closure(root, entry))
                print(f"{rel}:{stage} ({entry}): {len(need)} code deps" +
                      (f"; NOT covered: {', '.join(files)}" if files else ""))
    return 1 if missing and args.check else 0


def _params(args: argparse.Namespace, modules: str = "selected"):
    """The validated params of ``--params`` with ``--set`` overrides, or None after printing the error
    (``modules``: how deep, ``kgrag.params.parse``)."""
    from kgrag.params import ParamsError, load

    try:
        return load(args.params, args.set, modules=modules)
    except ParamsError as e:
        print(f"error: {e}", file=sys.stderr)
        return None


def _check(args: argparse.Namespace) -> int:
    p = _params(args, modules="all")  # every module's sub-section, selected or not (stages check the chosen ones)
    if p is None:
        return 2
    print(f"{args.params}: ok, every section validated (retrieve={p.retrieve.method}, reason={p.reason.method}, "
          f"backend={p.generate.backend})")
    return 0


def _asker(args: argparse.Namespace):
    """(params, Asker) for ``ask`` / ``serve``, or (None, exit code) after printing the error."""
    from kgrag.apps.ask import Asker, NotIngested
    from kgrag.kg.store import StoreTooBig

    p = _params(args)
    if p is None:
        return None, 2
    try:
        return p, Asker(p)
    except (NotIngested, StoreTooBig) as e:  # StoreTooBig: retrieve.store: memory on a KG over the memory budget
        print(f"error: {e}", file=sys.stderr)
        return None, 1


def _ask(args: argparse.Namespace) -> int:
    from kgrag.llm.textualize import triples_text

    p, asker = _asker(args)
    if p is None:
        return asker
    ans = asker.ask(args.question)
    kg, named = asker.kg, ans.named
    print(f"topic entities ({ans.how}): {', '.join(kg.names(list(ans.question.topic_ids)))}")
    print(f"\nretrieved {len(named)} triples with {p.retrieve.method} in {ans.retrieve_ms:.1f} ms:")
    print(triples_text(named[: args.show]) + (f"\n... ({len(named) - args.show} more)" if len(named) > args.show else ""))
    print(f"\nLLM calls: (reasoner {p.reason.method})")
    for rec in ans.records:
        print(f"  {asker.client.model_id}: attempts={rec.attempts} cached={rec.cached} tokens_in={rec.reply.tokens_in} "
              f"tokens_out={rec.reply.tokens_out} latency_ms={rec.reply.latency_ms:.0f}"
              + (f" error={rec.reply.error}" if rec.failed else ""))
    if args.html:
        from kgrag.reporting.report_html import question_page, question_view

        out = Path(args.html)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(question_page(question_view(asker.view_data(ans)), title=f"kgrag ask: {args.question}"),
                       encoding="utf-8")
        print(f"\nwrote {out}")
    if ans.failed:
        print("\nanswer: (the LLM call failed)")
        return 1
    res = ans.result
    print(f"\nanswer: {res.answer.strip()}" + (f"  (fallback: {res.fallback})" if res.fallback else ""))
    print(f"parsed: {ans.parsed}")
    return 0


def _serve(args: argparse.Namespace) -> int:
    from kgrag.apps.serve import run

    p, asker = _asker(args)
    if p is None:
        return asker
    return run(asker, host="127.0.0.1", port=args.port)


def _lego_table(args: argparse.Namespace) -> int:
    import pyarrow as pa

    from kgrag import io
    from kgrag import schema as S
    from kgrag.kg.duckdb_io import ensure_duckdb, kg_hash, read_tables
    from kgrag.index.embed import has_index, index_files_hash
    from kgrag.experiment import Experiment, Files
    from kgrag.retrieval.lego.presets import PRESETS
    from kgrag.retrieval.run import retrieve_with
    from kgrag.apps.lego_table import instance_row, render, row_key, uses_llm
    from kgrag.params import RetrieveParams
    from kgrag.kg.store import questions_from_table
    from kgrag.code.versioning import closure_version, folder_hash, machine

    p = _params(args)
    if p is None:
        return 2
    names = list(PRESETS) if args.presets == "all" else [x.strip() for x in args.presets.split(",") if x.strip()]
    unknown = [n for n in names if n not in PRESETS]
    if unknown:
        print(f"error: unknown preset(s) {', '.join(unknown)}; valid: {', '.join(PRESETS)}", file=sys.stderr)
        return 2
    db = ensure_duckdb(io.VALIDATED / "kg.duckdb")  # built from data/validated/*.parquet when missing or stale
    if not db.exists() or not has_index(io.INDEX):
        print("error: no ingested KG and index; run `dvc repro index` (and `dvc repro finetune/dvc.yaml` for "
              "the st-ft presets) first",
              file=sys.stderr)
        return 1
    exp = Experiment(p, Files.of())  # the experiment's KG store (retrieve.store) and index, as the stages'
    qrows = read_tables(db, ("questions",))["questions"].to_pylist()
    code = "-".join([closure_version("kgrag.apps.lego_table"), closure_version("kgrag.retrieval.run"), kg_hash(db),
                     index_files_hash(io.INDEX), folder_hash(io.ST_MODEL)])
    out_json = Path(f"{args.out}.json")
    done = {r["key"]: r for r in (json.loads(out_json.read_text())["rows"] if out_json.exists() else [])}
    base = p.retrieve.model_dump(mode="json")
    rows = []
    for name in names:
        n = args.llm_questions if uses_llm(name) else args.questions
        sample = qrows[:n] if n else qrows
        qs = questions_from_table(pa.Table.from_pylist(sample, schema=S.QUESTIONS))
        # no LLM call cache: instances sharing prompts (6/7, 13/14, 19/20) must be timed on real calls
        lego_params = {**(base.get("lego") or {}), "preset": name}
        lego_params["llm"] = {**lego_params.get("llm", {}), "cache": None}
        for stage in ("extract", "prune", "filter", "refine"):  # the preset decides the stages
            lego_params.pop(stage, None)
        params = RetrieveParams.model_validate({**base, "method": "lego", "lego": lego_params})
        key = row_key(preset=name, params_json=params.model_dump_json(), question_ids=[q.question_id for q in qs],
                      code=code)
        if key in done:
            rows.append(done[key])
            print(f"[lego-table] {name}: unchanged, kept", file=sys.stderr)
            continue
        row = instance_row(preset=name, questions=qs, question_rows=sample, params=params,
                           retrieve=lambda questions, params: retrieve_with(exp.with_retrieve(params), questions))
        row["key"] = key
        rows.append(row)
        print(f"[lego-table] {name}: recall {row['recall']}, median {row['ms_median']:.0f} ms/question "
              f"({row['questions']} questions)", file=sys.stderr)
        io.write_json(out_json, {"machine": machine(), "rows": rows + [r for r in done.values() if r not in rows]})
    io.write_json(out_json, {"machine": machine(), "rows": rows})
    lp = p.data.loader_params()
    note = (f"MetaQA {getattr(lp, 'hops', '?')}-hop {getattr(lp, 'split', '?')} questions of the experiment's sample "
            f"(data.seed {p.data.seed}); {args.questions or 'all'} per instance, {args.llm_questions or 'all'} for "
            f"instances that call the LLM ({p.retrieve.module_params('lego').llm.backend}). "
            "`-ft`: the fine-tuned ST of the finetune_path_scorer stage. Made by `kgrag lego-table`.")
    Path(f"{args.out}.md").write_text(render(rows, title="LEGO-GraphRAG instances", note=note))
    print(f"wrote {out_json} and {args.out}.md")
    return 0


def _compare(args: argparse.Namespace) -> int:
    import subprocess

    from kgrag.reporting import compare
    if args.exp_json:
        raw = Path(args.exp_json).read_text()
    else:
        cmd = [sys.executable, "-m", "dvc", "exp", "show", "--json"] + (["--all-commits"] if args.all else [])
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            print(f"error: `dvc exp show --json` failed:\n{done.stderr.strip()}", file=sys.stderr)
            return 1
        raw = done.stdout
    exps, skipped = compare.parse_exp_show(json.loads(raw), primary_metrics=args.metrics_file)
    if args.exp:
        try:
            chosen = compare.select(exps, args.exp, skipped=skipped)
        except KeyError as e:
            print(f"error: {e.args[0]}", file=sys.stderr)
            return 2
        skipped = []
    else:  # every baseline and its finished experiments (the workspace only when named)
        chosen = [e for e in exps if e.kind != "workspace"]
    if not chosen:
        print("error: no experiment with results to compare (run some with `dvc exp run`)"
              + (f"; skipped: {', '.join(f'{s.name} ({s.reason})' for s in skipped)}" if skipped else ""),
              file=sys.stderr)
        return 1
    known = compare.numeric_metric_keys(chosen)
    metrics = [m.strip() for x in (args.metrics or [",".join(k for k in compare.KEY_METRICS if k in known)])
               for m in x.split(",") if m.strip()]
    unknown = [m for m in metrics if m not in known]
    if unknown:
        print(f"error: unknown metric(s) {', '.join(unknown)}; numeric metrics of these experiments: "
              f"{', '.join(known)}", file=sys.stderr)
        return 2
    out = Path(args.out)
    folder = out.with_suffix("")  # reports/compare.md -> reports/compare/*.png
    for old in folder.glob("*.png") if folder.is_dir() else []:
        old.unlink()
    written = compare.write_plots(chosen, metrics=metrics, folder=folder)
    note = (f"Made by `kgrag compare` from `dvc exp show --json`{' --all-commits' if args.all else ''}; "
            f"metrics from `{args.metrics_file}`.")
    md = compare.render(chosen, metrics=metrics, skipped=skipped, plots_dir=folder.name, note=note,
                        metrics_file=args.metrics_file)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(md)
    if args.html:
        from kgrag.reporting.report_html import markdown_page

        page = Path(args.html)
        page.parent.mkdir(parents=True, exist_ok=True)
        images = {f"{folder.name}/{f.name}": f.read_bytes() for f in written}
        page.write_text(markdown_page(md, images=images, title="kgrag compare"), encoding="utf-8")
        print(f"wrote {page}")
    print(f"wrote {out} ({len(chosen)} experiments: {', '.join(e.name for e in chosen)}) and {len(written)} "
          f"plots in {folder}/" + (f"; skipped: {', '.join(f'{s.name} ({s.reason})' for s in skipped)}"
                                   if skipped else ""))
    return 0


def _rules(args: argparse.Namespace) -> int:
    """Print kgrag's and the papers' scoring rules side by side, recomputed from a predictions file."""
    import pyarrow.parquet as pq

    from kgrag.evaluation.evaluate import RULES, rescore_rows

    rows = pq.read_table(args.predictions).to_pylist()
    got = rescore_rows(rows)
    print(f"{args.predictions}: {got['questions']} questions (rules: docs/metrics.md)\n")
    print("| rules of | metric | value | rule |\n|---|---|---|---|")
    for fam, key, rule in RULES:
        v = got[key]
        print(f"| {fam} | {key} | {'–' if v is None else f'{v:.4f}'} | {rule} |")
    return 0


def _params_doc(args: argparse.Namespace) -> int:
    from kgrag.config.yaml_doc import first_difference, render
    from kgrag.params import Params

    path = Path(args.params)
    have = path.read_text()
    want = render(have, Params)
    if args.write:
        if want != have:
            path.write_text(want)
        print(f"{path}: comments written from the params models" + ("" if want != have else " (unchanged)"))
        return 0
    diff = first_difference(have, want)
    if diff:
        print(f"{path}: comments differ from the params models' descriptions (`kgrag params --write`), first at "
              f"{diff}")
        return 1
    print(f"{path}: comments are the models' descriptions")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (also used to render --help)."""
    from kgrag.reporting.compare import KEY_METRICS

    ap = argparse.ArgumentParser(prog="kgrag", description="Knowledge-graph RAG pipelines (run them with `dvc repro`).")
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("modules", help="list every registered module as `kind name`")
    m.add_argument("--json", action="store_true", help="print {kind: [names]} as JSON")
    m.set_defaults(fn=_modules)
    c = sub.add_parser("check", help="validate params.yaml (with --set overrides), every module's sub-section "
                       "included (stages validate the chosen modules' only), and exit")
    a = sub.add_parser("ask", help="answer one question on the ingested KG with the current params")
    a.add_argument("question", help='the question, e.g. "who directed the movies starred by [Al Pacino]"')
    a.add_argument("--show", type=int, default=20, help="retrieved triples to print (default 20)")
    a.add_argument("--html", metavar="FILE", help="also write the question's view (subgraph drawn, trace, LLM calls) "
                   "as a self-contained HTML page (docs/report.md)")
    v = sub.add_parser("serve", help="a local page (127.0.0.1) where you type questions against the ingested KG "
                       "and see each answer's subgraph, trace and LLM calls (docs/report.md)")
    v.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default 0: any free port; the URL is "
                   "printed)")
    t = sub.add_parser("lego-table", help="run LEGO-GraphRAG presets on the experiment's questions and write a "
                       "per-instance, per-module table (reports/lego_instances.md/.json)")
    t.add_argument("--presets", default="all", help="comma-separated preset names, or `all` (default)")
    t.add_argument("--questions", type=int, default=50, help="questions per instance (0 = the whole sample)")
    t.add_argument("--llm-questions", type=int, default=3,
                   help="questions for instances that call the LLM (slow on CPU; 0 = the whole sample)")
    t.add_argument("--out", default="reports/lego_instances", help="output path without extension")
    t.set_defaults(fn=_lego_table)
    r = sub.add_parser("rules", help="kgrag's and the papers' scoring rules (hit_gretriever, accuracy_gretriever, "
                       "em_tog) side by side, recomputed from a predictions file (docs/metrics.md)")
    r.add_argument("predictions", nargs="?", default="reports/predictions.parquet",
                   help="per-question file of the evaluate stage (default: reports/predictions.parquet)")
    r.set_defaults(fn=_rules)
    k = sub.add_parser(
        "compare", help="side-by-side table and plots of DVC experiments (reports/compare.md)",
        description="Compare DVC experiments (read from `dvc exp show --json`): a markdown table with one row per "
        "experiment, the params that differ between them and the key metrics (best in bold), a bar chart per "
        "metric and, when the experiments differ in one numeric param only, a plot of the metrics against it. "
        "Queued, running and failed experiments are skipped with a note.")
    k.add_argument("exp", nargs="*", metavar="EXP",
                   help="experiments to compare, by name (`dvc exp show`'s [name]; a baseline by its branch name; "
                   "`workspace`) or by a prefix of their commit (4+ characters); default: the baseline and all its "
                   "finished experiments")
    k.add_argument("--all", action="store_true",
                   help="look at the experiments of every commit (`dvc exp show --all-commits`), not only HEAD's")
    k.add_argument("--metrics", action="append", metavar="KEY[,KEY...]",
                   help="metric keys of the metrics file to compare, comma-separated or repeated (nested keys "
                   f"dotted); default: those of {', '.join(KEY_METRICS)} the experiments have")
    k.add_argument("--out", default="reports/compare.md",
                   help="markdown file to write; plots go to the folder of the same name without the extension "
                   "(default: reports/compare.md, plots in reports/compare/)")
    k.add_argument("--metrics-file", default="reports/metrics.json",
                   help="the metrics file whose keys are compared (default: reports/metrics.json)")
    k.add_argument("--html", metavar="FILE", help="also write the table and plots as a self-contained HTML page")
    k.add_argument("--exp-json", metavar="PATH",
                   help="read this saved `dvc exp show --json` output instead of running dvc")
    k.set_defaults(fn=_compare)
    d = sub.add_parser("deps", help="print each DVC stage's code deps computed from its import closure "
                                    "(kgrag.code.depgraph); --write puts them into the dvc.yaml files")
    d.add_argument("--write", action="store_true", help="rewrite the code entries of the stages' deps lists")
    d.add_argument("--check", action="store_true", help="exit 1 when a stage's deps miss a file it can run")
    d.set_defaults(fn=_deps)
    y = sub.add_parser("params", help="check that params.yaml's comments are the params models' descriptions "
                       "(exit 1 naming the first difference); --write rewrites them, values kept")
    y.add_argument("--write", action="store_true", help="rewrite params.yaml's comments from the models")
    y.add_argument("--params", default="params.yaml", help="params file (default: params.yaml)")
    y.set_defaults(fn=_params_doc)
    f = sub.add_parser("data", help="fetch the benchmark datasets from their publishers into ../shared/data with "
                       "sha256 checks (what `make data` runs; files already there are only checked)")
    from kgrag.kg import fetch

    fetch.add_arguments(f)
    f.set_defaults(fn=fetch.run)
    for p in (c, a, t, v):
        p.add_argument("--params", default="params.yaml", help="params file (default: params.yaml)")
        p.add_argument("-S", "--set", dest="set", action="append", default=[], metavar="KEY=VALUE",
                       help="override a param, e.g. -S retrieve.pcst.topk=5 (repeatable; as `dvc exp run -S`)")
    c.set_defaults(fn=_check)
    a.set_defaults(fn=_ask)
    v.set_defaults(fn=_serve)
    return ap


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``kgrag`` console script."""
    setup()
    if argv is None:  # the console script: errors in a few lines (KGRAG_TRACEBACK=1 for tracebacks)
        from kgrag.env import short_errors

        short_errors()
    args = build_parser().parse_args(argv)
    return int(args.fn(args) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
