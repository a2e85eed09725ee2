"""report.html's builder (kgrag/reporting/report_html.py) on tiny KGs: the drawn graph matches the subgraph, roles are
marked, every name is escaped, the list covers every question, traces of the real reasoners (driven by a
scripted LLM) are drawn. The page in a real browser: tests/test_report_browser.py."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser

import numpy as np
import pytest

from kgrag.reporting import graph_svg as G
from kgrag.reporting import report_html as R
from kgrag.reporting import trace_views as T
from kgrag import schema as S
from kgrag.kg.duckdb_io import write_duckdb
from kgrag.kg.store import KGStore
from tests.conftest import tiny_tables
from tests.test_golden_reasoners import gkg  # noqa: F401  (fixture)


class Elements(HTMLParser):
    """Every start tag with its attributes, and the page's text."""

    def __init__(self, page: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict]] = []
        self.text: list[str] = []
        self.feed(page)

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)

    def find(self, tag: str, cls: str | None = None) -> list[dict]:
        return [a for t, a in self.tags if t == tag and (cls is None or cls in (a.get("class") or "").split())]


def _sub(kg: KGStore, edges: list[int], extra_nodes=()) -> R.NamedSubgraph:
    e = np.asarray(edges)
    return R.subgraph_from_ids(
        heads=kg.heads[e], relations=kg.relations[e], tails=kg.tails[e], node_ids=list(extra_nodes),
        entity_name=kg.names, relation_name=lambda ids: [str(x) for x in kg.relation_names[np.asarray(ids)]])


def _row(**kw) -> dict:
    base = {S.QUESTION_ID: "q0", "question": "who directed [Heat]", S.QTYPE: "movie_to_director", S.HOPS: 1,
            "gold": ["Michael Mann"], S.PREDICTION: "Al Pacino", S.PREDICTED_ANSWERS: ["Al Pacino"],
            "hit_at_1": 0.0, "hit_any": 0.0, "f1": 0.0, "retrieval_recall": 1.0, S.FAILED: False, S.TRACE: None}
    return {**base, **kw}


def test_graph_has_a_node_element_per_subgraph_node_and_marks_roles(kg):
    ids = kg.ids_of(["Heat", "Michael Mann", "Al Pacino", "Top Gun"])
    heat, mann, pacino, topgun = ids
    edges = [i for i in range(len(kg.heads)) if int(kg.heads[i]) == heat]  # Heat's 3 triples
    sub = _sub(kg, edges, extra_nodes=[topgun])  # an isolated node the retriever kept
    data = R.QuestionData(row=_row(gold=["Michael Mann", "Tom Cruise"]), subgraph=sub, topic_ids=[heat],
                          answer_ids=[mann, kg.ids_of(["Tom Cruise"])[0]])
    page = Elements(R.question_view(data))
    nodes = page.find("g", "node")
    assert len(nodes) == len(sub.nodes) == 5  # Heat, its 3 neighbours, Top Gun
    assert page.find("svg", "kg")[0]["data-nodes"] == "5"
    role = {a["data-name"]: set(a["data-roles"].split()) for a in nodes}
    assert role["Heat"] == {"topic"} and role["Michael Mann"] == {"gold"} and role["Al Pacino"] == {"pred"}
    assert role["Top Gun"] == set() and role["Robert De Niro"] == set()
    assert len(page.find("g", "edge")) == 3
    assert "".join(page.text).count("directed_by") >= 1
    missing = [a for a in page.find("p", "missing")]
    assert missing and "Tom Cruise" in "".join(page.text).split("gold answers not in the subgraph:")[1]


def test_layout_is_deterministic_and_inside_the_box():
    edges = [(i, (i * 7 + 3) % 40) for i in range(40)] + [(i, i + 1) for i in range(39)]
    a = G.layout(40, edges, seed=0, width=900, height=600)
    assert a == G.layout(40, edges, seed=0, width=900, height=600)
    assert a != G.layout(40, edges, seed=1, width=900, height=600)
    assert all(0 <= x <= 900 and 0 <= y <= 600 for x, y in a)
    assert len({(round(x), round(y)) for x, y in a}) == 40  # no two nodes on one spot


NASTY = [('Tom & "Jerry"', "rel<x>", "<script>alert(1)</script>"),
         ("O'Brien", "rel<x>", "a </svg><b>bold</b>")]


@pytest.fixture
def nasty(tmp_path) -> KGStore:
    path = tmp_path / "kg.duckdb"
    write_duckdb(path, tiny_tables(NASTY))
    return KGStore(path)


