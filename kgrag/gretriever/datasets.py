"""G-Retriever's datasets: train / val / test examples read through the pipeline's loader registry, each with
its subgraph (ExplaGraphs: the row's whole graph; MetaQA: retrieved from the default DAG's KG and index), and
the scores of predictions. The prompt layout and graph arrays the model reads are ``kgrag.gretriever.data``.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from kgrag import schema as S
from kgrag.gretriever.data import LABEL_SEPARATOR, Example, Triple, relation_text, split_indices
from kgrag.kg.kgview import KGView
from kgrag.registry import LOADERS


def examples_from_tables(tables: Any, *, separator: str = LABEL_SEPARATOR, choices: Sequence[str] = ()
                         ) -> list[Example]:
    """One example per question of a loader's output (``KGTables``) whose questions carry their own graph.

    The subgraph is the question's whole graph in file order (G-Retriever gives ExplaGraphs' small graphs
    whole: k = 0); the label is the answers joined by ``separator``.
    """
    names = dict(zip(tables.entities[S.ENTITY_ID].to_pylist(), tables.entities[S.NAME].to_pylist()))
    rels = dict(zip(tables.relations[S.RELATION_ID].to_pylist(), tables.relations[S.NAME].to_pylist()))
    t = tables.triples
    by_graph: dict[str, list[Triple]] = {}
    if S.GRAPH_ID in t.column_names:
        for h, r, tl, g in zip(t[S.HEAD].to_pylist(), t[S.RELATION].to_pylist(), t[S.TAIL].to_pylist(),
                               t[S.GRAPH_ID].to_pylist()):
            by_graph.setdefault(g, []).append((names[h], rels[r], names[tl]))
    out = []
    for q in tables.questions.to_pylist():
        answers = tuple(a for a in (q[S.ANSWERS] or []) if a)
        out.append(Example(example_id=q[S.QUESTION_ID], question=q[S.TEXT],
                           triples=tuple(by_graph.get(q[S.GRAPH_ID], [])), label=separator.join(answers),
                           answers=answers, choices=tuple(choices)))
    return out


def _choices(tables: Any) -> tuple[str, ...]:
    """The labels a loader's questions table declares (its ``choices`` column), in first-seen order."""
    seen: dict[str, None] = {}
    if S.CHOICES in tables.questions.column_names:
        for cs in tables.questions[S.CHOICES].to_pylist():
            for c in cs or []:
                seen.setdefault(c, None)
    return tuple(seen)


def explagraphs_examples(*, path: str, ratios: Sequence[float], seed: int) -> dict[str, list[Example]]:
    """ExplaGraphs' train and dev rows (in that order) split 6:2:2 (``ratios``) with ``seed``.

    References
    ----------
    He et al., G-Retriever (2024), Appendix C (ExplaGraphs, split 6:2:2) and B.1 (the whole graph is used).
    """
    load = LOADERS.get("explagraphs").impl  # the pipeline's own loader (its quarantine rules, its choices column)
    rows: list[Example] = []
    for split in ("train", "dev"):
        tables = load(path=path, split=split)
        rows += examples_from_tables(tables, choices=_choices(tables))
    tr, va, te = split_indices(len(rows), ratios=ratios, seed=seed)
    return {"train": [rows[i] for i in tr], "val": [rows[i] for i in va], "test": [rows[i] for i in te]}


def examples_from_triples(*, questions: Sequence[Any], triples: Sequence[Sequence[Triple]],
                          separator: str = LABEL_SEPARATOR) -> list[Example]:
    """Examples of global-KG questions (``kgrag.types.Question``) and their retrieved triples."""
    return [Example(example_id=q.question_id, question=q.text, triples=tuple(tuple(x) for x in tr),
                    label=separator.join(q.answers), answers=tuple(q.answers))
            for q, tr in zip(questions, triples)]


def retrieved_triples(*, questions: Sequence[Any], kg: KGView, index: Any, retrieve: Any, mode: str) -> list[list[Triple]]:
    """Named triples of each question's subgraph: ``pcst`` = G-Retriever's retrieval (``retrieve.pcst``
    params) best first; ``none`` = the whole ``retrieve.hops`` neighbourhood (capped at
    ``retrieve.max_neighbourhood_edges``), closest hop first, as the paper's no-retrieval baselines see it.
    """
    from kgrag.retrieval.run import retrieve_one

    if mode not in ("pcst", "none"):
        raise ValueError(f"retrieval mode {mode!r}: choose pcst or none")
    out: list[list[Triple]] = []
    if mode == "pcst":
        params = retrieve.model_copy(update={"method": "pcst"})
        vecs = index.encode([q.text for q in questions])
        for q, v in zip(questions, vecs):
            sub, _ = retrieve_one(question=q, query_vec=v, kg=kg, index=index, params=params)
            out.append(kg.named_triples(sub.heads, sub.relations, sub.tails))
        return out
    for q in questions:
        topics = [t for t in q.topic_ids if 0 <= t < kg.num_entities]
        nb = kg.question_neighbourhood(topics, retrieve.hops, retrieve.max_neighbourhood_edges, graph_id=q.graph_id)
        e = nb.edges
        out.append(kg.named_triples(kg.heads[e], kg.relations[e], kg.tails[e]))
    return out


