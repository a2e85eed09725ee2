"""Full benchmark splits through the pipeline: the default experiment on whole MetaQA test files, beside the
200-question sample, and a kill-and-resume run.

For each hop count asked for, the default params run stage by stage (ingest → validate → index → relplan →
retrieve → generate → evaluate → report, each ``python -m stages.<name> --set data.hops=H --set
data.sample=N``) in a work copy of the repository (``--workdir``; its own ``.kgrag_cache``, so nothing comes
from the repository's caches), once with ``data.sample=200`` and once with ``data.sample=0`` (the whole file).
Each stage runs under ``/usr/bin/time`` for its wall time and peak RSS. A run starts from empty shard and LLM
call caches unless ``--resume`` (an interrupted bench run then continues where it stopped).

``--kill-resume N``: generate on N questions is SIGKILLed when about half its shards are written, then run
again; the record says how many finished shards were recomputed (their files rewritten) and how many LLM calls
were repeated (backend attempts of the resumed run minus the calls it added to the call cache).

Writes ``reports/bench/full_split.json`` (merged per split: one split can be run at a time, each run's rows
stamped with its commit and command, ``made_by``) with, per split:
questions, wall seconds and peak RSS per stage, questions per minute of retrieve / generate at 200 and at the
full split and their per-question cost ratio, where generate's time goes (``generate_cost``: seconds by
candidates scored), and Hit@1, Hit, F1 and retrieval recall with seeded bootstrap 95% intervals (``ci95`` of
metrics.json).

    python -m bench.full_split --hops 1              # default params: ~55 min (2-hop ~3 h, 3-hop ~6-7 h idle)
    python -m tests.fault_server --port 8123 &       # the LLM replaced by a no-LLM baseline (first triple's tail):
    python -m bench.full_split --hops 1 --set generate.backend=openai \
        --set generate.openai.base_url=http://127.0.0.1:8123/v1 --set reason.method=answer     # ~13 minutes
    python -m bench.full_split --hops 2 --kill-resume 2000
    python -m bench.full_split --hops 2 --workdir /work/fullsplit-2hop       # cut off? continue it with:
    python -m bench.full_split --hops 2 --workdir /work/fullsplit-2hop --resume --no-sample
    python -m bench.full_split --hops 1 --workdir /work/fullsplit-1hop --cost-only   # generate_cost, ratios only
    python -m bench.full_split --hops 3 --sample-only                  # the 200-question run again, alone

A run cut off (a session's end, a SIGKILL) and continued with ``--resume`` recomputes no finished shard and
repeats no stored LLM call; its stage seconds are the last part's, and ``question_seconds`` (the per-question run
records, summed) gives the cost of all parts.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from bench._machine import made_by
from bench.common import timed_run, write_result

ROOT = Path(__file__).resolve().parents[1]

OUT = ROOT / "reports" / "bench" / "full_split.json"
STAGES = ("ingest", "validate", "index", "relplan", "retrieve", "generate", "evaluate", "report")
SIZES = {1: 9947, 2: 14872, 3: 14274}  # questions in MetaQA's k-hop test files
METRICS = ("hit_at_1", "hit_any", "f1", "retrieval_recall")


def workcopy(dst: Path) -> Path:
    """The repository's tracked and unignored files under ``dst`` (outputs and caches left out), with
    ``../shared`` reachable as from the repository. An existing work copy gets the current files too (its data
    and caches stay, for ``--resume``): a bench must measure the code it is run from, not a copy's old code."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.split()
    for f in files:
        if (ROOT / f).is_file():
            (dst / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / f, dst / f)
    shared = dst.parent / "shared"
    if not shared.exists():
        shared.symlink_to(ROOT.parent / "shared")
    return dst


def env() -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if k not in ("PREFECT_HOME", "PREFECT_LOCAL_STORAGE_PATH")}
    e["PATH"] = f"{Path(sys.executable).parent}:{e['PATH']}"
    return e