def test_every_name_reply_and_question_is_escaped(nasty):
    sub = _sub(nasty, [0, 1])
    trace = {"reasoner": "cot", "thought": "<img src=x onerror=alert(1)>",
             "calls": [{"key": "k<1>", "tokens_in": 3, "tokens_out": 1, "cached": False, "attempts": 1,
                        "error": None, "reply": "</pre><script>x()</script>"}]}
    row = _row(question='who is <b>"Tom & Jerry"</b>?', gold=["<script>alert(1)</script>"],
               prediction="<i>x</i>", predicted_answers=["a </svg><b>bold</b>"], trace=json.dumps(trace))
    view = R.question_view(R.QuestionData(row=row, subgraph=sub, topic_ids=nasty.ids_of(["O'Brien"])))
    page = R.report_page(rows=[row], views={0: view}, report_md="# r\n\n| a | b |\n|---|---|\n| <x> | `&` |\n")
    for raw in ("<script>alert", "<img", "<b>bold", "<b>\"Tom", "</pre><script>", "<i>x", "<x>"):
        assert raw not in page, raw
    assert page.count("<script>") == 1  # the page's own script only
    els = Elements(page)
    names = {a["data-name"] for a in els.find("g", "node")}
    assert names == {'Tom & "Jerry"', "<script>alert(1)</script>", "O'Brien", "a </svg><b>bold</b>"}
    roles = {a["data-name"]: a["data-roles"] for a in els.find("g", "node")}
    assert roles["<script>alert(1)</script>"] == "gold" and roles["a </svg><b>bold</b>"] == "pred"
    assert roles["O'Brien"] == "topic"
    text = "".join(els.text)
    assert "<img src=x onerror=alert(1)>" in text and "</pre><script>x()</script>" in text  # shown as text
    assert len(els.find("svg", "kg")) == 1  # a name with </svg> did not end the drawing


def test_report_lists_every_question_and_bounds_the_views(kg):
    rows = [_row(**{S.QUESTION_ID: f"q{i}", "question": f"question {i}"}) for i in range(5)]
    rows[1].update(hit_at_1=1.0)
    rows[2].update(failed=True, retrieval_recall=0.0)
    rows[3].update(retrieval_recall=None, hops=2)
    heat = kg.ids_of(["Heat"])[0]
    retrieved = [{S.QUESTION_ID: f"q{i}", S.TRIPLE_HEADS: [int(kg.heads[0])], S.TRIPLE_RELATIONS: [int(kg.relations[0])],
                  S.TRIPLE_TAILS: [int(kg.tails[0])], S.NODE_IDS: []} for i in range(5)]
    questions = [{S.QUESTION_ID: f"q{i}", S.TOPIC_IDS: [heat], S.ANSWER_IDS: []} for i in range(5)]
    page = R.run_report(rows=rows, retrieved=retrieved, questions=questions, entity_name=kg.names,
                        relation_name=lambda ids: [str(x) for x in kg.relation_names[np.asarray(ids)]],
                        report_md="# kgrag report\n\n## Metrics\n\n![fig](figures/f.png)\n\n## Examples\n\nEXAMPLE\n",
                        images={"figures/f.png": b"\x89PNG fake"}, max_questions=3)
    els = Elements(page)
    # the list is JSON (rendered a page at a time by the page's script): [index, text, status, retrieval, type,
    # search text, has a view]
    data = re.search(r'<script type="application/json" id="qdata">(.*?)</script>', page, re.S).group(1)
    items = json.loads(data)
    assert [d[0] for d in items] == [0, 1, 2, 3, 4]
    assert [d[2] for d in items] == ["wrong", "correct", "failed", "wrong", "wrong"]
    assert [d[3] for d in items] == ["hit", "hit", "miss", "n/a", "hit"]
    assert items[3][4] == "2-hop movie_to_director"
    assert len(els.find("section", "qview")) == 3 and [d[6] for d in items] == [True] * 3 + [False] * 2
    assert "EXAMPLE" not in page  # the views replace report.md's examples
    img = els.find("img", "fig")[0]["src"]
    assert img.startswith("data:image/png;base64,")
    assert "http://" not in page and "https://" not in page  # nothing to fetch


def _tog_trace(kg):
    from tests.test_tog_fasttog import run, tog_script

    res, calls, _ = run("tog", kg, tog_script, width=1, depth=3)
    return res, calls


