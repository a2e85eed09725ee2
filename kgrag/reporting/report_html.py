"""The browser view of a run: one self-contained HTML page (no network fetch; inline SVG, CSS and a little
vanilla JS) with the metrics of report.md, a filterable question list and, per question, the retrieved
subgraph drawn with a deterministic layout, the reasoner's trace and its LLM calls.

Everything here is pure: data in, an HTML string out. The report stage, ``kgrag ask --html``, ``kgrag compare
--html`` and ``kgrag serve`` gather the data and write or serve what these functions return. Every name comes
from an arbitrary KG and every reply from an LLM, so every text is escaped (:func:`esc`) before it enters the
page; the page's script reads only ``data-*`` attributes, never markup built from data.
"""

from __future__ import annotations

import base64
import html
import json
import math
import random
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from kgrag import schema as S
from kgrag.evaluation.evaluate import normalize
from kgrag.registry import TRACE_VIEWS
from kgrag.timings import call_runs

# roles of a drawn node (a node can have several: a gold answer the LLM also predicted)
TOPIC, GOLD, PRED = "topic", "gold", "pred"
# chain / community colours of the reasoner's trace on the graph: no green (gold answers) and no orange
# (predicted answers)
CHAIN_COLOURS = ("#0072B2", "#7B3294", "#CC79A7", "#56B4E9", "#8C564B", "#BCBD22", "#17BECF", "#000000")
# a question's status in the list: its first answer is gold (or its label is right), not, or its generation failed
CORRECT, WRONG, FAILED = "correct", "wrong", "failed"


def esc(value: Any) -> str:
    """``value`` as text safe inside HTML elements and quoted attributes (``<``, ``>``, ``&``, both quotes)."""
    return html.escape("" if value is None else str(value), quote=True)


# ----------------------------------------------------------------------------------------------- data model
@dataclass(frozen=True)
class NamedSubgraph:
    """A question's retrieved subgraph as the page draws it (``kgrag.types.Subgraph`` is the retriever's, by
    ids), with names: its nodes ``(entity id, name)`` and its edges
    ``(head id, relation name, tail id)``. Nodes are the retriever's node ids and every triple end."""

    nodes: tuple[tuple[int, str], ...]
    edges: tuple[tuple[int, str, int], ...]


def subgraph_from_ids(*, heads: Sequence[int], relations: Sequence[int], tails: Sequence[int],
                      node_ids: Sequence[int] = (), entity_name: Callable[[Sequence[int]], list[str]],
                      relation_name: Callable[[Sequence[int]], list[str]]) -> NamedSubgraph:
    """The named :class:`NamedSubgraph` of id lists (a retrieved row's ``triple_*`` and ``node_ids`` columns);
    ``entity_name`` / ``relation_name`` map id lists to names (e.g. ``KGStore.names``)."""
    hs, rs, ts = [int(x) for x in heads], [int(x) for x in relations], [int(x) for x in tails]
    ids: list[int] = []
    seen: set[int] = set()
    for i in [int(x) for x in node_ids] + [x for pair in zip(hs, ts) for x in pair]:
        if i not in seen:
            seen.add(i)
            ids.append(i)
    names = entity_name(ids) if ids else []
    rnames = relation_name(rs) if rs else []
    return NamedSubgraph(nodes=tuple(zip(ids, [str(n) for n in names])),
                    edges=tuple((h, str(r), t) for h, r, t in zip(hs, rnames, ts)))


@dataclass
class QuestionData:
    """Everything the view of one question shows. ``row`` is a ``reports/predictions.parquet`` row (or the
    same keys for ``kgrag ask``: question, gold, prediction, predicted_answers, the scores, trace ...)."""

    row: Mapping[str, Any]
    subgraph: NamedSubgraph
    topic_ids: Sequence[int] = ()
    answer_ids: Sequence[int] = ()
    note: str = ""  # a line shown under the question (e.g. how ``kgrag ask`` found its topic entities)


