"""report.html and `kgrag serve` in a real browser: headless Chromium (Debian's `chromium`, installed by the
Makefile) driven by Playwright, on the small real MetaQA run of the session fixture ``e2e_first_run``.

No browser is downloaded: Playwright launches /usr/bin/chromium. Every request the page makes is recorded;
only file:// (the report) and the loopback server (serve) are allowed.
"""

from __future__ import annotations

import json
import os
import queue
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.conftest import E2E_SAMPLE, need

pytestmark = pytest.mark.e2e
CHROMIUM = Path("/usr/bin/chromium")


@pytest.fixture(scope="module")
def browser():
    import importlib.util

    need(importlib.util.find_spec("playwright") is not None, "playwright not installed (it is in the dev extra)")
    need(CHROMIUM.exists(), f"no {CHROMIUM} (make test installs Debian's chromium: apt-get install chromium)")
    from playwright import sync_api
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM))
        yield b
        b.close()


class Watched:
    """A page whose console errors, page errors and requested URLs are recorded."""

    def __init__(self, browser, **kw):
        self.page = browser.new_page(viewport={"width": 1400, "height": 1000}, **kw)
        self.errors: list[str] = []
        self.requests: list[str] = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("request", lambda r: self.requests.append(r.url))

    def visible_rows(self) -> int:
        return self.page.locator("#qlist tr.q:not([hidden])").count()


def _subgraph_nodes(retrieved: dict) -> set[int]:
    return set(retrieved["node_ids"] or []) | set(retrieved["triple_heads"] or []) | set(retrieved["triple_tails"] or [])