# ---- MetaQA ------------------------------------------------------------------------------------------


def metaqa_questions(*, kg: KGView, path: str, hops: int, split: str, sample: int, seed: int) -> list[Any]:
    """``sample`` seeded MetaQA questions of ``split`` with topic and answer ids of the store ``kg`` (mapped
    by name: the loader numbers entities itself)."""
    from kgrag.kg.store import questions_on

    return questions_on(kg, LOADERS.get("metaqa").impl(path=path, hops=hops, split=split, sample=sample, seed=seed))


def metaqa_examples(*, kg: KGView, index: Any, retrieve: Any, path: str, hops: int, train: int, val: int, test: int,
                    seed: int, mode: str) -> dict[str, list[Example]]:
    """MetaQA splits: ``train`` + ``val`` questions sampled from the dev file (a seeded permutation decides
    which are which), ``test`` questions from the test file; each with its retrieved triples
    (``retrieved_triples`` in ``mode``)."""
    dev = metaqa_questions(kg=kg, path=path, hops=hops, split="dev", sample=train + val, seed=seed)
    order = np.random.default_rng(seed).permutation(len(dev))
    parts = {"train": [dev[i] for i in np.sort(order[:train])], "val": [dev[i] for i in np.sort(order[train:])],
             "test": metaqa_questions(kg=kg, path=path, hops=hops, split="test", sample=test, seed=seed)}
    return {k: examples_from_triples(questions=qs, triples=retrieved_triples(
                questions=qs, kg=kg, index=index, retrieve=retrieve, mode=mode))
            for k, qs in parts.items()}


def index_vectors(*, kg: KGView, index: Any) -> dict[str, np.ndarray]:
    """Text → vector of every entity name and relation text already embedded by the index stage (entity names
    only where it embedded them all, ``index.entities: all``: a lazy index's are encoded when first needed)."""
    out: dict[str, np.ndarray] = {}
    ents = index.entity_vectors if isinstance(index.entity_vectors, np.ndarray) else np.zeros((0, 0), np.float32)
    for i, n in enumerate(kg.entity_names):
        if n is not None and i < len(ents):
            out.setdefault(str(n), ents[i])
    for i, n in enumerate(kg.relation_names):
        if n is not None and i < len(index.relation_vectors):
            out.setdefault(relation_text(str(n)), index.relation_vectors[i])
    return out


# ---- scores ------------------------------------------------------------------------------------------


def scores(examples: Sequence[Example], predictions: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Task metrics of generated answers under kgrag's rules and G-Retriever's (``kgrag.evaluation.evaluate``):
    ``accuracy`` (``label_scores``) and ``accuracy_gretriever`` (the paper's ExplaGraphs rule) for label tasks;
    ``hit`` (a gold answer occurs in the text as whole words), ``hit_gretriever`` (the paper's Hit rule, which
    its paper reports as WebQSP "Hit@1") and ``hit_at_1`` (the first parsed answer is gold) for entity answers.
    ``score`` (model selection on validation) is ``accuracy`` or ``hit``, kgrag's rule; compare with the
    paper's numbers only under ``*_gretriever``."""
    by_id = {p["id"]: p for p in predictions}
    if not examples:
        return {"score": float("nan"), "n": 0}
    return score_rows([(by_id[e.example_id]["prediction"], list(e.answers), tuple(e.choices)) for e in examples])


def score_rows(rows: Sequence[tuple[str, Sequence[str], Sequence[str]]]) -> dict[str, float]:
    """``scores`` of (prediction, gold, choices) rows (all label rows, or all entity rows)."""
    from kgrag.evaluation.evaluate import answer_scores, label_scores
    from kgrag.llm.prompts import parse_answers

    if all(c for _, _, c in rows):
        res = [label_scores(prediction=p, predicted=parse_answers(p, LABEL_SEPARATOR), gold=g, choices=c)
               for p, g, c in rows]
        acc = float(np.mean([r["correct"] for r in res]))
        return {"score": acc, "accuracy": acc,
                "accuracy_gretriever": float(np.mean([r["correct_gretriever"] for r in res])),
                "unparseable": int(sum(r["label"] is None for r in res)), "n": len(rows)}
    res = [answer_scores(prediction=p, predicted=parse_answers(p, LABEL_SEPARATOR), gold=g) for p, g, _ in rows]
    hit = float(np.mean([r["hit_any"] for r in res]))
    return {"score": hit, "hit": hit, "hit_gretriever": float(np.mean([r["hit_gretriever"] for r in res])),
            "hit_at_1": float(np.mean([r["hit_at_1"] for r in res])),
            "f1": float(np.mean([r["f1"] for r in res])), "n": len(rows)}