def status(row: Mapping[str, Any]) -> str:
    """``failed`` (the generation failed), ``correct`` (label right, or the first answer gold) or ``wrong``."""
    if row.get(S.FAILED):
        return FAILED
    if row.get("correct") is not None:
        return CORRECT if row["correct"] else WRONG
    return CORRECT if (row.get("hit_at_1") or 0) > 0 else WRONG


def retrieval_status(row: Mapping[str, Any]) -> str:
    """``hit`` (a gold answer is in the retrieved subgraph), ``miss``, or ``n/a`` (no answer entities)."""
    rr = row.get("retrieval_recall")
    return "n/a" if rr is None else ("hit" if rr > 0 else "miss")


def qtype_label(row: Mapping[str, Any]) -> str:
    """The question's type as listed: its ``qtype`` and hops (``2-hop movie_to_director``)."""
    hops = row.get(S.HOPS)
    parts = ([f"{hops}-hop"] if hops is not None else []) + ([row[S.QTYPE]] if row.get(S.QTYPE) else [])
    return " ".join(parts) or "(none)"


# ------------------------------------------------------------------------------------------------- layout
def layout(n: int, edges: Sequence[tuple[int, int]], *, seed: int = 0, width: float = 900.0,
           height: float = 600.0, margin: float = 40.0, right: float = 150.0, algo: str = "kk") -> list[tuple[float, float]]:
    """Node positions in a ``width`` x ``height`` box: igraph's Kamada-Kawai layout (Kamada & Kawai 1989;
    ``algo="fr"``: Fruchterman & Reingold 1991) started from the nodes on a circle in an order drawn from
    ``random.Random(seed)``, which also feeds igraph's random numbers, so a subgraph is drawn the same way
    every time. Components are laid out together. ``right`` leaves room
    for the labels drawn right of the nodes."""
    import igraph as ig

    if n == 0:
        return []
    if n == 1:
        return [(width / 2, height / 2)]
    g = ig.Graph(n=n, edges=sorted({(min(a, b), max(a, b)) for a, b in edges if a != b}))
    rng = random.Random(seed)
    slots = list(range(n))
    rng.shuffle(slots)  # the seed picks each node's place on the starting circle
    start = [[math.cos(2 * math.pi * k / n), math.sin(2 * math.pi * k / n)] for k in slots]
    ig.set_random_number_generator(rng)
    try:
        if algo == "kk":
            coords = g.layout_kamada_kawai(seed=start, maxiter=50 * n).coords
        else:
            coords = g.layout_fruchterman_reingold(seed=start, niter=1000, grid=False).coords
    finally:
        ig.set_random_number_generator(random)
    xs, ys = [c[0] for c in coords], [c[1] for c in coords]
    x0, x1, y0, y1 = min(xs), max(xs), min(ys), max(ys)
    sx = (width - margin - right) / (x1 - x0) if x1 > x0 else 0.0
    sy = (height - 2 * margin) / (y1 - y0) if y1 > y0 else 0.0
    return [(round(margin + (x - x0) * sx if sx else width / 2, 1), round(margin + (y - y0) * sy if sy else height / 2, 1))
            for x, y in coords]


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


# ------------------------------------------------------------------------------------------- graph drawing
@dataclass
class Marks:
    """What the trace colours on the graph: chain indices per node id and per edge index, with a label."""

    nodes: dict[int, list[int]] = field(default_factory=dict)
    edges: dict[int, list[int]] = field(default_factory=dict)
    labels: dict[int, str] = field(default_factory=dict)  # chain index -> legend text

    def node(self, nid: int, chain: int) -> None:
        if chain not in self.nodes.setdefault(nid, []):
            self.nodes[nid].append(chain)

    def edge(self, idx: int, chain: int) -> None:
        if chain not in self.edges.setdefault(idx, []):
            self.edges[idx].append(chain)