def test_report_html_in_chromium(shared_project, browser, tmp_path):
    import pyarrow.parquet as pq

    from kgrag.kg.duckdb_io import read_tables

    proj = shared_project
    # the report of the session's first run (the embedded SmolLM2 ranking), not an experiment an earlier test ran
    # in the shared project (`shared_project` puts each one back)
    setup = json.loads((proj / "reports" / "metrics.json").read_text())["setup"]
    assert (setup["backend"], setup["reasoner"]) == ("llamacpp", "rank"), setup
    report = proj / "reports" / "report.html"
    preds = pq.read_table(proj / "reports" / "predictions.parquet").to_pylist()
    retrieved = {r["question_id"]: r for r in pq.read_table(proj / "data" / "retrieve" / "retrieved.parquet").to_pylist()}
    questions = {q["question_id"]: q for q in
                 read_tables(proj / "data" / "validated" / "kg.duckdb", ("questions",))["questions"].to_pylist()}
    assert len(preds) == E2E_SAMPLE

    w = Watched(browser)
    page = w.page
    page.goto(report.as_uri())
    page.wait_for_selector("#qlist tr.q")
    assert w.errors == []
    assert all(u.startswith(("file://", "data:")) for u in w.requests), w.requests
    assert page.locator("#qlist tr.q").count() == len(preds) == w.visible_rows()
    assert page.locator("#metrics table").count() >= 2 and page.locator("#metrics img.fig").count() == 1
    page.screenshot(path=str(tmp_path / "report_list.png"), full_page=False)

    # each question's drawn graph: one node element per node of its retrieved subgraph; gold answers marked
    checked_gold = 0
    for i, row in enumerate(preds):
        page.locator(f'#qlist tr.q[data-index="{i}"]').click()
        view = page.locator(f"#view-{i}")
        assert view.is_visible() and page.locator("section.qview:visible").count() == 1
        want = _subgraph_nodes(retrieved[row["question_id"]])
        assert view.locator("svg.subgraph g.node").count() == len(want)
        drawn = {int(x) for x in view.locator("svg.subgraph g.node").evaluate_all("els => els.map(e => e.dataset.id)")}
        assert drawn == want
        gold_in = want & set(questions[row["question_id"]]["answer_ids"] or [])
        gold_drawn = {int(x) for x in view.locator("svg.subgraph g.node.gold").evaluate_all(
            "els => els.map(e => e.dataset.id)")}
        assert gold_drawn == gold_in
        checked_gold += bool(gold_in)
        topics = want & set(questions[row["question_id"]]["topic_ids"] or [])
        assert view.locator("svg.subgraph g.node.topic").count() == len(topics)
        if gold_in and checked_gold == 1:
            fill = view.locator("svg.subgraph g.node.gold .shape").first.evaluate("e => getComputedStyle(e).fill")
            plain = view.locator("svg.subgraph g.node:not(.gold):not(.topic) .shape").first.evaluate(
                "e => getComputedStyle(e).fill")
            assert fill != plain  # the gold answer is drawn differently
            page.screenshot(path=str(tmp_path / "report_question.png"), full_page=True)
            box = view.bounding_box()  # the README's picture: the page down to the question view's end
            page.screenshot(path=str(tmp_path / "report_question_view.png"), full_page=True,
                            clip={"x": 0, "y": 0, "width": page.viewport_size["width"],
                                  "height": box["y"] + box["height"] + 16})
    assert checked_gold >= 1  # the run's retrieval recall is > 0.3: some subgraph holds a gold answer

    # filters change the list
    n_correct = sum(1 for r in preds if not r["failed"] and r["hit_at_1"] > 0)
    page.select_option("#f-status", "correct")
    assert w.visible_rows() == n_correct
    page.select_option("#f-status", "wrong")
    assert w.visible_rows() == len(preds) - n_correct - sum(r["failed"] for r in preds)
    page.select_option("#f-status", "")
    n_miss = sum(1 for r in preds if r["retrieval_recall"] == 0)
    page.select_option("#f-retrieval", "miss")
    assert w.visible_rows() == n_miss
    page.select_option("#f-retrieval", "")
    qtype = preds[0]["qtype"]
    label = f"{preds[0]['hops']}-hop {qtype}" if qtype else f"{preds[0]['hops']}-hop"
    page.select_option("#f-type", label)
    assert w.visible_rows() == sum(1 for r in preds if (r["qtype"] or "") == (qtype or ""))
    page.select_option("#f-type", "")
    # search: a word of one question's text
    word = max(re.findall(r"\w{5,}", preds[3]["question"]), key=len).lower()
    page.fill("#f-search", word)
    want = sum(1 for r in preds if word in " ".join([r["question"], " ".join(r["gold"]), r["prediction"],
                                                    r["question_id"]]).lower())
    assert w.visible_rows() == want >= 1
    page.fill("#f-search", "no question has this text zq")
    assert w.visible_rows() == 0
    assert (tmp_path / "report_list.png").stat().st_size > 10_000
    assert (tmp_path / "report_question.png").stat().st_size > 10_000
    if os.environ.get("KGRAG_DOCS_PNG"):  # the README's picture: `KGRAG_DOCS_PNG=docs/img pytest -k report_html_in`
        out = Path(os.environ["KGRAG_DOCS_PNG"])
        out.mkdir(parents=True, exist_ok=True)
        shutil.copy2(tmp_path / "report_question_view.png", out / "report_question.png")
    assert w.errors == [] and all(u.startswith(("file://", "data:")) for u in w.requests), (w.errors, w.requests)
    page.close()