def _gen_row(res, calls, reasoner: str) -> dict:
    from kgrag.reasoning.reasoners import rows_of

    (g,) = rows_of(question_ids=["q0"], results=[(res, calls)], reasoner=reasoner, separator="|", seed=0, per_q_ms=0)
    return _row(trace=g[S.TRACE], prediction=g[S.PREDICTION], predicted_answers=g[S.PREDICTED_ANSWERS])


def _all_edges(kg) -> R.NamedSubgraph:
    return _sub(kg, list(range(len(kg.heads))))


def test_tog_chain_is_coloured_on_the_graph_and_drawn_as_a_walk(kg):
    res, calls = _tog_trace(kg)
    view = R.question_view(R.QuestionData(row=_gen_row(res, calls, "tog"), subgraph=_all_edges(kg),
                                          topic_ids=kg.ids_of(["Al Pacino"])))
    sub_part, walk_part = view.split('<svg class="kg walk')
    els = Elements(sub_part)
    chained = sorted(a["data-name"] for a in els.find("g", "node") if a["data-chains"])
    assert chained == ["Al Pacino", "Heat", "Michael Mann"]  # (Heat, starred_actors, Al Pacino) → (Heat, directed_by, ...)
    assert len(els.find("g", "chain")) == 2  # its two edges
    walk = Elements('<svg class="kg walk' + walk_part)
    assert sorted(a["data-name"] for a in walk.find("g", "node")) == ["Al Pacino", "Heat", "Michael Mann"]
    roles = {a["data-name"]: a["data-roles"] for a in walk.find("g", "node")}
    assert roles["Al Pacino"] == "topic" and "pred" in roles["Michael Mann"]
    assert len(walk.find("g", "chain")) == 2
    calls_rows = Elements(view.split('<table class="calls">')[1]).find("tr")
    assert len(calls_rows) == len(calls) + 1 == 7
    assert "chain 1" in "".join(Elements(view).text)


def test_fasttog_communities_are_coloured(kg):
    from tests.test_tog_fasttog import fast_script, run

    res, calls, _ = run("fasttog", kg, fast_script, width=1, d_max=3)
    assert res.trace["depths"] == []  # answered in the initial phase: its chains are the ones drawn
    members = {n for c in res.trace["initial"]["chains"][0] for n in c}
    view = R.question_view(R.QuestionData(row=_gen_row(res, calls, "fasttog"), subgraph=_all_edges(kg)))
    els = Elements(view)
    chained = {a["data-name"] for a in els.find("g", "node") if a["data-chains"] == "0"}
    assert chained == members and members
    chain = res.trace["initial"]["chains"][0]  # drawn as start → one box per community
    assert [int(a["data-members"]) for a in els.find("span", "comm") if "start" not in a["class"]] == \
        [len(c) for c in chain]


def test_got_agent_search_is_drawn_as_a_tree(kg, index):
    from kgrag.reasoning.reasoners.strategies import EVAL_SYSTEM
    from tests.test_agent_explore import q, run, system, turns, user

    first = {0: "Thought: director.\nAction: NeighborCheck[Heat, directed_by]",
             1: "Thought: cast.\nAction: NeighborCheck[Heat, starred_actors]"}

    def reply(r):
        if system(r) == EVAL_SYSTEM:
            return "{A}" if "Combine" not in user(r) else "Heat: Michael Mann directed Al Pacino."
        return first[r.seed] if turns(r) == 0 else "Action: Finish[Michael Mann]"

    ((res, calls),), _ = run("agent", [q("who directed the movie of [Al Pacino]")], reply, kg, index,
                             strategy="got", branching=2, breadth=1, max_steps=3)
    tree = T.search_tree(res.trace["all_steps"], res.trace["search"], T._agent_done)
    merge = next(n for n in tree if n["entry"].get("parent") == "merge")
    step1 = [n["id"] for n in tree if n["step"] == 1 and n is not merge]
    assert merge["parents"] == step1 and merge["kept"]  # the merge joins both step-1 thoughts and is kept
    assert all(n["parents"] == [merge["id"]] for n in tree if n["step"] == 2)  # step 2 grows the merged chain
    view = R.question_view(R.QuestionData(row=_gen_row(res, calls, "agent"), subgraph=_all_edges(kg)))
    els = Elements(view)
    assert els.find("svg", "tree")[0]["data-thoughts"] == str(len(tree))
    assert len(els.find("path", "branch")) == sum(len(n["parents"]) for n in tree) == 4
    assert len(els.find("ol", "steps")) == 1