def _roles(data: QuestionData) -> dict[int, list[str]]:
    """Each node's roles: topic entity, gold answer (by answer id, else by normalized name), predicted."""
    row = data.row
    gold_ids = {int(i) for i in data.answer_ids if i is not None}
    # a label question's gold answer is a label (ExplaGraphs' support / counter), no entity
    gold_names = set() if row.get(S.CHOICES) else {normalize(g) for g in (row.get("gold") or []) if normalize(g)}
    pred_names = {normalize(p) for p in (row.get(S.PREDICTED_ANSWERS) or []) if normalize(p)}
    topics = {int(i) for i in data.topic_ids if i is not None}
    out: dict[int, list[str]] = {}
    for nid, name in data.subgraph.nodes:
        n = normalize(name)
        roles = []
        if nid in topics:
            roles.append(TOPIC)
        if nid in gold_ids or (not gold_ids and n and n in gold_names):
            roles.append(GOLD)
        if n and n in pred_names:
            roles.append(PRED)
        out[nid] = roles
    return out


def missing_gold(data: QuestionData) -> list[str]:
    """Gold answers not among the subgraph's nodes (by id when the question has answer ids, else by name);
    none for a label question (its gold answer is a label, not an entity)."""
    if data.row.get(S.CHOICES):
        return []
    gold = [g for g in (data.row.get("gold") or []) if g is not None]
    ids = {nid for nid, _ in data.subgraph.nodes}
    names = {normalize(n) for _, n in data.subgraph.nodes}
    aids = [int(i) for i in data.answer_ids if i is not None]
    if aids and len(aids) == len(gold):
        return [g for g, a in zip(gold, aids) if a not in ids]
    return [g for g in gold if normalize(g) not in names]


def _place_labels(nodes, xy, roles, marks, *, radius: float, label_limit: int, degree: Mapping[int, int]
                  ) -> list[tuple[float, float, str, bool]]:
    """Each node label's (x, y, text-anchor, hidden), relative to its node: greedily right, left, above or
    below the node where its box overlaps no label placed before it and no other node; topic entities,
    answers and trace-marked nodes first, then by degree. A label with no free spot (or any label of a graph
    above ``label_limit`` nodes, marked ones apart) is hidden until the node is hovered."""
    boxes: list[tuple[float, float, float, float]] = []
    dots = [(x - radius, y - radius, x + radius, y + radius) for x, y in xy]

    def free(b, own: int) -> bool:
        return not any(b[0] < o[2] and o[0] < b[2] and b[1] < o[3] and o[1] < b[3] for o in boxes) and not any(
            j != own and b[0] < o[2] and o[0] < b[2] and b[1] < o[3] and o[1] < b[3] for j, o in enumerate(dots))

    order = sorted(range(len(nodes)), key=lambda i: (not (roles.get(nodes[i][0]) or marks.nodes.get(nodes[i][0])),
                                                      -degree.get(nodes[i][0], 0), i))
    out: list[tuple[float, float, str, bool]] = [(radius + 3, 4, "start", True)] * len(nodes)
    for i in order:
        nid, name = nodes[i]
        x, y = xy[i]
        w, h = 6.3 * len(_clip(name, 40)), 13.0
        important = bool(roles.get(nid) or marks.nodes.get(nid))
        spots = [(radius + 3, 4, "start", (x + radius + 3, y - 9, x + radius + 3 + w, y + 4)),
                 (-radius - 3, 4, "end", (x - radius - 3 - w, y - 9, x - radius - 3, y + 4)),
                 (0, -radius - 4, "middle", (x - w / 2, y - radius - 4 - h, x + w / 2, y - radius - 4)),
                 (0, radius + 13, "middle", (x - w / 2, y + radius + 1, x + w / 2, y + radius + 1 + h))]
        if len(nodes) > label_limit and not important:
            continue
        for dx, dy, anchor, box in spots:
            if free(box, i):
                boxes.append(box)
                out[i] = (dx, dy, anchor, False)
                break
        else:
            if important:  # always shown: at the right, over whatever is there
                boxes.append(spots[0][3])
                out[i] = (radius + 3, 4, "start", False)
    return out