def run_stage(work: Path, stage: str, sets: list[str]) -> dict:
    """One stage under /usr/bin/time: wall seconds and peak RSS (MiB); the stage's stderr tail on failure."""
    p, wall, rss_kib = timed_run([sys.executable, "-m", f"stages.{stage}", *(a for s in sets for a in ("--set", s))],
                                 cwd=work, env=env())
    if wall is None:
        raise SystemExit(f"stage {stage} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    return {"seconds": round(wall, 1), "peak_rss_mib": round(rss_kib / 1024, 1)}


def clear_caches(work: Path) -> None:
    """Start from empty shard and LLM call caches in the work copy."""
    shutil.rmtree(work / ".kgrag_cache" / "shards", ignore_errors=True)
    for f in (work / ".kgrag_cache").glob("llm_calls.sqlite*"):
        f.unlink()


def one_run(work: Path, hops: int, sample: int, resume: bool, extra: list[str] = ()) -> dict:
    """The pipeline on ``sample`` questions (0 = all) of the ``hops``-hop test file (``extra``: more ``--set``
    overrides); per stage time and RSS, the metrics with their intervals."""
    if not resume:
        clear_caches(work)
    sets = [f"data.hops={hops}", f"data.sample={sample}", *extra]
    stages = {}
    for stage in STAGES:
        t0 = time.time()
        stages[stage] = run_stage(work, stage, sets)
        print(f"[bench] {hops}-hop sample={sample or 'all'}: {stage} {stages[stage]['seconds']:.0f} s, "
              f"{stages[stage]['peak_rss_mib']:.0f} MiB (started {time.strftime('%H:%M', time.localtime(t0))})",
              file=sys.stderr, flush=True)
    m = json.loads((work / "reports" / "metrics.json").read_text())
    n = m["questions"]
    out = {"questions": n, "stages": stages,
           "peak_rss_mib": max(s["peak_rss_mib"] for s in stages.values()),
           "seconds": round(sum(s["seconds"] for s in stages.values()), 1),
           "metrics": {k: m.get(k) for k in METRICS},
           "ci95": {k: m.get("ci95", {}).get(k) for k in METRICS},
           "answerable_fraction": m.get("answerable_fraction"), "failed": m.get("failed")}
    for stage in ("retrieve", "generate"):
        out[f"{stage}_questions_per_minute"] = round(n / stages[stage]["seconds"] * 60, 1)
    out["question_seconds"] = question_seconds(work)
    out["made_by"] = made_by()  # the row's own stamp: the file merges runs (one split a run, across sessions)
    return out


#: a question's recorded generate time past this was paused (SIGSTOP of a background run, a suspended machine),
#: not answering: the longest genuine one of the 3-hop split took 20.5 s
PAUSED_MS = 600_000.0


def answering_ms(records: list[dict]) -> dict:
    """Generate's answering time from per-question run records (``schema.GENERATE_TIMINGS`` rows): the sum of
    ``generate_ms`` over the questions this run answered with a backend call, and what was left out.

    - a question that made no call (``rank`` with one candidate: no ``call_cached`` entry) counts 0 ms: its own
      steps take milliseconds, and records written before its own time was measured hold the shard's mean;
    - a question past :data:`PAUSED_MS` was paused, and one answered wholly from the call cache was paid for
      by an earlier run: each is counted at the mean of the measured questions.
    """
    from kgrag import schema as S

    counts = {"measured": 0, "paused": 0, "cached": 0, "no_call": 0}
    measured = []
    for r in records:
        kind = record_kind(r)
        counts[kind] += 1
        if kind == "measured":
            measured.append(r.get(S.GENERATE_MS) or 0.0)
    mean = sum(measured) / len(measured) if measured else 0.0
    return {"ms": sum(measured) + (counts["paused"] + counts["cached"]) * mean, **counts}


def record_kind(r: dict) -> str:
    """What a generate run record's ``generate_ms`` measures (:func:`answering_ms`): ``no_call`` (no backend call),
    ``cached`` (every call from the call cache), ``paused`` (past :data:`PAUSED_MS`) or ``measured``."""
    from kgrag import schema as S

    if not r.get(S.CALL_CACHED):
        return "no_call"
    if r.get(S.CACHED):
        return "cached"
    if (r.get(S.GENERATE_MS) or 0.0) > PAUSED_MS:
        return "paused"
    return "measured"


def question_seconds(work: Path) -> dict:
    """Seconds spent on the questions themselves, summed from the per-question run records of retrieve and
    generate (``data/timings/<stage>/questions.parquet``: each question's time as its shard measured it, kept in
    the shard files), start-up left out; a run cut off and resumed (``--resume``) sums every part's, so its cost
    per question is measured though no single process ran it all. Generate's is :func:`answering_ms` (its
    counts under ``generate_questions``). ``llm_calls``: backend attempts of the questions answered by this run
    (0 for answers from the call cache)."""
    import pyarrow.parquet as pq

    from kgrag import schema as S

    out = {}
    f = work / "data" / "timings" / "retrieve" / "questions.parquet"
    if f.exists():
        out["retrieve"] = round(sum(x or 0.0 for x in pq.read_table(f).column(S.RETRIEVE_MS).to_pylist()) / 1000, 1)
    f = work / "data" / "timings" / "generate" / "questions.parquet"
    if f.exists():
        t = pq.read_table(f)
        got = answering_ms(t.to_pylist())
        out["generate"] = round(got.pop("ms") / 1000, 1)
        out["generate_questions"] = got
        if S.LLM_CALLS in t.column_names:
            out["llm_calls"] = int(sum(x or 0 for x in t.column(S.LLM_CALLS).to_pylist()))
    return out


#: candidate-count buckets of :func:`generate_cost`: (label, lowest, highest)
CANDIDATE_BUCKETS = (("0", 0, 0), ("1", 1, 1), ("2", 2, 2), ("3-5", 3, 5), ("6-9", 6, 9), ("10-19", 10, 19),
                     ("20-49", 20, 49), ("50+", 50, 1 << 30))


def generate_cost(work: Path) -> dict | None:
    """Where generate's time goes, from the work copy's outputs: each answered question's ``generate_ms`` (its run
    record; answers from the call cache, questions without a call and paused ones left out, as in
    :func:`answering_ms`) by the number of candidates ``rank`` scored (its trace), with its
    tokens (prompt + candidates, ``tokens_in``). ``rank`` evaluates the prompt on ``n_threads`` and the candidates
    in per-sequence KV streams on one thread (kgrag/llm/backends/llamacpp_engine.py), so a question's cost grows
    with its candidates. None without records or traces of ``rank``."""
    import pyarrow.parquet as pq

    from kgrag import schema as S

    gen = work / "data" / "generate" / "generations.parquet"
    rec = work / "data" / "timings" / "generate" / "questions.parquet"
    if not (gen.exists() and rec.exists()):
        return None
    ms = {r[S.QUESTION_ID]: r for r in pq.read_table(rec, columns=[S.QUESTION_ID, S.GENERATE_MS, S.CACHED,
                                                                     S.CALL_CACHED]).to_pylist()
          if record_kind(r) == "measured" and r[S.GENERATE_MS] is not None}
    rows = []
    for r in pq.read_table(gen, columns=[S.QUESTION_ID, S.TOKENS_IN, S.TRACE]).to_pylist():
        trace = json.loads(r[S.TRACE] or "{}")
        if r[S.QUESTION_ID] in ms and trace.get("reasoner") == "rank":
            rows.append((int(trace.get("candidates", 0)), r[S.TOKENS_IN] or 0, ms[r[S.QUESTION_ID]][S.GENERATE_MS]))
    if not rows:
        return None
    total = sum(m for _, _, m in rows)
    buckets = []  # a list: the buckets in order
    for label, lo, hi in CANDIDATE_BUCKETS:
        sel = [(t, m) for c, t, m in rows if lo <= c <= hi]
        if sel:
            buckets.append({"candidates": label, "questions": len(sel),
                            "tokens_in_mean": round(sum(t for t, _ in sel) / len(sel), 1),
                            "ms_mean": round(sum(m for _, m in sel) / len(sel), 1),
                            "time_share": round(sum(m for _, m in sel) / total, 4)})
    return {"questions": len(rows), "seconds": round(total / 1000, 1),
            "candidates_mean": round(sum(c for c, _, _ in rows) / len(rows), 2),
            "tokens_in_mean": round(sum(t for _, t, _ in rows) / len(rows), 1), "by_candidates": buckets}


def lift_paired(work: Path, resamples: int = 2000, seed: int = 0) -> dict | None:
    """The LLM's Hit@1 lift over each no-LLM candidate (first, random), paired per question from the work copy's
    ``reports/predictions.parquet``: the candidate's own Hit@1 (``hit_at_1``, beside the LLM's in ``metrics``), the
    mean lift, its seeded bootstrap 95% interval over questions, questions won and lost. None without predictions."""
    import numpy as np
    import pyarrow.parquet as pq

    from kgrag.evaluation.metrics import bootstrap_ci

    f = work / "reports" / "predictions.parquet"
    if not f.exists():
        return None
    t = pq.read_table(f, columns=["hit_at_1", "hit_baseline_first", "hit_baseline_random"]).to_pydict()
    hit = np.asarray(t["hit_at_1"], dtype=float)
    out = {}
    for name in ("first", "random"):
        d = hit - np.asarray(t[f"hit_baseline_{name}"], dtype=float)
        lo, hi = bootstrap_ci(d, resamples=resamples, seed=seed)  # as metrics.json's ci95
        out[name] = {"hit_at_1": round(float(np.mean(t[f"hit_baseline_{name}"])), 4),
                     "lift": round(float(d.mean()), 4), "low": lo, "high": hi,
                     "won": int((d > 0).sum()), "lost": int((d < 0).sum())}
    out["note"] = (f"Hit@1 of the LLM's answer minus the no-LLM candidate's, per question (reports/predictions.parquet); "
                   f"seeded bootstrap over questions (seed {seed}, {resamples:,} resamples), 95%")
    return out


def resumed(full: dict) -> None:
    """Mark a whole split run in parts (``--resume``): its stage seconds are the last part's (shards already
    written are read, not computed), so its retrieve / generate questions a minute come from every part's
    per-question seconds (start-up left out) instead."""
    full["resumed"] = True
    qs = full.get("question_seconds") or {}
    for stage in ("retrieve", "generate"):
        if qs.get(stage):
            full[f"{stage}_questions_per_minute"] = round(full["questions"] / qs[stage] * 60, 1)
        else:  # no per-question seconds: the last part's rate would be claimed for the whole
            full.pop(f"{stage}_questions_per_minute", None)
    full["questions_per_minute_from"] = "question_seconds (run in parts: stage seconds are the last part's)"


def drop_ratios(entry: dict, *also: str) -> None:
    """Take the entry's cost ratios (``per_question_cost_ratio*``) and the keys ``also`` out of it."""
    for key in [k for k in entry if k in also or k.startswith("per_question_cost_ratio")]:
        entry.pop(key)


def derive(entry: dict) -> None:
    """The entry's per-question cost ratios, whole split / 200 questions: ``per_question_cost_ratio`` from stage
    wall times (start-up included; left out for a resumed whole split, whose stage seconds are its last part's)
    and ``per_question_cost_ratio_answering`` from the per-question records (start-up left out; every part's).
    Ratios an earlier run left go first: with no whole split or no sample there is nothing to compare."""
    drop_ratios(entry)
    full, small = entry.get("full"), entry.get("sample_200")
    if not (full and small):
        return
    stages = ("evaluate", "report") if full.get("resumed") else ("retrieve", "generate", "evaluate", "report")
    entry["per_question_cost_ratio"] = {
        stage: round((full["stages"][stage]["seconds"] / full["questions"])
                     / (small["stages"][stage]["seconds"] / small["questions"]), 3) for stage in stages}
    qs_full, qs_small = full.get("question_seconds") or {}, small.get("question_seconds") or {}
    entry["per_question_cost_ratio_answering"] = {
        stage: round((qs_full[stage] / full["questions"]) / (qs_small[stage] / small["questions"]), 3)
        for stage in ("retrieve", "generate") if qs_full.get(stage) and qs_small.get(stage)}


#: the note of an entry whose whole split was not run (``--sample-only``), in place of any earlier hand note
SAMPLE_ONLY_NOTE = "200-question run only (--sample-only): the whole split was not run"


def sample_only(entry: dict) -> None:
    """An entry after a ``--sample-only`` run: its note says so where no whole split is kept, ratios re-derived."""
    if "full" not in entry:
        entry["note"] = SAMPLE_ONLY_NOTE
    derive(entry)


def whole_split(entry: dict, full: dict) -> None:
    """An entry whose whole split was just run: a hand note and cost ratios of the run it replaced go."""
    drop_ratios(entry, "note")
    entry["full"] = full


def kill_resume(work: Path, hops: int, n: int, extra: list[str] = ()) -> dict:
    """SIGKILL generate on ``n`` questions about half-way (by shard files written), then run it again."""
    sets = [f"data.hops={hops}", f"data.sample={n}", *extra]
    clear_caches(work)
    for stage in ("ingest", "validate", "index", "relplan", "retrieve"):
        run_stage(work, stage, sets)
    shard_dir = work / ".kgrag_cache" / "shards" / "generate"
    from kgrag.params import load

    shard_size = load(work / "params.yaml", sets).generate.shard_size  # the shards this run writes
    want = (n // shard_size) // 2
    proc = subprocess.Popen([sys.executable, "-m", "stages.generate", *(a for s in sets for a in ("--set", s))],
                            cwd=work, env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    t0 = time.time()
    while len(list(shard_dir.glob("*.arrow"))) < want and proc.poll() is None:
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    killed_after = time.time() - t0
    before = {p.name: p.stat().st_mtime_ns for p in shard_dir.glob("*.arrow")}
    calls_before = _cache_rows(work)
    t0 = time.time()
    run_stage(work, "generate", sets)
    resumed_s = time.time() - t0
    after = {p.name: p.stat().st_mtime_ns for p in shard_dir.glob("*.arrow")}
    rewritten = [f for f, t in before.items() if after.get(f) != t]
    new = [f for f in after if f not in before]
    attempts = 0
    import pyarrow.ipc as ipc

    from kgrag import schema as S
    for f in new:
        with open(shard_dir / f, "rb") as fh:
            attempts += sum(ipc.open_file(fh).read_all().column(S.LLM_CALLS).to_pylist())
    calls_after = _cache_rows(work)
    return {"made_by": made_by(), "questions": n, "shards": len(after), "killed_after_s": round(killed_after, 1),
            "finished_shards_at_kill": len(before), "finished_shards_recomputed": len(rewritten),
            "shards_computed_on_resume": len(new), "calls_in_cache_at_kill": calls_before,
            "backend_calls_on_resume": attempts, "calls_added_on_resume": calls_after - calls_before,
            "llm_calls_repeated": max(0, attempts - (calls_after - calls_before)), "resume_seconds": round(resumed_s, 1)}


def _cache_rows(work: Path) -> int:
    con = sqlite3.connect(work / ".kgrag_cache" / "llm_calls.sqlite")
    try:
        return int(con.execute("SELECT COUNT(*) FROM llm_calls").fetchone()[0])
    finally:
        con.close()


def llm_server_down(sets: list[str]) -> str | None:
    """Why a run whose overrides point the LLM at an OpenAI-compatible server (``generate.openai.base_url=...``)
    cannot start, or None: the server must answer ``GET <base_url>/models`` (any HTTP status) before any stage runs.
    Without it every question's calls would fail, be retried and be recorded as failures: a whole split of them,
    written over the committed row (``python -m bench rerun full_split`` runs the fault-server row's command too)."""
    urls = [s.split("=", 1)[1] for s in sets if s.startswith("generate.openai.base_url=")]
    if not urls:
        return None
    url = urls[-1].rstrip("/") + "/models"
    try:
        urllib.request.urlopen(url, timeout=5).close()
    except urllib.error.HTTPError:
        return None  # it answered
    except (OSError, ValueError) as e:
        return (f"no LLM server answers at {url} ({getattr(e, 'reason', e)}); start it first, e.g. the fault "
                "server: python -m tests.fault_server --port 8123 &")
    return None


def entry_key(hops: int, sets: list[str]) -> str:
    """A result's key: the split, then the overrides it ran with (``1-hop KEY=VALUE ...``)."""
    return " ".join([f"{hops}-hop", *sets])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hops", type=int, nargs="*", default=[1, 2, 3], help="MetaQA test files to run (1 2 3)")
    ap.add_argument("--workdir", default="/tmp/kgrag-full-split/main", help="work copy of the repository")
    ap.add_argument("--resume", action="store_true", help="keep the work copy's shard and call caches")
    ap.add_argument("--no-sample", action="store_true", help="skip the 200-question run of each split")
    ap.add_argument("--sample-only", action="store_true", help="only the 200-question run of each split (its "
                    "entry's whole-split figures kept, the cost ratios re-derived)")
    ap.add_argument("--kill-resume", type=int, default=0, metavar="N", help="only the kill-and-resume run on N")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="sets",
                    help="a params override for every run (repeatable), e.g. reason.rank.max_candidates=1; the "
                         "split's entry then goes under 'hops-hop KEY=VALUE'")
    ap.add_argument("--cost-only", action="store_true",
                    help="only read the work copy's finished whole split: its question_seconds, generate_cost "
                         "(time by candidates scored) and the entry's cost ratios")
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args()
    if not args.cost_only and (why := llm_server_down(args.sets)):
        raise SystemExit(f"[bench] {why}")
    work = workcopy(Path(args.workdir))
    out_path = Path(args.out)
    result = json.loads(out_path.read_text()) if out_path.exists() else {}
    result.pop("machine", None), result.pop("load", None), result.pop("load_warning", None)
    result["note"] = ("default params, MetaQA test files, stage by stage in a work copy; seconds and peak RSS of "
                      "each stage process (/usr/bin/time); intervals: seeded bootstrap 95% (metrics.json ci95)")
    if args.cost_only:  # a finished whole split's work copy: where its generate time went, ratios re-derived
        entry = result["splits"][entry_key(args.hops[0], args.sets)]
        entry["full"]["generate_cost"] = generate_cost(work)
        entry["full"]["question_seconds"] = question_seconds(work)
        entry["full"]["llm_lift_paired"] = lift_paired(work)
        if entry["full"].get("resumed"):
            resumed(entry["full"])
        derive(entry)
        write_result(str(out_path), result)
        return
    if args.kill_resume:
        result.setdefault("kill_resume", {})[entry_key(args.hops[0], args.sets)] = kill_resume(work, args.hops[0], args.kill_resume, args.sets)
        write_result(str(out_path), result)
        return
    splits = result.setdefault("splits", {})
    for hops in args.hops:
        entry = splits.setdefault(entry_key(hops, args.sets), {})
        entry["overrides"] = args.sets
        if not args.no_sample:
            entry["sample_200"] = one_run(work, hops, 200, args.resume, args.sets)
            write_result(str(out_path), result)
        if args.sample_only:
            sample_only(entry)
            write_result(str(out_path), result)
            continue
        whole_split(entry, one_run(work, hops, 0, args.resume, args.sets))
        if args.resume:  # its stage seconds are this part's only: read question_seconds for the whole cost
            resumed(entry["full"])
        entry["full"]["generate_cost"] = generate_cost(work)
        entry["full"]["llm_lift_paired"] = lift_paired(work)
        derive(entry)
        write_result(str(out_path), result)  # after each split: a cut-off bench keeps what it measured


if __name__ == "__main__":
    main()
