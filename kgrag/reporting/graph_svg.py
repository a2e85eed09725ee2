"""A question's retrieved subgraph drawn as inline SVG for report.html, ``kgrag ask --html`` and ``kgrag serve``:
the data model of one question's view (:class:`QuestionData`, :class:`NamedSubgraph`), its status in the question
list, igraph's deterministic layout, and the drawing with its roles (topic, gold, predicted) and the trace's marks.

Pure: data in, an SVG string out. Every name comes from an arbitrary KG, so every text is escaped (:func:`esc`)
before it enters the page.
"""

from __future__ import annotations

import html
import math
import random
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from kgrag import schema as S
from kgrag.evaluation.evaluate import normalize


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


def clip(text: str, n: int) -> str:
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
        w, h = 6.3 * len(clip(name, 40)), 13.0
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
            f'transform="rotate({angle:.0f} {mx:.1f} {my:.1f})">{esc(clip(label, 34))}</text></g>')
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
                f'text-anchor="{anchor}">{esc(clip(name, 40))}</text>')
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