def graph_svg(data: QuestionData, *, marks: Marks | None = None, seed: int = 0, label_limit: int = 400,
              rel_limit: int = 60, uid: str = "0", cls: str = "subgraph") -> str:
    """The subgraph as an inline SVG: one ``<g class="node">`` per node (``data-roles`` says topic / gold /
    pred), one ``<g class="edge">`` per distinct (head, tail) pair with its relation labels, the trace's
    chains as coloured rings and edges. Node labels are placed without overlap (:func:`_place_labels`) for
    graphs of up to ``label_limit`` nodes and for marked nodes; relation labels are drawn for up to
    ``rel_limit`` arrows (beyond, on hover); every node and edge has a ``<title>`` tooltip with its full text. ``uid`` makes the
    SVG's marker id unique in a page of many graphs."""
    marks = marks or Marks()
    nodes = list(data.subgraph.nodes)
    pos_of = {nid: i for i, (nid, _) in enumerate(nodes)}
    pairs: dict[tuple[int, int], list[tuple[int, str]]] = {}  # (head, tail) -> [(edge index, relation)]
    for k, (h, r, t) in enumerate(data.subgraph.edges):
        pairs.setdefault((h, t), []).append((k, r))
    n = len(nodes)
    side = max(1.0, math.sqrt(n / 30.0))
    width, height = round(900 * side), round(620 * side) if n > 12 else 200 + 35 * n  # small graphs: less tall
    xy = layout(n, [(pos_of[h], pos_of[t]) for h, t in pairs], seed=seed, width=width, height=height)
    roles = _roles(data)
    out = [f'<svg class="kg {cls}{" dense" if len(pairs) > rel_limit else ""}" viewBox="0 0 {width} {height}" '
           f'data-nodes="{n}" data-edges="{len(data.subgraph.edges)}" role="img" '
           f'aria-label="retrieved subgraph: {n} nodes, {len(data.subgraph.edges)} triples">',
           f'<defs><marker id="arr-{uid}" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="5" markerHeight="5" '
           'orient="auto-start-reverse"><path d="M0,0L10,5L0,10z" fill="#8a8f98"/></marker></defs>',
           '<g class="edges">']
    radius = 9.0
    for (h, t), rels in pairs.items():
        (x1, y1), (x2, y2) = xy[pos_of[h]], xy[pos_of[t]]
        chains = sorted({c for k, _ in rels for c in marks.edges.get(k, [])})
        label = " / ".join(dict.fromkeys(r for _, r in rels))
        dx, dy = x2 - x1, y2 - y1
        d = math.hypot(dx, dy) or 1.0
        ex, ey = x2 - dx / d * (radius + 2), y2 - dy / d * (radius + 2)
        cls = "edge" + (" chain" if chains else "")
        colour = f' style="stroke:{CHAIN_COLOURS[chains[0] % len(CHAIN_COLOURS)]}"' if chains else ""
        names = dict(nodes)
        tip = "; ".join(f"{names[h]} —{r}→ {names[t]}" for _, r in rels)
        mx, my = (x1 + x2) / 2, (y1 + y2) / 2
        angle = math.degrees(math.atan2(dy, dx))
        if angle > 90 or angle < -90:
            angle += 180
        out.append(
            f'<g class="{cls}" data-chains="{" ".join(map(str, chains))}"><title>{esc(tip)}</title>'
            f'<line x1="{x1}" y1="{y1}" x2="{ex:.1f}" y2="{ey:.1f}" marker-end="url(#arr-{uid})"{colour}/>'
            f'<text class="rel" x="{mx:.1f}" y="{my:.1f}" dy="-3" '
            f'transform="rotate({angle:.0f} {mx:.1f} {my:.1f})">{esc(_clip(label, 34))}</text></g>')
    out.append('</g><g class="nodes">')
    placed = _place_labels(nodes, xy, roles, marks, radius=radius, label_limit=label_limit,
                           degree={nid: sum(nid in ht for ht in pairs) for nid, _ in nodes})
    for i, (nid, name) in enumerate(nodes):
        x, y = xy[i]
        rs = roles.get(nid, [])
        chains = marks.nodes.get(nid, [])
        rings = "".join(
            f'<circle class="ring" r="{radius + 3 + 3 * j}" style="stroke:{CHAIN_COLOURS[c % len(CHAIN_COLOURS)]}"/>'
            for j, c in enumerate(chains))
        shape = (f'<rect class="shape" x="-{radius}" y="-{radius}" width="{2 * radius}" height="{2 * radius}" '
                 f'rx="2"/>' if TOPIC in rs else f'<circle class="shape" r="{radius}"/>')
        pred = f'<circle class="predring" r="{radius + 1.5}"/>' if PRED in rs else ""
        lx, ly, anchor, hidden = placed[i]
        text = (f'<text class="label{" hidden" if hidden else ""}" x="{lx:.0f}" y="{ly:.0f}" '
                f'text-anchor="{anchor}">{esc(_clip(name, 40))}</text>')
        tip = name + (f" ({', '.join(rs)})" if rs else "") + (
            f" — chain {', '.join(str(c + 1) for c in chains)}" if chains else "")
        out.append(
            f'<g class="node {" ".join(rs)}" data-id="{nid}" data-name="{esc(name)}" data-roles="{" ".join(rs)}" '
            f'data-chains="{" ".join(map(str, chains))}" transform="translate({x},{y})">'
            f'<title>{esc(tip)}</title>{rings}{shape}{pred}{text}</g>')
    out.append("</g></svg>")
    return "".join(out)


