"""Report views of the reasoners' traces: each graph reasoner's view (``@TRACE_VIEWS.register(name)``: tog,
fasttog, agent, explore; each reads its trace type of ``kgrag.reasoning.traces``, which the reasoner writes) marks what it walked on the drawn subgraph and lays out its steps; any other reasoner gets
:func:`generic_view` (a table); every reasoner gets its scored decisions (:func:`scores_html`) and its LLM calls
(:func:`calls_table`). A plugin reasoner registers its own view the same way.

Pure: a trace dict in, HTML out; every text escaped.
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable, Mapping, Sequence

from kgrag import schema as S
from kgrag.reasoning.traces import AgentTrace, ExploreTrace, FastToGTrace, ToGTrace
from kgrag.registry import TRACE_VIEWS
from kgrag.reporting.graph_svg import CHAIN_COLOURS, Marks, NamedSubgraph, QuestionData, clip, esc, graph_svg

# --------------------------------------------------------------------------------------------- the trace
class GraphIndex:
    """Look-ups from trace text to the drawn graph: entity name -> node ids, ``(h, r, t)`` text -> edges."""

    def __init__(self, sub: NamedSubgraph) -> None:
        self.by_name: dict[str, list[int]] = {}
        for nid, name in sub.nodes:
            self.by_name.setdefault(name, []).append(nid)
        names = dict(sub.nodes)
        self.by_text: dict[str, list[int]] = {}
        for k, (h, r, t) in enumerate(sub.edges):
            self.by_text.setdefault(f"({names[h]}, {r}, {names[t]})", []).append(k)
        self.edge_nodes = {k: (h, t) for k, (h, _, t) in enumerate(sub.edges)}


def pre(text: Any, cls: str = "") -> str:
    return f'<pre class="{cls}">{esc(text)}</pre>' if text not in (None, "") else ""


def _kv(items: Mapping[str, Any]) -> str:
    rows = "".join(f"<tr><th>{esc(k)}</th><td>{_value(v)}</td></tr>" for k, v in items.items())
    return f'<table class="kv">{rows}</table>' if rows else ""


def _value(v: Any) -> str:
    if isinstance(v, str):
        return esc(v) if len(v) < 120 and "\n" not in v else pre(v)
    if isinstance(v, (int, float, bool)) or v is None:
        return esc(v)
    return pre(json.dumps(v, ensure_ascii=False, indent=1, default=str))


def swatch(c: int) -> str:
    return f'<span class="sw" style="background:{CHAIN_COLOURS[c % len(CHAIN_COLOURS)]}"></span>'


_TRIPLE = re.compile(r"^\((.+), ([^,\s]+), (.+)\)$")


def _walk_svg(chains: Sequence[Sequence[str]], topics: Sequence[str], data: QuestionData, uid: str) -> str:
    """ToG's kept chains drawn as their own graph (the "walk"): their ``(head, relation, tail)`` triples,
    the topic entities, gold and predicted answers marked as on the subgraph, each chain in its colour."""
    ids: dict[str, int] = {}
    edges: list[tuple[int, str, int]] = []
    marks = Marks()
    for ci, chain in enumerate(chains):
        marks.labels[ci] = f"chain {ci + 1}"
        for t in chain:
            m = _TRIPLE.match(t)
            if not m:
                continue
            h, r, tail = m.groups()
            e = (ids.setdefault(h, len(ids)), r, ids.setdefault(tail, len(ids)))
            if e not in edges:
                edges.append(e)
            k = edges.index(e)
            marks.edge(k, ci)
            marks.node(e[0], ci)
            marks.node(e[2], ci)
    if not edges:
        return ""
    walk = NamedSubgraph(nodes=tuple((i, n) for n, i in ids.items()), edges=tuple(edges))
    row = {k: v for k, v in data.row.items() if k in ("gold", S.PREDICTED_ANSWERS, S.CHOICES)}
    view = QuestionData(row=row, subgraph=walk, topic_ids=[ids[n] for n in topics if n in ids])
    return (f'<p>the walk ({len(ids)} entities, {len(edges)} triples; ids here are local to this drawing):</p>'
            f'<div class="graph walk">{graph_svg(view, marks=marks, uid=f"{uid}w", cls="walk")}</div>')


def _demos_html(trace: dict) -> str:
    """``demos: k`` (tog, fasttog, explore, agent): the labelled questions whose relation paths the decisions were
    shown, and the whole path the answer was ranked over; "" without demonstrations."""
    if not trace.get("demos"):
        return ""
    out = ('<p>demonstrations (nearest labelled questions and their relation paths):</p><ul class="demos">'
           + "".join(f"<li>{esc(t)} → <code>{esc(p)}</code></li>" for t, p in trace["demos"]) + "</ul>")
    if trace.get("answer_path"):
        out += f'<p>answered over the ends of the likeliest whole path <code>{esc(trace["answer_path"])}</code></p>'
    return out


@TRACE_VIEWS.register("tog")
def _trace_tog(trace: ToGTrace, gi: GraphIndex, marks: Marks, data: QuestionData, uid: str) -> str:
    """ToG (Sun et al. 2024): per depth the relation and entity pruning, the kept chains (coloured on the
    graph where their triples are retrieved ones), the reasoning reply."""
    out = [f'<p>topic: {esc(", ".join(map(str, trace.get("topic") or [])))}; scorer {esc(trace.get("scorer"))}; '
           f'stop <b>{esc(trace.get("stop"))}</b> at depth {esc(trace.get("depth_reached"))}</p>']
    out.append(_demos_html(trace))
    depths = trace.get("depths") or []
    final = next((d.get("chains") for d in reversed(depths) if d.get("chains")), []) or []
    outside = 0
    for ci, chain in enumerate(final):
        marks.labels[ci] = f"chain {ci + 1}"
        for t in chain:
            ks = gi.by_text.get(t, [])
            outside += not ks
            for k in ks:
                marks.edge(k, ci)
                for nid in gi.edge_nodes[k]:
                    marks.node(nid, ci)
    if final:
        out.append('<ol class="chains">' + "".join(
            f'<li>{swatch(ci)} chain {ci + 1}: ' + " → ".join(f"<code>{esc(t)}</code>" for t in chain) + "</li>"
            for ci, chain in enumerate(final)) + "</ol>")
        if outside:
            out.append(f'<p class="note">{outside} chain triple(s) are not in the retrieved subgraph (ToG walks '
                       "the whole KG from the topic entities); the walk below draws every chain.</p>")
        out.append(_walk_svg(final, trace.get("topic") or [], data, uid))
    for d in depths:
        rel, ent, rea = d.get("relations") or {}, d.get("entities") or {}, d.get("reasoning") or {}
        out.append(f'<details class="step"><summary>depth {esc(d.get("depth"))}: {len(rel.get("options") or [])} '
                   f'relations → {len(rel.get("chosen") or [])} kept; {len(ent.get("options") or [])} entities → '
                   f'{len(ent.get("chosen") or [])} kept; answer {esc(rea.get("answer"))}</summary>'
                   + _kv({"relations kept": rel.get("chosen"), "entities kept": ent.get("chosen"),
                          "chains": d.get("chains"), "reasoning reply": rea.get("reply"),
                          "path ends here": rea.get("path_ends")}) + "</details>")
    if trace.get("fallback_reply"):
        out.append(f"<p>fallback reply:</p>{pre(trace['fallback_reply'])}")
    return "".join(out)


@TRACE_VIEWS.register("fasttog")
def _trace_fasttog(trace: FastToGTrace, gi: GraphIndex, marks: Marks, data: QuestionData, uid: str) -> str:
    """FastToG (Liang et al. 2024): chains of communities per round (the last round's chains coloured on the
    graph where their entities are retrieved ones), the pruning choices and the reasoning reply."""
    out = [f'<p>start: {esc(trace.get("start"))}; width {esc(trace.get("width"))}, D_max {esc(trace.get("d_max"))}, '
           f'{esc(trace.get("text"))}; stop <b>{esc(trace.get("stop"))}</b> at depth '
           f'{esc(trace.get("depth_reached"))}</p>', _demos_html(trace)]
    depths = trace.get("depths") or []
    # the last round's chains; a run answered in the initial phase (depth 0, paper Alg. 1) has only those
    final = next((d.get("chains") for d in reversed(depths) if d.get("chains")), []) or \
        (trace.get("initial") or {}).get("chains") or []
    outside = 0
    for ci, chain in enumerate(final):
        marks.labels[ci] = f"chain {ci + 1}"
        for community in chain:
            for name in community:
                ids = gi.by_name.get(name, [])
                outside += not ids
                for nid in ids:
                    marks.node(nid, ci)
    if final:
        colour = lambda ci: CHAIN_COLOURS[ci % len(CHAIN_COLOURS)]  # noqa: E731
        out.append('<div class="ftchains">' + "".join(
            f'<div class="ftchain" data-chain="{ci}">{swatch(ci)} chain {ci + 1}: '
            f'<span class="comm start">{esc(trace.get("start"))}</span>' + "".join(
                f' → <span class="comm" style="border-color:{colour(ci)}" data-members="{len(c)}">'
                f'{esc(", ".join(map(str, c)))}</span>' for c in chain) + "</div>"
            for ci, chain in enumerate(final)) + "</div>")
        if outside:
            out.append(f'<p class="note">{outside} community member(s) are not in the retrieved subgraph (FastToG '
                       "grows communities over the whole KG), so they are listed but not drawn.</p>")
    init = trace.get("initial") or {}
    if init:
        out.append(f'<details class="step"><summary>initial: {len(init.get("options") or [])} candidate '
                   f'communities, chosen {esc(init.get("chosen"))}</summary>'
                   + _kv({"options": init.get("options"), "reply": init.get("reply"),
                          "likeliest node path per option": init.get("paths")}) + "</details>")
    for d in depths:
        rea = d.get("reasoning") or {}
        out.append(f'<details class="step"><summary>round {esc(d.get("depth"))}: {len(d.get("chains") or [])} '
                   f'chains; answer {esc(rea.get("answer"))}</summary>'
                   + _kv({"pruning": d.get("pruning"), "context": d.get("context"),
                          "reasoning reply": rea.get("reply"), "likeliest whole path": rea.get("path")})
                   + "</details>")
    if trace.get("fallback_reply"):
        out.append(f"<p>fallback reply:</p>{pre(trace['fallback_reply'])}")
    return "".join(out)


def search_tree(log: Sequence[dict], search: Sequence[dict], done: Callable[[dict], bool]) -> list[dict]:
    """The ToT / GoT search as a tree: one node per logged thought ``{"id", "step", "parents", "entry",
    "kept"}``. A thought of step s with ``parent`` i continues the i-th kept, unfinished state of step s-1
    (``search[s-2]["kept"]`` indexes step s-1's candidates: the finished states carried over, then its new
    thoughts; ``"merged"`` is the GoT merge of that step, whose parents are ``merged.parents``)."""
    nodes: list[dict] = []
    by_step: dict[int, list[int]] = {}
    merges: dict[int, int] = {}
    for e in log:
        nid = len(nodes)
        step = int(e.get("step") or 0)
        nodes.append({"id": nid, "step": step, "parents": [], "entry": e, "kept": False})
        if e.get("parent") == "merge":
            merges[step] = nid
        else:
            by_step.setdefault(step, []).append(nid)
    kept_of: dict[int, list[int | None]] = {}  # step -> kept states as node ids (None: carried-over finished)
    for rec in search:
        step = int(rec.get("step") or 0)
        kids = by_step.get(step, [])
        carried = int(rec.get("candidates") or len(kids)) - len(kids)

        def node_of(p: Any) -> int | None:
            if p == "merged":
                return merges.get(step)
            if isinstance(p, int) and 0 <= p - carried < len(kids):
                return kids[p - carried]
            return None

        kept_of[step] = [node_of(p) for p in rec.get("kept") or []]
        for k in kept_of[step]:
            if k is not None:
                nodes[k]["kept"] = True
        merged = rec.get("merged") or {}
        if step in merges and merged.get("parents"):
            nodes[merges[step]]["parents"] = [k for k in map(node_of, merged["parents"]) if k is not None]
    for step, kids in by_step.items():
        live = [k for k in kept_of.get(step - 1, []) if k is not None and not done(nodes[k]["entry"])]
        for k in kids:
            p = nodes[k]["entry"].get("parent")
            if isinstance(p, int) and p < len(live):
                nodes[k]["parents"] = [live[p]]
    return nodes


def tree_svg(nodes: Sequence[dict], label: Callable[[dict], str]) -> str:
    """The search tree as an SVG: a column per step, thoughts top to bottom, kept ones bold."""
    if not nodes:
        return ""
    cols: dict[float, list[dict]] = {}  # a GoT merge gets its own column after its step's thoughts
    for n in nodes:
        cols.setdefault(n["step"] + (0.5 if n["entry"].get("parent") == "merge" else 0.0), []).append(n)
    steps = sorted(cols)
    cw, rh, bw, bh = 230, 46, 200, 34
    height = max(len(v) for v in cols.values()) * rh + 30
    pos = {}
    for ci, s in enumerate(steps):
        for ri, n in enumerate(cols[s]):
            pos[n["id"]] = (10 + ci * cw, 25 + ri * rh)
    out = [f'<svg class="tree" viewBox="0 0 {len(steps) * cw + 10} {height}" '
           f'data-thoughts="{len(nodes)}">']
    out += [f'<text class="col" x="{10 + ci * cw}" y="14">{"step " + str(int(s)) if s == int(s) else "merge"}</text>'
            for ci, s in enumerate(steps)]
    for n in nodes:
        for parent in n["parents"]:
            (x1, y1), (x2, y2) = pos[parent], pos[n["id"]]
            out.append(f'<path class="branch" d="M{x1 + bw},{y1 + bh / 2} C{x1 + bw + 15},{y1 + bh / 2} '
                       f'{x2 - 15},{y2 + bh / 2} {x2},{y2 + bh / 2}"/>')
    for n in nodes:
        x, y = pos[n["id"]]
        text = label(n["entry"])
        out.append(f'<g class="thought{" kept" if n["kept"] else ""}" transform="translate({x},{y})">'
                   f'<title>{esc(text)}</title><rect width="{bw}" height="{bh}" rx="4"/>'
                   f'<text x="6" y="14">{esc(clip(text, 34))}</text>'
                   f'<text x="6" y="28" class="sub">{esc(clip(str(n["entry"].get("action") or ""), 34))}</text></g>')
    out.append("</svg>")
    return "".join(out)


def _agent_done(e: dict) -> bool:
    return bool(e.get("valid")) and str(e.get("action") or "").startswith("Finish")


@TRACE_VIEWS.register("agent")
def _trace_agent(trace: AgentTrace, gi: GraphIndex, marks: Marks, data: QuestionData, uid: str) -> str:
    """Graph-CoT agent (Jin et al. 2024): the best chain's Thought / Action / Observation steps; with a ToT /
    GoT strategy the whole search as a tree."""
    out = [f'<p>strategy {esc(trace.get("strategy"))}</p>', _demos_html(trace), '<ol class="steps">']
    for st in trace.get("steps") or []:
        out.append(f'<li class="{"" if st.get("valid", True) else "invalid"}"><div><b>Thought</b> '
                   f'{esc(st.get("thought"))}</div><div><b>Action</b> <code>{esc(st.get("action"))}</code></div>'
                   + (f'<div><b>Observation</b>{pre(st.get("observation"))}</div>' if st.get("observation") else "")
                   + "</li>")
    out.append("</ol>")
    if trace.get("strategy") not in (None, "cot") and trace.get("all_steps"):
        nodes = search_tree(trace["all_steps"], trace.get("search") or [], _agent_done)
        out.append("<p>search tree (kept thoughts bold):</p>"
                   + tree_svg(nodes, lambda e: str(e.get("thought") or e.get("reply") or "")))
    if trace.get("fallback_reply"):
        out.append(f"<p>fallback reply:</p>{pre(trace['fallback_reply'])}")
    return "".join(out)


@TRACE_VIEWS.register("explore")
def _trace_explore(trace: ExploreTrace, gi: GraphIndex, marks: Marks, data: QuestionData, uid: str) -> str:
    """Thought-guided exploration (ToT / GoT, Yao et al. 2023; Besta et al. 2024): each thought, the entities
    it named and the triples explored from them (their entities coloured on the graph by step)."""
    out = [f'<p>strategy {esc(trace.get("strategy"))}, prune {esc(trace.get("prune"))}</p>', _demos_html(trace),
           '<ol class="steps">']
    log = trace.get("steps") or []
    for e in log:
        step = int(e.get("step") or 1) - 1
        for m in e.get("entities") or []:
            for nid in gi.by_name.get(m.get("entity"), []):
                marks.node(nid, step)
                marks.labels[step] = f"entities of step {step + 1}"
        expl = "".join(f'<div>level {esc(x.get("level"))} from <b>{esc(x.get("entity"))}</b>: '
                       f'{esc(", ".join(map(str, x.get("relations") or [])))}{pre(x.get("triples"))}</div>'
                       for x in e.get("explored") or [])
        out.append(f'<li><div><b>step {esc(e.get("step"))}</b> (parent {esc(e.get("parent"))}, branch '
                   f'{esc(e.get("branch"))}) {swatch(step)}</div><div><b>Thought</b> {esc(e.get("thought"))}</div>'
                   + (f'<div><b>Entities</b> {esc(", ".join(str(m.get("entity")) for m in e.get("entities") or []))}'
                      "</div>" if e.get("entities") else "") + expl + "</li>")
    out.append("</ol>")
    if trace.get("strategy") not in (None, "cot") and log:
        nodes = search_tree(log, trace.get("search") or [], lambda e: "extraction" not in e and e.get("parent") != "merge")
        out.append("<p>search tree (kept thoughts bold):</p>" + tree_svg(nodes, lambda e: str(e.get("thought") or "")))
    if trace.get("answer_reply"):
        out.append(f"<p>answer reply:</p>{pre(trace['answer_reply'])}")
    return "".join(out)


def generic_view(trace: dict, gi: GraphIndex, marks: Marks, data: QuestionData, uid: str) -> str:
    """Any other reasoner (answer, io, cot, cot-sc): what it recorded, as a table."""
    return _kv({k: v for k, v in trace.items() if k != "reasoner"})


def scored_decisions(trace: Any, path: str = "") -> list[tuple[str, list]]:
    """Every scored decision of a trace (``decide: score`` / ``answer: rank``, kgrag.reasoning.reasoners.decide): each
    ``scores``, ``*_scores`` (explore's ``relation_scores``, ``triple_scores``), ``path_end`` or ``rank_top`` list
    of ``[option, score]`` pairs with where it is in the trace (``depths[1].relations``), in trace order. A
    ``rank_top`` without a score (one candidate: no call was made, rank's one-candidate rule) is no decision."""
    out: list[tuple[str, list]] = []
    if isinstance(trace, dict):
        for k, v in trace.items():
            here = f"{path}.{k}" if path else str(k)
            if (k in ("scores", "rank_top", "path_end") or str(k).endswith("_scores")) and isinstance(v, list) \
                    and v and all(isinstance(x, (list, tuple)) and len(x) == 2 for x in v):
                if k == "rank_top" and all(x[1] is None for x in v):
                    continue
                out.append((path or k, v) if k == "scores" else (here, v))
            else:
                out.extend(scored_decisions(v, here))
    elif isinstance(trace, list):
        for i, v in enumerate(trace):
            out.extend(scored_decisions(v, f"{path}[{i}]"))
    return out


def scores_html(trace: dict) -> str:
    """The scored decisions drawn for any reasoner: per decision each option with its log-likelihood score and a
    bar (the best bold; a failed call's scores are shown as –)."""
    found = scored_decisions(trace)
    if not found:
        return ""
    blocks = []
    for where, pairs in found:
        vals = [float(sc) for _, sc in pairs if isinstance(sc, (int, float))]
        top, low = (max(vals), min(vals)) if vals else (0.0, 0.0)
        rows = []
        for opt, sc in pairs:
            ok = isinstance(sc, (int, float))
            width = 100 if not ok or top == low else round(100 * (float(sc) - low) / (top - low))
            best = ok and float(sc) == top
            rows.append(f'<tr{" class=best" if best else ""}><td>{esc(opt)}</td><td>{esc(sc) if ok else "–"}</td>'
                        f'<td><span class="bar" style="width:{width if ok else 0}%"></span></td></tr>')
        blocks.append(f'<details class="step"><summary>{esc(where)}: {len(pairs)} options scored</summary>'
                      f'<table class="scores">{"".join(rows)}</table></details>')
    return (f'<div class="decisions"><p>scored decisions (log-likelihood of each option as the reply; '
            f'{len(found)} decisions):</p>{"".join(blocks)}</div>')


def calls_table(calls: Sequence[Mapping[str, Any]], runs: Sequence[tuple[Any, Any]] = ()) -> str:
    """The LLM calls of a question: key (the prompt is in the call cache under it), tokens, cached, attempts,
    and the reply (or error). ``runs``: (cached, attempts) per call, the run records
    (``kgrag.timings.call_runs``); "–" where a call has none."""
    if not calls:
        return '<p class="note">no LLM call recorded</p>'

    def run(i: int) -> str:
        cached, attempts = runs[i] if i < len(runs) else (None, None)
        return (f'<td>{"–" if cached is None else ("yes" if cached else "no")}</td>'
                f'<td>{"–" if attempts is None else esc(attempts)}</td>')

    rows = "".join(
        f'<tr class="{"err" if c.get("error") else ""}"><td>{i}</td><td><code>{esc(c.get("key"))}</code></td>'
        f'<td>{esc(c.get("tokens_in"))} / {esc(c.get("tokens_out"))}</td>{run(i - 1)}'
        f'<td>{pre(c.get("error") or c.get("reply") or "")}</td></tr>'
        for i, c in enumerate(calls, 1))
    return ('<table class="calls"><thead><tr><th>#</th><th>key</th><th>tokens in / out</th><th>cached</th>'
            f'<th>attempts</th><th>reply or error</th></tr></thead><tbody>{rows}</tbody></table>')


def parse_trace(raw: Any) -> dict:
    """A generations row's ``trace`` column as a dict (``{"unreadable trace": raw}`` when it is no JSON)."""
    if isinstance(raw, dict):
        return dict(raw)
    try:
        got = json.loads(raw or "{}")
    except (json.JSONDecodeError, TypeError):
        return {"unreadable trace": raw}
    return got if isinstance(got, dict) else {"trace": got}
