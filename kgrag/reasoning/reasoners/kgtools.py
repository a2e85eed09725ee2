"""Graph look-ups the ``agent`` and ``explore`` reasoners share: names → entities / relations, a node's edges."""

from __future__ import annotations

import functools
import re

import numpy as np

_QUOTES = "\"'`“”‘’"


def clean_name(text: str) -> str:
    """A name as an LLM wrote it, without quotes, brackets and trailing punctuation."""
    t = (text or "").strip().strip(_QUOTES).strip()
    t = re.sub(r"^\[+|\]+$", "", t).strip().strip(_QUOTES).rstrip(".").strip()
    return t


@functools.lru_cache(maxsize=4)
def _lower_index(kg) -> dict[str, int]:
    out: dict[str, int] = {}
    for i, n in enumerate(kg.entity_names):
        if n is not None:
            out.setdefault(str(n).lower(), i)
    return out


def resolve_entity(kg, index, text: str, *, min_score: float = 0.0, graph_id: str | None = None
                   ) -> tuple[int | None, str]:
    """The entity ``text`` names: (id, how) with how = exact | case | found | embedding; (None, "none").

    Exact name, then the name ignoring case, then ``KGStore.find_entities`` (a ``[bracketed]`` name or the
    longest KG name inside the text), then the nearest entity name by embedding (cosine ≥ ``min_score``).
    A question with its own graph (``graph_id``) only resolves to that graph's nodes.
    """
    name = clean_name(text)
    if not name:
        return None, "none"
    among = kg.question_nodes(graph_id=graph_id)
    allowed = (lambda i: True) if among is None else set(among.tolist()).__contains__
    got = [i for i in kg.ids_of([name]) if allowed(i)]
    if got:
        return int(got[0]), "exact"
    low = _lower_index(kg).get(name.lower())
    if low is not None and allowed(low):
        return int(low), "case"
    found = kg.find_entities(text, among=among)
    if found:
        return int(found[0]), "found"
    if index is not None and len(index.entity_vectors) and (among is None or len(among)):
        qvec = index.encode([name])[0]
        if among is None:
            ids, scores = index.search_entities(qvec, 1)
        else:
            sims = index.entity_vectors[among] @ qvec
            best = int(np.argmax(sims))
            ids, scores = among[best:best + 1], sims[best:best + 1]
        if len(ids) and float(scores[0]) >= min_score:
            return int(ids[0]), "embedding"
    return None, "none"


def rel_name(kg, rid: int) -> str:
    """Name of relation ``rid``."""
    return str(kg.relation_names[int(rid)])


def resolve_relation(kg, index, text: str, among: list[int] | None = None) -> int | None:
    """The relation ``text`` names (exact, ignoring case / spaces / underscores, else nearest by embedding),
    restricted to ``among`` when given; None when there is nothing to choose from."""
    cand = list(range(len(kg.relation_names))) if among is None else list(among)
    if not cand:
        return None
    key = re.sub(r"[\s_\-]+", "", clean_name(text).lower())
    for r in cand:
        if re.sub(r"[\s_\-]+", "", rel_name(kg, r).lower()) == key:
            return r
    if key:
        for r in cand:  # "director" for directed_by and the like: a shared stem
            rk = re.sub(r"[\s_\-]+", "", rel_name(kg, r).lower())
            if key in rk or rk in key:
                return r
    if index is not None and len(index.relation_vectors) and key:
        q = index.encode([clean_name(text).replace("_", " ")])[0]
        vecs = index.relation_vectors[np.asarray(cand, dtype=np.int64)]
        return cand[int(np.argmax(vecs @ q))]
    return None


def edges_of(kg, node: int, rel: int | None = None, *, graph_id: str | None = None) -> np.ndarray:
    """Edge indices incident to ``node`` (either direction), optionally of relation ``rel``, in edge order;
    only those a question over ``graph_id`` sees (``KGStore.question_neighbourhood``)."""
    nb = kg.question_neighbourhood([int(node)], 1, 10**12, graph_id=graph_id)
    e = np.sort(nb.edges)
    if rel is not None:
        e = e[kg.relations[e] == int(rel)]
    return e


def relations_of(kg, node: int, *, graph_id: str | None = None) -> list[int]:
    """Relation ids on ``node``'s edges (those a question over ``graph_id`` sees), in first-seen edge order."""
    seen: list[int] = []
    for r in kg.relations[edges_of(kg, node, graph_id=graph_id)].tolist():
        if r not in seen:
            seen.append(int(r))
    return seen


def other_end(kg, edge: int, node: int) -> int:
    """The entity at the other end of ``edge`` from ``node``."""
    h, t = int(kg.heads[edge]), int(kg.tails[edge])
    return t if h == int(node) else h


def triple_text(kg, edges) -> list[str]:
    """``(head, relation, tail)`` lines of edge indices."""
    e = np.asarray(list(edges), dtype=np.int64)
    return [f"({h}, {r}, {t})" for h, r, t in kg.named_triples(kg.heads[e], kg.relations[e], kg.tails[e])]