LEGEND = (
    '<div class="legend"><span><svg width="16" height="16"><rect x="2" y="2" width="12" height="12" rx="2" '
    'class="lg-topic"/></svg> topic entity</span>'
    '<span><svg width="16" height="16"><circle cx="8" cy="8" r="6" class="lg-gold"/></svg> gold answer</span>'
    '<span><svg width="16" height="16"><circle cx="8" cy="8" r="6" class="lg-plain"/><circle cx="8" cy="8" r="7" '
    'class="lg-pred"/></svg> predicted answer</span>'
    '<span><svg width="16" height="16"><circle cx="8" cy="8" r="6" class="lg-plain"/></svg> other entity</span>'
    '<span><svg width="26" height="12"><line x1="1" y1="6" x2="24" y2="6" stroke="#8a8f98"/></svg> '
    'relation (head → tail)</span></div>')


# --------------------------------------------------------------------------------------------- the trace
class _GraphIndex:
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


def _pre(text: Any, cls: str = "") -> str:
    return f'<pre class="{cls}">{esc(text)}</pre>' if text not in (None, "") else ""


def _kv(items: Mapping[str, Any]) -> str:
    rows = "".join(f"<tr><th>{esc(k)}</th><td>{_value(v)}</td></tr>" for k, v in items.items())
    return f'<table class="kv">{rows}</table>' if rows else ""


def _value(v: Any) -> str:
    if isinstance(v, str):
        return esc(v) if len(v) < 120 and "\n" not in v else _pre(v)
    if isinstance(v, (int, float, bool)) or v is None:
        return esc(v)
    return _pre(json.dumps(v, ensure_ascii=False, indent=1, default=str))


def _swatch(c: int) -> str:
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
def _trace_tog(trace: dict, gi: _GraphIndex, marks: Marks, data: QuestionData, uid: str) -> str:
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
            f'<li>{_swatch(ci)} chain {ci + 1}: ' + " → ".join(f"<code>{esc(t)}</code>" for t in chain) + "</li>"
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
        out.append(f"<p>fallback reply:</p>{_pre(trace['fallback_reply'])}")
    return "".join(out)