def test_markdown_tables_and_pages():
    md = "# T\n\n| a | b \\| c |\n|---|---|\n| **1** | `x` |\n\n![p](compare/hit.png)\n"
    els = Elements(R.markdown_page(md, images={"compare/hit.png": b"png"}))
    assert [a for t, a in els.tags if t == "th"] and "b | c" in "".join(els.text)
    assert els.find("img", "fig")[0]["src"] == "data:image/png;base64,cG5n"
    assert R.status({"failed": True, "hit_at_1": 1.0}) == "failed"
    assert R.status({"correct": 1.0, "hit_at_1": 0.0}) == "correct"


def test_compare_html_page_from_saved_exp_show(tmp_path, monkeypatch):
    """`kgrag compare --exp-json ... --html`: the table and the plots in one page, the plots inlined."""
    from kgrag.cli import main
    from tests.test_compare import _fasttog, _row as exp_row

    rows = [{**exp_row("a" * 40, "main", *_fasttog(4, 0.2, 3.0)), "experiments": [
        {"name": f"m{m}", "executor": None, "revs": [exp_row(c * 40, f"m{m}", *_fasttog(m, hit, 4.0))]}
        for m, hit, c in ((8, 0.3, "b"), (16, 0.25, "c"))]}]
    saved = tmp_path / "exp.json"
    saved.write_text(json.dumps(rows))
    monkeypatch.chdir(tmp_path)
    assert main(["compare", "--exp-json", str(saved), "--out", "cmp.md", "--html", "cmp.html",
                 "--metrics", "hit_at_1,reasoner_calls_per_question"]) == 0
    els = Elements((tmp_path / "cmp.html").read_text())
    imgs = els.find("img", "fig")
    plots = sorted((tmp_path / "cmp").glob("*.png"))
    assert len(imgs) == len(plots) == 3 and all(i["src"].startswith("data:image/png;base64,") for i in imgs)
    text = "".join(els.text)
    assert all(n in text for n in ("m8", "m16", "main")) and "Hit@1" in text


def test_serve_app_answers_through_the_asker_and_listens_on_loopback_only(kg):
    """The app's routes with a stub asker on the tiny KG (the real model: tests/test_report_browser.py)."""
    from fastapi.testclient import TestClient

    from kgrag.apps.serve import bind, make_app

    heat = kg.ids_of(["Heat"])[0]

    class Stub:
        def __init__(self):
            self.asked = []

        def ask(self, text, question_id):
            self.asked.append((text, question_id))
            return text

        def view_data(self, text):
            return R.QuestionData(row=_row(question=text), subgraph=_sub(kg, [0, 1, 2]), topic_ids=[heat])

    stub = Stub()
    client = TestClient(make_app(stub, setup="tiny <KG>"))
    page = client.get("/")
    assert page.status_code == 200 and 'id="ask"' in page.text and "tiny &lt;KG&gt;" in page.text
    got = client.post("/ask", json={"question": "who directed [Heat] <now>"})
    assert got.status_code == 200 and stub.asked == [("who directed [Heat] <now>", "ask-1")]
    els = Elements(got.text)
    assert len(els.find("g", "node")) == len(_sub(kg, [0, 1, 2]).nodes) and "&lt;now&gt;" in got.text
    assert client.post("/ask", json={"question": "  "}).status_code == 422
    assert client.post("/ask", json={"nope": 1}).status_code == 422
    sock = bind(0)
    try:
        host, port = sock.getsockname()
        assert host == "127.0.0.1" and port > 0
    finally:
        sock.close()
    with pytest.raises(ValueError, match="127.0.0.1 only"):
        bind(0, host="0.0.0.0")


def test_label_question_lists_no_missing_gold_entity(kg):
    """ExplaGraphs-style label questions: the gold answer is a label, not an entity of the graph."""
    row = _row(gold=["support"], choices=["support", "counter"], label="support", correct=1.0)
    view = R.question_view(R.QuestionData(row=row, subgraph=_sub(kg, [0, 1])))
    assert "not in the subgraph" not in view and "support of support / counter" in "".join(Elements(view).text)
    assert R.status(row) == "correct"