def test_ask_html_page(shared_project, browser, tmp_path):
    """`kgrag ask --html` writes the view of one question; it opens offline with its graph drawn."""
    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_HOME", "PREFECT_LOCAL_STORAGE_PATH")}
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
    out = tmp_path / "ask.html"
    p = subprocess.run(["kgrag", "ask", "who directed the movies starred by [Al Pacino]", "--html", str(out),
                        "--set", "generate.max_tokens=8"], cwd=shared_project, env=env, capture_output=True,
                       text=True,
                       timeout=900)
    assert p.returncode == 0, p.stdout + p.stderr
    n = int(re.search(r"retrieved (\d+) triples", p.stdout).group(1))
    w = Watched(browser)
    w.page.goto(out.as_uri())
    view = w.page.locator("section.qview")
    # every triple is drawn: one arrow per (head, tail) pair, parallel relations as one arrow's labels
    svg = w.page.locator("svg.subgraph")
    assert n > 0 and view.count() == 1 and svg.get_attribute("data-edges") == str(n)
    assert 0 < w.page.locator("svg.subgraph g.edge").count() <= n
    assert w.page.locator('svg.subgraph g.node.topic[data-name="Al Pacino"]').count() == 1
    assert w.page.locator("table.calls tbody tr").count() >= 1
    assert w.errors == [] and all(u.startswith("file://") for u in w.requests), (w.errors, w.requests)
    w.page.close()


@pytest.fixture
def server(shared_project):
    """`kgrag serve --port 0` in the project (real SmolLM2, 8 tokens); its URL; stopped at teardown."""
    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_HOME", "PREFECT_LOCAL_STORAGE_PATH")}
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
    proc = subprocess.Popen(["kgrag", "serve", "--set", "generate.max_tokens=8"], cwd=shared_project, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout], daemon=True).start()
    try:
        seen = []
        url = None
        while url is None:
            try:
                line = lines.get(timeout=600)  # bounded: loading the KG, index and model
            except queue.Empty:
                pytest.fail(f"kgrag serve printed no URL in 600 s: {''.join(seen)}")
            seen.append(line)
            m = re.search(r"kgrag serve: (http://127\.0\.0\.1:\d+/)", line)
            url = m.group(1) if m else None
            if proc.poll() is not None and url is None and lines.empty():
                pytest.fail(f"kgrag serve exited {proc.returncode}: {''.join(seen)}")
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)


def test_serve_answers_a_typed_question(server, browser, tmp_path):
    import httpx

    assert httpx.get(server, timeout=30).status_code == 200
    w = Watched(browser)
    page = w.page
    page.goto(server)
    page.fill("#q", "who directed the movies starred by [Al Pacino]")
    page.keyboard.press("Enter")
    page.wait_for_selector("#answers section.qview", timeout=600_000)
    view = page.locator("#answers section.qview").first
    assert "Al Pacino" in view.locator("h2").inner_text()
    assert view.locator('svg.subgraph g.node.topic[data-name="Al Pacino"]').count() == 1
    assert view.locator("svg.subgraph g.node").count() >= 2 and view.locator("table.calls tbody tr").count() >= 1
    page.screenshot(path=str(tmp_path / "serve.png"), full_page=True)
    assert (tmp_path / "serve.png").stat().st_size > 10_000
    assert w.errors == [], w.errors
    assert all(u.startswith(server) or u.startswith("data:") for u in w.requests), w.requests
    page.close()


def _synthetic_report(n: int, views: int) -> str:
    """report.html of ``n`` synthetic MetaQA-like questions (5 answers, 8 triples each), ``views`` with a full
    view, built by the report stage's own ``run_report``."""
    from kgrag import schema as S
    from kgrag.reporting.report_html import run_report

    names = [f"Entity {i}" for i in range(100)]
    rows, retrieved, questions = [], [], []
    for i in range(n):
        qid = f"q{i}"
        gold = [names[(i + k) % 100] for k in range(5)]
        rows.append({S.QUESTION_ID: qid, "question": f"which films share a director with [{names[i % 100]}] {i}",
                     "gold": gold, S.PREDICTION: gold[0] if i % 3 else "Entity 99", S.PREDICTED_ANSWERS: [gold[0]],
                     "hit_at_1": float(i % 3 != 0), "hit_any": float(i % 3 != 0), "f1": 0.3, "retrieval_recall": 1.0,
                     S.FAILED: False, S.HOPS: 2, S.QTYPE: "", S.REASONER: "rank", S.TRACE: "{}"})
        heads = [i % 100] * 4 + [(i + 1) % 100] * 4
        tails = [(i + k) % 100 for k in range(1, 9)]
        retrieved.append({S.QUESTION_ID: qid, S.TRIPLE_HEADS: heads, S.TRIPLE_RELATIONS: [0] * 8,
                          S.TRIPLE_TAILS: tails, S.NODE_IDS: sorted(set(heads + tails))})
        questions.append({S.QUESTION_ID: qid, S.TOPIC_IDS: [i % 100], S.ANSWER_IDS: [(i + k) % 100 for k in range(5)]})
    return run_report(rows=rows, retrieved=retrieved, questions=questions,
                      entity_name=lambda ids: [names[j] for j in ids], relation_name=lambda ids: ["directed_by"] * len(ids),
                      report_md="# kgrag report\n\n| metric | value |\n|---|---|\n| Hit@1 | 0.667 |\n", max_questions=views)


