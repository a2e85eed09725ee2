"""Reliability: LLM faults from a real fault-injecting HTTP server, a SIGKILLed generate stage that resumes,
and two DVC experiments run in parallel from the queue."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sqlite3
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

import httpx
import pytest

from kgrag import schema as S
from kgrag.llm.backends.llamacpp_server import free_port
from kgrag.params import GenerateParams, ReasonParams
from tests.conftest import E2E_SAMPLE, ROOT, experiment_params, flow_inputs, run, shard_rows

N_QUESTIONS = 12


class FaultServer:
    """``tests/fault_server.py`` in its own process on a free loopback port."""

    def __init__(self, *args: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.fault_server", "--port", str(self.port), *args],
                                     cwd=ROOT)
        for _ in range(100):
            try:
                httpx.get(f"{self.url}/models", timeout=1)
                return
            except httpx.HTTPError:
                time.sleep(0.1)
        raise RuntimeError("fault server did not start")

    def requests(self) -> list[dict]:
        return httpx.get(f"{self.url}/stats", timeout=5).json()["requests"]

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def faulty():
    srv = FaultServer("--faults", "--slow-s", "120")  # a slow reply is held until its retry arrives
    yield srv
    srv.stop()


def _rows(n: int) -> tuple[list[dict], list[dict]]:
    tag = uuid.uuid4().hex[:8]  # fresh prompts: nothing cached from earlier sessions
    qs = [{S.QUESTION_ID: f"q{i}", S.SPLIT: "test", S.HOPS: 1, S.TEXT: f"who directed [Film {i} {tag}]",
           S.QTYPE: "", S.TOPIC_IDS: [], S.ANSWER_IDS: [], S.ANSWERS: [f"Director {i}"]} for i in range(n)]
    return qs, []


@pytest.mark.slow
def test_generate_flow_survives_every_fault_and_retries_failures_next_run(faulty, tmp_path, movies_db):
    """Every fault class meets the real HTTP client: transient ones are retried away, permanent ones are
    recorded per question, the run completes, and a re-run asks again only for the failed questions."""
    from flows.generate import generate_flow
    from kgrag.evaluation.evaluate import evaluate_rows

    # the client's 5 s timeout is what ends a `slow` fault (the server holds it until the retry comes); every
    # other reply is immediate, so the attempt counts below do not depend on the machine's load
    params = GenerateParams(backend="openai", openai={"base_url": faulty.url, "concurrency": 1}, timeout_s=5.0,
                            retries=2, backoff_s=0.05, shard_size=5, max_tokens=8)
    qs, retrieved = _rows(N_QUESTIONS)
    kw = dict(**flow_inputs(tmp_path, qs, retrieved), db_path=str(movies_db),
              # one generated reply (`answer`): the fault server returns no log-probs
              params=experiment_params(generate=params, reason=ReasonParams(method="answer")),
              cache_path=str(tmp_path / "calls.sqlite"))
    rows = shard_rows(generate_flow(**kw)["shards"])
    reqs = faulty.requests()
    faults = Counter(r["fault"] for r in reqs)
    assert {"http500", "malformed", "slow", "truncated", "not_json"} <= set(faults), faults
    klass = {r["key"]: r["class"] for r in reqs}
    permanent = {k for k, c in klass.items() if c in (0, 1)}
    assert len(rows) == N_QUESTIONS and len(klass) == N_QUESTIONS
    failed = [r for r in rows if r[S.FAILED]]
    assert len(failed) == len(permanent) == 4
    for r in failed:  # 1 try + 2 retries, each error kept
        assert r[S.LLM_CALLS] == 3 and r[S.ERROR] and r[S.PREDICTION] == ""
    attempts = Counter(r["key"] for r in reqs)
    transient = {k for k, c in klass.items() if 2 <= c <= 5}
    assert all(attempts[k] == 2 for k in transient) and all(attempts[k] == 1 for k in klass
                                                                if k not in transient | permanent)
    ok = [r for r in rows if not r[S.FAILED]]
    assert all(r[S.PREDICTION] == "unknown" for r in ok)  # no context: the server's answer for no triple
    _, metrics = evaluate_rows(questions=qs, retrieved=retrieved, generations=rows)
    assert metrics["failed"] == 4 and metrics["answered"] == N_QUESTIONS - 4

    # the re-run: finished shards come from their shard files, finished calls from the call cache; only the 4 failed
    # questions are asked again (and fail again: their fault is permanent)
    again = shard_rows(generate_flow(**kw)["shards"])
    new = faulty.requests()[len(reqs):]
    assert {r["key"] for r in new} == permanent and len(new) == 4 * 3
    assert [r[S.FAILED] for r in again] == [r[S.FAILED] for r in rows]


# ------------------------------------------------------------------ the real pipeline (e2e copy)

def _metrics(project: Path) -> dict:
    return json.loads((project / "reports" / "metrics.json").read_text())  # timings are in reports/timings.json


@contextlib.contextmanager
def own_kgrag_cache(project: Path):
    """The test runs with an empty ``.kgrag_cache`` (shard files, LLM call cache); the shared project's own is
    put back afterwards, so later tests keep its finished calls."""
    cache, saved = project / ".kgrag_cache", project / ".kgrag_cache.saved"
    if cache.exists():
        cache.rename(saved)
    try:
        yield cache / "llm_calls.sqlite"
    finally:
        shutil.rmtree(cache, ignore_errors=True)
        if saved.exists():
            saved.rename(cache)


def _calls(db: Path) -> dict[str, float]:
    """{call key: time stored} of the call cache at ``db`` ({} before it exists). A call made again would be
    stored again (INSERT OR REPLACE), with a new time."""
    if not db.exists():
        return {}
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=60)
    try:
        return dict(con.execute("SELECT call_key, created FROM llm_calls").fetchall())
    except sqlite3.OperationalError:  # the table is not made yet
        return {}
    finally:
        con.close()


def _wait_for(what: str, cond, proc: subprocess.Popen, limit_s: float = 900) -> None:
    """Poll ``cond`` until true; fail (killing ``proc``) if the process ends first or after ``limit_s``, a
    safety net far above the time the event takes, never a window the test depends on."""
    deadline = time.time() + limit_s
    while not cond():
        if proc.poll() is not None or time.time() > deadline:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            pytest.fail(f"never saw {what} (stage exit code {proc.poll()})")
        time.sleep(0.05)


def _stage(project: Path, sets: list[str]) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_HOME", "PREFECT_LOCAL_STORAGE_PATH")}
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
    return subprocess.Popen([sys.executable, "-m", "stages.generate", *sets], cwd=project, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


@pytest.mark.e2e
def test_sigkilled_generate_resumes_without_repeating_a_finished_call(shared_project):
    """SIGKILL the generate stage after exactly half its LLM calls (the server holds the next one: no clock
    decides where the kill lands); the next run finishes the job, repeats no call that had finished, and ends
    with the metrics of an uninterrupted run."""
    project = shared_project
    half = E2E_SAMPLE // 2
    srv = FaultServer("--hold-after", str(half))
    try:
        # the fault server generates text but returns no prompt logprobs: the `answer` reasoner here; the default
        # path (in-process llama.cpp, `rank`) has its own test below
        sets = ["--set", "generate.backend=openai", "--set", f"generate.openai.base_url={srv.url}",
                "--set", "generate.openai.concurrency=1", "--set", "reason.method=answer"]
        with own_kgrag_cache(project) as db:
            proc = _stage(project, sets)
            # `half` replies sent and stored in the call cache, the next request held by the server
            _wait_for(f"{half} stored calls and a held one", lambda: len(_calls(db)) == half and sum(
                r["end"] is None for r in srv.requests()) == 1, proc)
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            before = srv.requests()
            finished = {r["key"] for r in before if r["end"] is not None}
            stored = _calls(db)
            httpx.post(f"{srv.url}/release", timeout=5)  # the held request now gets its (unread) reply
            assert len(finished) == half and set(stored) and len(stored) == half
            run([sys.executable, "-m", "stages.generate", *sets], project)
            run([sys.executable, "-m", "stages.evaluate", *sets], project)
            resumed = srv.requests()[len(before):]
            assert not {r["key"] for r in resumed} & finished  # no finished call asked again
            assert {k: t for k, t in _calls(db).items() if k in stored} == stored  # nor stored again
            assert len({r["key"] for r in before} | {r["key"] for r in resumed}) == E2E_SAMPLE
            interrupted = _metrics(project)

        # reference: the same stage uninterrupted, with no cache at all
        with own_kgrag_cache(project):
            run([sys.executable, "-m", "stages.generate", *sets], project)
            run([sys.executable, "-m", "stages.evaluate", *sets], project)
        assert _metrics(project) == interrupted
        assert interrupted["failed"] == 0 and interrupted["questions"] == E2E_SAMPLE
    finally:
        srv.stop()


@pytest.mark.e2e
def test_sigkilled_default_generate_resumes_without_repeating_a_scoring_call(shared_project):
    """The default path (in-process llama.cpp, the real SmolLM2, `rank`'s scoring calls): SIGKILL the generate
    stage once some scoring calls are stored and before all are; the resumed run makes no stored call again
    and writes the same generations, byte for byte, as the session's uninterrupted `dvc repro`."""
    project = shared_project
    out = project / "data" / "generate" / "generations.parquet"
    reference = out.read_bytes()  # the uninterrupted run's (shared_project: as dvc.lock says)
    import pyarrow.parquet as pq

    # rank makes one scoring call per question with a choice to make (2+ candidates), none for one candidate
    calls = sum(json.loads(t)["candidates"] >= 2 for t in pq.read_table(out, columns=[S.TRACE]).column(0).to_pylist())
    assert calls >= 5, f"the e2e sample needs questions with a choice for a kill mid-run: {calls}"
    with own_kgrag_cache(project) as db:
        proc = _stage(project, [])
        # the calls come seconds apart: stop after the first few are stored
        _wait_for("3 stored scoring calls", lambda: len(_calls(db)) >= 3, proc)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        stored = _calls(db)
        assert 3 <= len(stored) < calls, f"the kill must land mid-run: {len(stored)} of {calls} calls stored"
        run([sys.executable, "-m", "stages.generate"], project)
        after = _calls(db)
        assert {k: t for k, t in after.items() if k in stored} == stored  # no stored call made again
        assert len(after) == calls  # and every other question's call made once
    assert out.read_bytes() == reference


def _named_metrics(node):
    """(experiment name, metrics.json data) of every named experiment in `dvc exp show --json` output."""
    if isinstance(node, dict):
        if node.get("name") in ("short", "long") and isinstance(node.get("data"), dict):
            yield node["name"], node["data"]["metrics"]["reports/metrics.json"]["data"]
            return
        for v in node.values():
            yield from _named_metrics(v)
    elif isinstance(node, list):
        for v in node:
            yield from _named_metrics(v)


@pytest.mark.e2e
def test_two_queued_experiments_run_in_parallel_without_interference(shared_project):
    """`dvc exp run --queue` twice, `dvc exp run --run-all -j 2`: each experiment's metrics equal those of the
    same params run alone, so neither corrupted the other's DuckDB files, caches or reports."""
    project = shared_project
    srv = FaultServer()
    try:
        run(["dvc", "repro"], project)  # the workspace back in line with params.yaml
        run(["git", "add", "-A"], project)
        run(["git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "baseline"], project)
        # the fault server generates text but returns no prompt logprobs: the `answer` reasoner, not the default
        # `rank` (which needs a scoring backend); max_tokens then changes what each experiment generates
        common = ["-S", "generate.backend=openai", "-S", f"generate.openai.base_url={srv.url}",
                  "-S", "reason.method=answer"]
        for name, tokens in (("short", 16), ("long", 40)):
            run(["dvc", "exp", "run", "--queue", "-n", name, *common, "-S", f"generate.max_tokens={tokens}"],
                project)
        run(["dvc", "exp", "run", "--run-all", "-j", "2"], project)
        out = subprocess.run(["dvc", "exp", "show", "--json"], cwd=project, capture_output=True, text=True,
                             check=True, env={**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"})
        exps = dict(_named_metrics(json.loads(out.stdout)))
        assert set(exps) == {"short", "long"}
        for name, m in exps.items():
            assert m["questions"] == E2E_SAMPLE and m["failed"] == 0
        # each one alone, in the workspace, generate and what follows it forced: without -f DVC's run cache would
        # restore the queued runs' own outputs (only `report` ran), and the comparison could not fail
        for name, tokens in (("short", 16), ("long", 40)):
            out = run(["dvc", "exp", "run", "-f", "--downstream", "generate", *common,
                       "-S", f"generate.max_tokens={tokens}"], project)
            assert "Running stage 'generate'" in out and "Running stage 'evaluate'" in out, out[-2000:]
            alone = json.loads((project / "reports" / "metrics.json").read_text())
            for k in ("hit_at_1", "hit_any", "f1", "retrieval_recall", "context_triples_mean", "failed"):
                assert exps[name][k] == alone[k], (name, k)
    finally:
        srv.stop()  # the workspace experiments' params and outputs are put back by `shared_project`