def test_explore_got_view_marks_named_entities_and_draws_the_merge(kg, index):
    from tests.test_agent_explore import explore_got_reply as reply, q, run

    ((res, calls),), _ = run("explore", [q("tell me about these films")], reply, kg, index, strategy="got",
                             branching=2, breadth=1, prune="embedding", depth=1, max_steps=1)
    view = R.question_view(R.QuestionData(row=_gen_row(res, calls, "explore"), subgraph=_all_edges(kg)))
    els = Elements(view)
    marked = {a["data-name"] for a in els.find("g", "node") if a["data-chains"]}
    assert marked == {"Heat", "Top Gun"}  # the entities the step-1 thoughts named
    tree = T.search_tree(res.trace["steps"], res.trace["search"],
                         lambda e: "extraction" not in e and e.get("parent") != "merge")
    merge = next(n for n in tree if n["entry"].get("parent") == "merge")
    assert sorted(merge["parents"]) == [0, 1] and merge["kept"]
    assert els.find("svg", "tree")[0]["data-thoughts"] == "3" and len(els.find("path", "branch")) == 2


def test_scored_decisions_are_drawn_for_every_reasoner(gkg):
    """decide: score / answer: rank: the report view lists every scored decision of the trace, each option with
    its score, the best one bold, for ToG (its own view) and for a reasoner without a view of its own."""
    from tests.test_decide_tog import ScriptedScores, prefer, run

    res, calls = run(gkg, ScriptedScores(prefer("directed_by", "Film A", answer={"Dir X": -0.5})),
                     width=1, depth=2, decide="score", answer="rank")
    found = T.scored_decisions(res.trace)
    # the relation decisions, depth 2's entities and rank (one end, Dir X) had one option for W = 1: no call,
    # nothing scored to draw
    assert [w for w, _ in found] == ["depths[0].entities", "depths[0].reasoning", "depths[1].reasoning"]
    assert res.trace["depths"][0]["relations"]["no_call"] and res.trace["rank_top"] == [["Dir X", None]]
    for reasoner in ("tog", "someone_elses"):
        row = _gen_row(res, calls, reasoner)
        trace = json.loads(row[S.TRACE])
        trace["reasoner"] = reasoner
        row[S.TRACE] = json.dumps(trace)
        view = R.question_view(R.QuestionData(row=row, subgraph=_all_edges(gkg)))
        part = view.split('<div class="decisions">')[1]
        tables = part.split('<table class="scores">')[1:]
        assert len(tables) == 3
        ent = Elements(tables[0])
        cells = [c for c in ent.text if c.strip()]
        assert "(Film A, starred_actors, Actor P)" in cells and "(Film B, starred_actors, Actor P)" in cells
        best = tables[0].split("<tr class=best>")[1].split("</tr>")[0]
        assert "Film A" in best and "Film B" not in best
    # W = 2: two ends, rank's call scores them; its scores are drawn, the best bold
    res, calls = run(gkg, ScriptedScores(prefer("directed_by", "Film B", "Film A",
                                                answer={"Dir X": -2.0, "Dir Y": -1.0})),
                     width=2, depth=2, decide="score", answer="rank", margin=0.0)
    assert [w for w, _ in T.scored_decisions(res.trace)][-1] == "rank_top"
    view = R.question_view(R.QuestionData(row=_gen_row(res, calls, "tog"), subgraph=_all_edges(gkg)))
    last = view.split('<div class="decisions">')[1].split('<table class="scores">')[-1]
    assert "-2.0" in last and "-1.0" in last and "Dir Y" in last.split("<tr class=best>")[1].split("</tr>")[0]


def test_llm_vs_first_candidate_filter_and_paired_lift():
    """Who was right, the LLM or the first candidate: report.html's filter labels, and metrics.json's paired lift
    (mean of the per-question differences, its interval, questions won and lost)."""
    from kgrag.evaluation.metrics import METRICS
    from kgrag.reporting.report_html import LLM_VS_FIRST, llm_vs_first

    assert llm_vs_first({"hit_at_1": 1.0, "hit_baseline_first": 0.0}) == LLM_VS_FIRST[0]
    assert llm_vs_first({"hit_at_1": 0.0, "hit_baseline_first": 1.0}) == LLM_VS_FIRST[1]
    assert llm_vs_first({"hit_at_1": 1.0, "hit_baseline_first": None}) == "n/a"
    rows = [{"hit_at_1": a, "hit_baseline_first": b, "hit_baseline_random": b}
            for a, b in [(1, 0)] * 3 + [(0, 1)] + [(1, 1)] * 6]
    got = METRICS.get("baselines").impl().aggregate(rows)["llm_lift_paired"]
    assert got["lift"] == 0.2 and got["won"] == 3 and got["lost"] == 1 and got["questions"] == 10
    assert got["ci95"][0] <= 0.2 <= got["ci95"][1]