def test_a_15000_question_report_stays_small_and_pages_its_list(browser, tmp_path):
    """A full-split report: full views for report.html_max_questions (200), the 15,000-question list as JSON
    rendered a page (200 rows) at a time; filters and search run over all 15,000; the page opens offline.
    The open time is printed (a measurement, no timed assertion: docs/report.md quotes it)."""
    import time

    from kgrag.reporting.report_html import LIST_PAGE

    n = 15_000
    page_html = _synthetic_report(n, views=200)
    out = tmp_path / "report.html"
    out.write_text(page_html, encoding="utf-8")
    size_mb = out.stat().st_size / 1e6
    small = _synthetic_report(200, views=200)
    w = Watched(browser)
    t0 = time.perf_counter()
    w.page.goto(out.as_uri(), wait_until="load")
    w.page.wait_for_selector("#qlist tr.q")
    opened = time.perf_counter() - t0
    print(f"15,000-question report.html: {size_mb:.1f} MB (200 questions: {len(small.encode()) / 1e6:.1f} MB), "
          f"opened in Chromium in {opened:.2f} s")
    page = w.page
    assert size_mb < 4 * len(small.encode()) / 1e6 + 10  # the views stay 200; the list grows by bytes a question
    assert w.visible_rows() == LIST_PAGE
    assert page.locator("#f-count").inner_text() == f"{n} of {n} questions (page 1 of {n // LIST_PAGE})"
    assert page.locator("section.qview").count() == 200
    page.click("#f-next")
    assert page.locator("#qlist tr.q").first.get_attribute("data-index") == str(LIST_PAGE)
    # a question beyond the views says so when picked
    page.locator('#qlist tr.q[data-index="250"]').click()
    assert page.locator("#noview").is_visible() and "html_max_questions" in page.locator("#noview").inner_text()
    # filters run over every question, not the page shown
    page.select_option("#f-status", "wrong")
    assert page.locator("#f-count").inner_text().startswith(f"{n // 3} of {n} questions")
    page.select_option("#f-status", "")
    page.fill("#f-search", "[entity 7] 14007")
    assert w.visible_rows() == 1 and page.locator("#f-count").inner_text() == f"1 of {n} questions"
    page.locator("#qlist tr.q").first.click()
    assert page.locator("#noview").is_visible()  # 14007 has no view
    assert w.errors == [] and all(u.startswith(("file://", "data:")) for u in w.requests), (w.errors, w.requests)
    page.close()
    # a link to a question deep in the list opens the list at its page
    w = Watched(browser)
    w.page.goto(out.as_uri() + "#q450", wait_until="load")
    w.page.wait_for_selector("#qlist tr.q")
    assert w.page.locator("#qlist tr.q.sel").get_attribute("data-index") == "450"
    assert w.page.locator("#f-count").inner_text().endswith(f"(page 3 of {n // LIST_PAGE})")
    assert w.errors == [], w.errors
    w.page.close()
