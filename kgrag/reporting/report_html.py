"""The browser view of a run: one self-contained HTML page (no network fetch; inline SVG, CSS and a little
vanilla JS) with the metrics of report.md, a filterable question list and, per question, the retrieved
subgraph drawn with a deterministic layout, the reasoner's trace and its LLM calls.

Everything here is pure: data in, an HTML string out. The report stage, ``kgrag ask --html``, ``kgrag compare
--html`` and ``kgrag serve`` gather the data and write or serve what these functions return. Every name comes
from an arbitrary KG and every reply from an LLM, so every text is escaped (:func:`esc`) before it enters the
page; the page's script reads only ``data-*`` attributes, never markup built from data.

The parts, one job each: :mod:`kgrag.reporting.graph_svg` (the data model and the subgraph's drawing),
:mod:`kgrag.reporting.trace_views` (each reasoner's trace view, its scored decisions and LLM calls) and
:mod:`kgrag.reporting.markdown_html` (report.md as HTML); here: one question's view, and the pages.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Mapping, Sequence

from kgrag import schema as S
from kgrag.registry import TRACE_VIEWS
from kgrag.reporting.graph_svg import (CORRECT, FAILED, LEGEND, WRONG, Marks, NamedSubgraph, QuestionData, clip,
                                       esc, graph_svg, missing_gold, qtype_label, retrieval_status, status,
                                       subgraph_from_ids)
from kgrag.reporting.markdown_html import markdown_html, report_sections
from kgrag.reporting.trace_views import GraphIndex, calls_table, generic_view, parse_trace, pre, scores_html, swatch
from kgrag.timings import call_runs

__all__ = ["LIST_PAGE", "LLM_VS_FIRST", "NamedSubgraph", "QuestionData", "llm_vs_first", "markdown_page",
           "question_page", "question_view", "report_page", "run_report", "serve_page", "status",
           "subgraph_from_ids"]

# -------------------------------------------------------------------------------------- one question's view
_SCORES = (("hit_at_1", "Hit@1"), ("hit_any", "Hit"), ("em", "EM"), ("f1", "F1"), ("precision", "precision"),
           ("recall", "recall"), ("retrieval_recall", "retrieval recall"), ("correct", "correct (label)"),
           ("judge", "judge"), ("context_triples", "context triples"), (S.TOKENS_IN, "tokens in"),
           (S.TOKENS_OUT, "tokens out"), (S.REQUESTS, "LLM calls"), (S.DEPTH, "depth"),
           (S.RETRIEVE_MS, "retrieve ms"), (S.GENERATE_MS, "generate ms"))


def _num(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.3f}" if abs(v) < 100 else f"{v:,.0f}"
    return esc(v)


def question_view(data: QuestionData, *, index: int = 0, seed: int = 0) -> str:
    """The HTML ``<section>`` of one question: the question, gold answers, prediction, its scores, the
    subgraph drawn (roles and trace marks, legend), gold answers missing from it, the trace and LLM calls."""
    row = data.row
    trace = parse_trace(row.get(S.TRACE))
    calls = trace.pop("calls", []) or []
    reasoner = str(trace.get("reasoner") or row.get(S.REASONER) or "")
    gi = GraphIndex(data.subgraph)
    marks = Marks()
    view = TRACE_VIEWS.get(reasoner).impl if reasoner in TRACE_VIEWS else generic_view  # the reasoner's own
    trace_html = view(trace, gi, marks, data, str(index)) if trace else ""
    trace_html += scores_html(trace) if trace else ""
    st = status(row) if "hit_at_1" in row or row.get(S.FAILED) else ""
    miss = missing_gold(data)
    scores = "".join(f"<tr><th>{esc(label)}</th><td>{_num(row[k])}</td></tr>" for k, label in _SCORES
                     if row.get(k) is not None)
    legend_chains = "".join(f"<span>{swatch(c)} {esc(t)}</span>" for c, t in sorted(marks.labels.items()))
    n_nodes, n_edges = len(data.subgraph.nodes), len(data.subgraph.edges)
    gold = row.get("gold") or []
    parts = [
        f'<section class="qview" id="view-{index}" data-index="{index}" data-status="{esc(st)}">',
        f'<h2><span class="badge {esc(st)}">{esc(st or "answer")}</span> {esc(row.get("question"))}</h2>',
        f'<p class="note">{esc(data.note)}</p>' if data.note else "",
        '<div class="facts"><table class="kv">',
        f'<tr><th>question id</th><td><code>{esc(row.get(S.QUESTION_ID))}</code> · {esc(qtype_label(row))}</td></tr>',
        f'<tr><th>gold</th><td class="gold-list">{esc(" | ".join(map(str, gold))) or "–"}</td></tr>' if gold else "",
        f'<tr><th>prediction</th><td>{pre(row.get(S.PREDICTION) or "")}</td></tr>',
        (f'<tr><th>label</th><td>{esc(row.get("label") or "(unparseable)")} of '
         f'{esc(" / ".join(map(str, row.get(S.CHOICES))))}</td></tr>' if row.get(S.CHOICES) else ""),
        f'<tr><th>parsed answers</th><td>{esc(" | ".join(map(str, row.get(S.PREDICTED_ANSWERS) or []))) or "–"}</td></tr>',
        f'<tr><th>error</th><td>{esc(row.get(S.ERROR))}</td></tr>' if row.get(S.ERROR) else "",
        f"</table><table class=\"kv scores\">{scores}</table></div>",
        f"<h3>Retrieved subgraph: {n_nodes} entities, {n_edges} triples</h3>",
        LEGEND.replace("</div>", legend_chains + "</div>") if legend_chains else LEGEND,
        f'<div class="graph">{graph_svg(data, marks=marks, seed=seed, uid=str(index))}</div>' if n_nodes else
        '<p class="note">nothing retrieved</p>',
        (f'<p class="missing">gold answers not in the subgraph: <b>{esc(" | ".join(miss))}</b></p>' if miss else
         ('<p class="note">every gold answer is in the subgraph</p>' if gold and not row.get(S.CHOICES) else "")),
        f'<h3>Reasoner <code>{esc(reasoner or "?")}</code> trace</h3>{trace_html}' if trace_html else "",
        f"<h3>LLM calls ({len(calls)})</h3>{calls_table(calls, call_runs(row))}",
        "</section>",
    ]
    return "".join(p for p in parts if p)


# -------------------------------------------------------------------------------------------------- pages
CSS = """
:root{--gold:#1a9850;--topic:#3b6fd1;--pred:#f46d43;--plain:#c9ccd1;--bg:#fff;--fg:#1d2127;--mute:#6b7280}
*{box-sizing:border-box}body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:var(--fg);
margin:0;background:#f6f7f9}header{background:#1f2937;color:#fff;padding:10px 18px}header h1{margin:0;font-size:18px;display:inline-block;margin-right:24px}header nav{display:inline-block}
header a{color:#c7d2fe}
main{padding:12px 18px}section.card{background:#fff;border:1px solid #e3e5e8;border-radius:6px;padding:10px 14px;
margin:0 0 14px}table{border-collapse:collapse}td,th{border-bottom:1px solid #eceef1;padding:3px 8px;text-align:left;
vertical-align:top}th{font-weight:600}code{font-size:12px}pre{white-space:pre-wrap;word-break:break-word;margin:0;
font-size:12px;max-height:16em;overflow:auto}.note{color:var(--mute)}.missing{color:#b42318}
#split{display:grid;grid-template-columns:minmax(300px,34%) 1fr;gap:14px;align-items:start}
#qlist{max-height:96vh;overflow:auto;position:sticky;top:8px}#views{position:sticky;top:8px;max-height:96vh;overflow:auto}#qlist table{width:100%}#qlist tr.q{cursor:pointer}#qlist tr.q:hover{background:#eef2ff}
#qlist tr.q.sel{background:#dbe4ff}#qlist tr.q.noview{color:var(--mute)}.filters{display:flex;flex-wrap:wrap;gap:6px;
margin-bottom:6px}.filters input{flex:1 1 160px;padding:4px}.filters select{padding:3px}
.badge{display:inline-block;font-size:11px;border-radius:9px;padding:1px 7px;color:#fff;background:#6b7280;
vertical-align:middle}.badge.correct{background:var(--gold)}.badge.wrong{background:#d97706}.badge.failed{background:#b42318}
.badge.hit{background:#2563eb}.badge.miss{background:#9ca3af}.qview h2{font-size:17px;margin:4px 0 8px}
.facts{display:flex;flex-wrap:wrap;gap:18px;align-items:flex-start}.facts table.kv{max-width:560px}.kv th{width:9em;color:var(--mute);
font-weight:500}.graph{border:1px solid #e3e5e8;border-radius:6px;background:#fcfcfd;overflow:auto}
svg.kg{width:100%;height:auto;max-height:80vh;display:block}svg.kg line{stroke:#a5aab3;stroke-width:1.2}
svg.kg .edge.chain line{stroke-width:3}svg.kg text.rel{font-size:9px;fill:#6b7280;text-anchor:middle;
paint-order:stroke;stroke:#fcfcfd;stroke-width:3px}svg.kg .shape{fill:var(--plain);stroke:#fff;stroke-width:1.5}
svg.kg .topic .shape{fill:var(--topic)}svg.kg .gold .shape{fill:var(--gold)}svg.kg .predring{fill:none;
stroke:var(--pred);stroke-width:3}svg.kg .ring{fill:none;stroke-width:2.5}svg.kg text.label{font-size:11px;
paint-order:stroke;stroke:#fcfcfd;stroke-width:3px;fill:#111827}svg.kg .gold text.label,svg.kg .topic text.label
{font-weight:700}svg.kg text.label.hidden,svg.kg.dense text.rel{display:none}svg.kg.dense .edge:hover text.rel{display:inline}svg.kg .node:hover text.label{display:inline;font-size:13px}.legend{display:flex;flex-wrap:wrap;gap:14px;margin:4px 0 6px;
font-size:12px;align-items:center}.legend span{display:inline-flex;align-items:center;gap:4px}.lg-topic{fill:var(--topic)}
.lg-gold{fill:var(--gold)}.lg-plain{fill:var(--plain)}.lg-pred{fill:none;stroke:var(--pred);stroke-width:2.5}
.ftchain{margin:4px 0}.comm{display:inline-block;border:2px solid #a5aab3;border-radius:10px;padding:1px 8px;
margin:2px 0;font-size:12px}.comm.start{background:#e0e7ff;border-color:var(--topic)}.sw{display:inline-block;width:12px;height:12px;border-radius:2px;vertical-align:middle}ol.steps li{margin-bottom:8px}
ol.steps li.invalid{color:#b42318}details.step{margin:4px 0}details.step summary{cursor:pointer}table.scores td{padding:0 6px}table.scores tr.best{font-weight:bold}span.bar{display:inline-block;height:8px;background:#7a9cc6;min-width:1px}
table.calls td:nth-child(6){max-width:600px}table.calls tr.err{background:#fef3f2}svg.tree{width:100%;height:auto;
max-height:60vh}svg.tree rect{fill:#fff;stroke:#a5aab3}svg.tree .kept rect{stroke:#1f2937;stroke-width:2}
svg.tree text{font-size:11px}svg.tree text.sub{fill:#6b7280;font-size:10px}svg.tree .branch{fill:none;stroke:#a5aab3}
svg.tree text.col{font-weight:600}img.fig{max-width:100%}.md table{margin:6px 0}#ask{display:flex;gap:8px}
#ask input{flex:1;padding:8px;font-size:15px}#ask button{padding:8px 16px}.answers>section{border-top:2px solid #e3e5e8;
padding-top:8px;margin-top:8px}.busy{color:var(--mute)}
"""

#: the LLM's answer against the no-LLM first candidate (the questions where the LLM changed the outcome)
LLM_VS_FIRST = ("LLM right, first wrong", "first right, LLM wrong", "both right", "both wrong", "n/a")


def llm_vs_first(row: dict) -> str:
    """Who was right of the LLM's first answer and the first candidate (``hit_at_1`` / ``hit_baseline_first``)."""
    llm, first = row.get("hit_at_1"), row.get("hit_baseline_first")
    if llm is None or first is None:
        return "n/a"
    return {(True, False): LLM_VS_FIRST[0], (False, True): LLM_VS_FIRST[1], (True, True): LLM_VS_FIRST[2],
            (False, False): LLM_VS_FIRST[3]}[(bool(llm), bool(first))]


REPORT_JS = """
(function(){
  // the question list: one JSON entry a question (#qdata), rendered a page at a time, so that a 15,000-question
  // report opens fast: [index, text, status, retrieval, type, search text, has a view, LLM vs first candidate]
  var data = JSON.parse(document.getElementById('qdata').textContent);
  var PAGE = Number(document.getElementById('qlist').getAttribute('data-page')) || 200;
  var tbody = document.getElementById('qrows'), shown = data, page = 0, selected = null;
  var f = {search: document.getElementById('f-search'), type: document.getElementById('f-type'),
           status: document.getElementById('f-status'), retrieval: document.getElementById('f-retrieval'),
           llm: document.getElementById('f-llm')};
  var count = document.getElementById('f-count'), prev = document.getElementById('f-prev'),
      next = document.getElementById('f-next');
  function cell(tr, text){ var td = document.createElement('td'); td.textContent = text; tr.appendChild(td); return td; }
  function badge(td, cls){ var b = document.createElement('span'); b.className = 'badge ' + cls; b.textContent = cls;
                           td.appendChild(b); td.appendChild(document.createTextNode(' ')); }
  function render(){
    var pages = Math.max(1, Math.ceil(shown.length / PAGE));
    page = Math.min(Math.max(page, 0), pages - 1);
    var frag = document.createDocumentFragment();
    shown.slice(page * PAGE, (page + 1) * PAGE).forEach(function(d){
      var tr = document.createElement('tr'), i = String(d[0]);
      tr.className = 'q' + (d[6] ? '' : ' noview') + (i === selected ? ' sel' : '');
      tr.setAttribute('data-index', i); tr.setAttribute('data-status', d[2]); tr.setAttribute('data-retrieval', d[3]);
      tr.setAttribute('data-type', d[4]); tr.setAttribute('data-text', d[5]);
      cell(tr, String(d[0] + 1)); cell(tr, d[1]); var td = cell(tr, ''); badge(td, d[2]); badge(td, d[3]);
      tr.addEventListener('click', function(){ history.replaceState(null, '', '#q' + i); show(i); });
      frag.appendChild(tr);
    });
    tbody.replaceChildren(frag);
    count.textContent = shown.length + ' of ' + data.length + ' questions' +
      (pages > 1 ? ' (page ' + (page + 1) + ' of ' + pages + ')' : '');
    prev.hidden = next.hidden = pages < 2; prev.disabled = page === 0; next.disabled = page >= pages - 1;
  }
  function apply(){
    var s = f.search.value.trim().toLowerCase();
    shown = data.filter(function(d){
      return (!s || d[5].indexOf(s) >= 0) && (!f.type.value || d[4] === f.type.value)
        && (!f.status.value || d[2] === f.status.value) && (!f.retrieval.value || d[3] === f.retrieval.value)
        && (!f.llm.value || d[7] === f.llm.value);
    });
    page = 0; render();
  }
  function show(i){
    selected = i;
    document.querySelectorAll('section.qview').forEach(function(v){ v.hidden = v.getAttribute('data-index') !== i; });
    tbody.querySelectorAll('tr.q').forEach(function(r){ r.classList.toggle('sel', r.getAttribute('data-index') === i); });
    var none = document.getElementById('noview');
    var has = !!document.getElementById('view-' + i);
    none.hidden = has; if (!has) none.textContent = 'No view of question ' + (Number(i) + 1) +
      ': it is beyond report.html_max_questions (raise it and re-run the report stage).';
  }
  Object.keys(f).forEach(function(k){ f[k].addEventListener('input', apply); });
  prev.addEventListener('click', function(){ page--; render(); });
  next.addEventListener('click', function(){ page++; render(); });
  apply();
  var m = /^#q(\\d+)$/.exec(location.hash);
  if (m) { var pos = shown.findIndex(function(d){ return String(d[0]) === m[1]; });
           if (pos >= 0) { page = Math.floor(pos / PAGE); render(); } }
  show(m ? m[1] : (data.length ? String(data[0][0]) : '0'));
})();
"""


def _page(title: str, body: str, script: str = "") -> str:
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            '<link rel="icon" href="data:,">'
            f"<title>{esc(title)}</title><style>{CSS}</style></head><body>{body}"
            + (f"<script>{script}</script>" if script else "") + "</body></html>\n")


#: questions a page of report.html's question list shows (the list is rendered from JSON a page at a time)
LIST_PAGE = 200
#: characters of a question's search text (question, gold answers, prediction, id) kept in the list data
LIST_TEXT_CHARS = 2000


def report_page(*, rows: Sequence[Mapping[str, Any]], views: Mapping[int, str], report_md: str,
                images: Mapping[str, bytes] | None = None, title: str = "kgrag report") -> str:
    """The whole report page: report.md's metrics, tables and figures (figures inlined), a list of every
    question (filter by type, status, retrieval; search) and the per-question views of ``views`` (index into
    ``rows`` -> :func:`question_view` HTML); questions without a view are listed and say so when picked."""
    types = sorted({qtype_label(r) for r in rows})
    entries = []
    for i, r in enumerate(rows):
        text = " ".join([str(r.get("question") or ""), " ".join(map(str, r.get("gold") or [])),
                         str(r.get(S.PREDICTION) or ""), str(r.get(S.QUESTION_ID) or "")]).lower()
        entries.append([i, clip(str(r.get("question") or ""), 110), status(r), retrieval_status(r), qtype_label(r),
                        text[:LIST_TEXT_CHARS], i in views, llm_vs_first(r)])
    # JSON inside <script>: "<" escaped so that no text can close the element
    qdata = json.dumps(entries, ensure_ascii=False, separators=(",", ":")).replace("<", "\\u003c")
    opt = lambda vals: "".join(f'<option value="{esc(v)}">{esc(v)}</option>' for v in vals)  # noqa: E731
    n_st = {s: sum(status(r) == s for r in rows) for s in (CORRECT, WRONG, FAILED)}
    body = (
        f'<header><h1>{esc(title)}</h1><nav><a href="#questions">questions</a> · <a href="#metrics">metrics</a>'
        "</nav></header><main>"
        f'<section class="card" id="questions"><h2>Questions</h2><p class="note">{len(rows)} questions: '
        f"{n_st[CORRECT]} correct (first answer gold, or label right), {n_st[WRONG]} wrong, {n_st[FAILED]} failed; "
        f"{len(views)} with a view. Retrieval <i>hit</i>: a gold answer entity is in the retrieved subgraph. Click a "
        f'question.</p><div id="split"><div id="qlist" data-page="{LIST_PAGE}"><div class="filters">'
        '<input id="f-search" type="search" placeholder="search question, gold, prediction">'
        f'<select id="f-type"><option value="">all types</option>{opt(types)}</select>'
        f'<select id="f-status"><option value="">correct / wrong / failed</option>{opt((CORRECT, WRONG, FAILED))}'
        '</select><select id="f-retrieval"><option value="">retrieval hit / miss</option>'
        f'{opt(("hit", "miss", "n/a"))}</select><select id="f-llm"><option value="">LLM vs first candidate</option>'
        f'{opt(LLM_VS_FIRST)}</select></div><p class="note" id="f-count"></p>'
        f'<table><tbody id="qrows"></tbody></table><p class="pager"><button id="f-prev" type="button" hidden>'
        '&larr; previous</button> <button id="f-next" type="button" hidden>next &rarr;</button></p>'
        f'<script type="application/json" id="qdata">{qdata}</script></div>'
        f'<div id="views"><p class="note" id="noview" hidden></p>{"".join(views[i] for i in sorted(views))}</div>'
        "</div></section>"
        f'<section class="card md" id="metrics">{markdown_html(report_sections(report_md), images)}</section></main>')
    return _page(title, body, REPORT_JS)


def question_page(view: str, *, title: str = "kgrag ask") -> str:
    """A page with one question's view (``kgrag ask --html``)."""
    return _page(title, f"<header><h1>{esc(title)}</h1></header><main><section class=\"card\">{view}</section></main>")


def markdown_page(md: str, *, images: Mapping[str, bytes] | None = None, title: str = "kgrag compare") -> str:
    """A page of a markdown report (``kgrag compare --html``: the table and the plots, inlined)."""
    return _page(title, f"<header><h1>{esc(title)}</h1></header><main><section class=\"card md\">"
                 f"{markdown_html(md, images)}</section></main>")


SERVE_JS = """
(function(){
  var form = document.getElementById('ask'), box = document.getElementById('q'), out = document.getElementById('answers');
  var state = document.getElementById('state');
  form.addEventListener('submit', function(ev){
    ev.preventDefault();
    var q = box.value.trim(); if (!q) return;
    state.textContent = 'answering: ' + q + ' …'; box.disabled = true;
    fetch('ask', {method: 'POST', headers: {'Content-Type': 'application/json'}, body: JSON.stringify({question: q})})
      .then(function(r){ return r.text().then(function(t){ return {ok: r.ok, text: t}; }); })
      .then(function(r){
        var div = document.createElement('div');
        if (r.ok) { div.innerHTML = r.text; } else { div.className = 'missing'; div.textContent = 'error: ' + r.text; }
        out.insertBefore(div, out.firstChild); state.textContent = '';
      })
      .catch(function(e){ state.textContent = 'error: ' + e; })
      .finally(function(){ box.disabled = false; box.value = ''; box.focus(); });
  });
})();
"""


def serve_page(*, title: str = "kgrag: chat with your graph", setup: str = "") -> str:
    """The page of ``kgrag serve``: a question box; each answer's view (fetched from ``POST ask``) on top."""
    body = (f"<header><h1>{esc(title)}</h1></header><main><section class=\"card\">"
            f'<p class="note">{esc(setup)}</p><form id="ask"><input id="q" name="q" autocomplete="off" autofocus '
            'placeholder="e.g. who directed the movies starred by [Al Pacino]"><button type="submit">Ask</button>'
            '</form><p class="busy" id="state"></p></section><div class="answers card" id="answers"></div></main>')
    return _page(title, body, SERVE_JS)


def run_report(*, rows: Sequence[Mapping[str, Any]], retrieved: Sequence[Mapping[str, Any]],
               questions: Sequence[Mapping[str, Any]], entity_name: Callable[[Sequence[int]], list[str]],
               relation_name: Callable[[Sequence[int]], list[str]], report_md: str,
               images: Mapping[str, bytes] | None = None, max_questions: int = 200, seed: int = 0) -> str:
    """The report page of a run: ``rows`` of ``reports/predictions.parquet``, the retrieved rows
    (``schema.RETRIEVED``) and question rows (``schema.QUESTIONS``) joined on the question id; views for the
    first ``max_questions`` questions (``report.html_max_questions``), the list covers all of them."""
    ret = {r[S.QUESTION_ID]: r for r in retrieved}
    qs = {q[S.QUESTION_ID]: q for q in questions}
    views = {}
    for i, row in enumerate(rows[:max_questions]):
        r = ret.get(row[S.QUESTION_ID], {})
        q = qs.get(row[S.QUESTION_ID], {})
        sub = subgraph_from_ids(heads=r.get(S.TRIPLE_HEADS) or [], relations=r.get(S.TRIPLE_RELATIONS) or [],
                                tails=r.get(S.TRIPLE_TAILS) or [], node_ids=r.get(S.NODE_IDS) or [],
                                entity_name=entity_name, relation_name=relation_name)
        views[i] = question_view(QuestionData(row=row, subgraph=sub, topic_ids=q.get(S.TOPIC_IDS) or [],
                                              answer_ids=q.get(S.ANSWER_IDS) or []), index=i, seed=seed)
    return report_page(rows=rows, views=views, report_md=report_md, images=images)