@TRACE_VIEWS.register("fasttog")
def _trace_fasttog(trace: dict, gi: _GraphIndex, marks: Marks, data: QuestionData, uid: str) -> str:
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
            f'<div class="ftchain" data-chain="{ci}">{_swatch(ci)} chain {ci + 1}: '
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
        out.append(f"<p>fallback reply:</p>{_pre(trace['fallback_reply'])}")
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
                   f'<text x="6" y="14">{esc(_clip(text, 34))}</text>'
                   f'<text x="6" y="28" class="sub">{esc(_clip(str(n["entry"].get("action") or ""), 34))}</text></g>')
    out.append("</svg>")
    return "".join(out)


def _agent_done(e: dict) -> bool:
    return bool(e.get("valid")) and str(e.get("action") or "").startswith("Finish")


@TRACE_VIEWS.register("agent")
def _trace_agent(trace: dict, gi: _GraphIndex, marks: Marks, data: QuestionData, uid: str) -> str:
    """Graph-CoT agent (Jin et al. 2024): the best chain's Thought / Action / Observation steps; with a ToT /
    GoT strategy the whole search as a tree."""
    out = [f'<p>strategy {esc(trace.get("strategy"))}</p>', _demos_html(trace), '<ol class="steps">']
    for st in trace.get("steps") or []:
        out.append(f'<li class="{"" if st.get("valid", True) else "invalid"}"><div><b>Thought</b> '
                   f'{esc(st.get("thought"))}</div><div><b>Action</b> <code>{esc(st.get("action"))}</code></div>'
                   + (f'<div><b>Observation</b>{_pre(st.get("observation"))}</div>' if st.get("observation") else "")
                   + "</li>")
    out.append("</ol>")
    if trace.get("strategy") not in (None, "cot") and trace.get("all_steps"):
        nodes = search_tree(trace["all_steps"], trace.get("search") or [], _agent_done)
        out.append("<p>search tree (kept thoughts bold):</p>"
                   + tree_svg(nodes, lambda e: str(e.get("thought") or e.get("reply") or "")))
    if trace.get("fallback_reply"):
        out.append(f"<p>fallback reply:</p>{_pre(trace['fallback_reply'])}")
    return "".join(out)


@TRACE_VIEWS.register("explore")
def _trace_explore(trace: dict, gi: _GraphIndex, marks: Marks, data: QuestionData, uid: str) -> str:
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
                       f'{esc(", ".join(map(str, x.get("relations") or [])))}{_pre(x.get("triples"))}</div>'
                       for x in e.get("explored") or [])
        out.append(f'<li><div><b>step {esc(e.get("step"))}</b> (parent {esc(e.get("parent"))}, branch '
                   f'{esc(e.get("branch"))}) {_swatch(step)}</div><div><b>Thought</b> {esc(e.get("thought"))}</div>'
                   + (f'<div><b>Entities</b> {esc(", ".join(str(m.get("entity")) for m in e.get("entities") or []))}'
                      "</div>" if e.get("entities") else "") + expl + "</li>")
    out.append("</ol>")
    if trace.get("strategy") not in (None, "cot") and log:
        nodes = search_tree(log, trace.get("search") or [], lambda e: "extraction" not in e and e.get("parent") != "merge")
        out.append("<p>search tree (kept thoughts bold):</p>" + tree_svg(nodes, lambda e: str(e.get("thought") or "")))
    if trace.get("answer_reply"):
        out.append(f"<p>answer reply:</p>{_pre(trace['answer_reply'])}")
    return "".join(out)


def _trace_generic(trace: dict, gi: _GraphIndex, marks: Marks, data: QuestionData, uid: str) -> str:
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


def _scores_html(trace: dict) -> str:
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
        f'<td>{_pre(c.get("error") or c.get("reply") or "")}</td></tr>'
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
    gi = _GraphIndex(data.subgraph)
    marks = Marks()
    view = TRACE_VIEWS.get(reasoner).impl if reasoner in TRACE_VIEWS else _trace_generic  # the reasoner's own
    trace_html = view(trace, gi, marks, data, str(index)) if trace else ""
    trace_html += _scores_html(trace) if trace else ""
    st = status(row) if "hit_at_1" in row or row.get(S.FAILED) else ""
    miss = missing_gold(data)
    scores = "".join(f"<tr><th>{esc(label)}</th><td>{_num(row[k])}</td></tr>" for k, label in _SCORES
                     if row.get(k) is not None)
    legend_chains = "".join(f"<span>{_swatch(c)} {esc(t)}</span>" for c, t in sorted(marks.labels.items()))
    n_nodes, n_edges = len(data.subgraph.nodes), len(data.subgraph.edges)
    gold = row.get("gold") or []
    parts = [
        f'<section class="qview" id="view-{index}" data-index="{index}" data-status="{esc(st)}">',
        f'<h2><span class="badge {esc(st)}">{esc(st or "answer")}</span> {esc(row.get("question"))}</h2>',
        f'<p class="note">{esc(data.note)}</p>' if data.note else "",
        '<div class="facts"><table class="kv">',
        f'<tr><th>question id</th><td><code>{esc(row.get(S.QUESTION_ID))}</code> · {esc(qtype_label(row))}</td></tr>',
        f'<tr><th>gold</th><td class="gold-list">{esc(" | ".join(map(str, gold))) or "–"}</td></tr>' if gold else "",
        f'<tr><th>prediction</th><td>{_pre(row.get(S.PREDICTION) or "")}</td></tr>',
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


_MD_IMG = re.compile(r"!\[([^\]]*)\]\(([^)]+)\)")


def _inline_md(text: str) -> str:
    """Escaped text with the markdown of report.md's cells: ``code`` and **bold**."""
    t = esc(text)
    t = re.sub(r"`([^`]+)`", r"<code>\1</code>", t)
    return re.sub(r"\*\*([^*]+)\*\*", r"<b>\1</b>", t)


def markdown_html(md: str, images: Mapping[str, bytes] | None = None) -> str:
    """The markdown subset of report.md and compare.md (headings, pipe tables, images, paragraphs) as HTML;
    images whose path is a key of ``images`` are inlined as base64 data URIs, others are shown as their path."""
    images = images or {}
    out: list[str] = []
    lines = md.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("|"):
            block = []
            while i < len(lines) and lines[i].startswith("|"):
                block.append(lines[i])
                i += 1
            cells = [[c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", r.strip()[1:-1])] for r in block]
            body = [r for r in cells[1:] if not all(re.fullmatch(r":?-+:?", c or "-") for c in r)]
            out.append("<table><thead><tr>" + "".join(f"<th>{_inline_md(c)}</th>" for c in cells[0])
                       + "</tr></thead><tbody>" + "".join(
                           "<tr>" + "".join(f"<td>{_inline_md(c)}</td>" for c in r) + "</tr>" for r in body)
                       + "</tbody></table>")
            continue
        m = re.match(r"(#{1,4}) (.*)", line)
        if m:
            level = min(len(m.group(1)) + 1, 4)
            out.append(f"<h{level}>{_inline_md(m.group(2))}</h{level}>")
        elif _MD_IMG.search(line):
            for alt, src in _MD_IMG.findall(line):
                data = images.get(src)
                mime = "image/svg+xml" if src.endswith(".svg") else "image/png"
                out.append(f'<img class="fig" alt="{esc(alt)}" src="data:{mime};base64,'
                           f'{base64.b64encode(data).decode()}">' if data is not None else
                           f'<p class="note">figure {esc(src)} (not found)</p>')
        elif line.strip():
            out.append(f"<p>{_inline_md(line.strip())}</p>")
        i += 1
    return "".join(out)


def report_sections(md: str, drop: Sequence[str] = ("Examples", "Reasoner traces")) -> str:
    """report.md without the sections the per-question views replace (its examples and traces)."""
    keep, out = True, []
    for line in md.splitlines():
        if line.startswith("## "):
            keep = line[3:].strip() not in drop
        if keep:
            out.append(line)
    return "\n".join(out)


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
        entries.append([i, _clip(str(r.get("question") or ""), 110), status(r), retrieval_status(r), qtype_label(r),
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
