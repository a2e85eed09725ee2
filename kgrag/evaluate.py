"""Metrics: per-question scores and their aggregates, each named by its rule.

- ``hit_at_1``: the first predicted answer equals a gold answer after normalization.
- ``hit_any``: some gold answer occurs in the raw prediction text (the RoG / G-Retriever "Hit" rule).
- ``em``: the set of predicted answers equals the set of gold answers (normalized).
- ``precision`` / ``recall`` / ``f1``: over the normalized answer sets.
- ``retrieval_recall``: share of gold answer entities among the retrieved subgraph's nodes.
- ``rouge_l``: Rouge-L F1 (longest common subsequence of normalized words) between the prediction text
  and the gold answers joined by `` | `` (the grounding paper's rule-based metric, Lin 2004).
- ``judge``: an LLM judge's yes / no to "does the model answer match the ground truth answer?" (the
  grounding paper's GPT4Score, with any backend); an unparseable verdict counts as no and is counted.
- ``accuracy`` (label tasks: questions with ``choices``, e.g. ExplaGraphs' support / counter): the prediction
  parsed to one label (``parse_label``) equals the gold label; an unparseable prediction is wrong and counted
  in ``label_unparseable``. ``accuracy_answered`` leaves out failed generations.

``llm_calls_per_question`` counts backend attempts (0 for an answer served from the call cache);
``llm_answers_from_cache`` counts those cached answers, so stage times can be read right.
"""

from __future__ import annotations

import re
import string
from typing import TYPE_CHECKING, Iterable, Sequence

import numpy as np

if TYPE_CHECKING:
    from kgrag.llm import LLMClient, LLMRequest

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation)


def normalize(s: str) -> str:
    """Lower-case, drop punctuation and articles, fold white space (SQuAD normalization)."""
    s = s.lower().translate(_PUNCT)
    return " ".join(_ARTICLES.sub(" ", s).split())


def answer_scores(*, prediction: str, predicted: Sequence[str], gold: Sequence[str]) -> dict[str, float]:
    """Hit@1, Hit, EM, precision, recall, F1 of one question."""
    gold_n = {normalize(g) for g in gold if normalize(g)}
    pred_n = [normalize(p) for p in predicted if normalize(p)]
    pred_set = set(pred_n)
    text_n = normalize(prediction)
    tp = len(pred_set & gold_n)
    precision = tp / len(pred_set) if pred_set else 0.0
    recall = tp / len(gold_n) if gold_n else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {
        "hit_at_1": float(bool(pred_n) and pred_n[0] in gold_n),
        "hit_any": float(any(g and re.search(r"(?<!\w)" + re.escape(g) + r"(?!\w)", text_n) for g in gold_n)),
        "em": float(bool(pred_set) and pred_set == gold_n),
        "precision": precision,
        "recall": recall,
        "f1": f1,
    }


def parse_label(*, prediction: str, predicted: Sequence[str], choices: Sequence[str]) -> str | None:
    """The one label of ``choices`` a prediction names; None when it names none or several (unparseable).

    Rule, on normalized text (``normalize``): the parsed answers that equal a label decide when they name
    exactly one (``Counter.``), and none when they name several (``support | counter``); when no parsed
    answer is a label, the labels the text mentions as words, allowing an inflection (``supports``,
    ``countered``, ``supporting``), decide when exactly one is mentioned (``support or counter`` is
    ambiguous, so unparseable).
    """
    labels = {normalize(c): c for c in choices if normalize(c)}
    exact = {labels[normalize(p)] for p in predicted if normalize(p) in labels}
    if exact:
        return exact.pop() if len(exact) == 1 else None
    text = normalize(prediction)
    named = [lab for key, lab in labels.items()
             if re.search(r"(?<!\w)" + re.escape(key) + r"(?:s|es|ed|d|ing)?(?!\w)", text)]
    return named[0] if len(named) == 1 else None


def label_scores(*, prediction: str, predicted: Sequence[str], gold: Sequence[str], choices: Sequence[str]
                 ) -> dict[str, object]:
    """``label`` (the parsed label or None) and ``correct`` (1.0 when it is a gold label) of one label question."""
    label = parse_label(prediction=prediction, predicted=predicted, choices=choices)
    gold_n = {normalize(g) for g in gold}
    return {"label": label, "correct": float(label is not None and normalize(label) in gold_n)}


def lcs_length(a: Sequence[str], b: Sequence[str]) -> int:
    """Length of the longest common subsequence of two token lists (dynamic programming, O(len a · len b))."""
    if not a or not b:
        return 0
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0]
        for j, y in enumerate(b):
            cur.append(prev[j] + 1 if x == y else max(prev[j + 1], cur[j]))
        prev = cur
    return prev[-1]


def rouge_l(prediction: str, reference: str) -> float:
    """Rouge-L F1 of two texts: LCS over their normalized words, P = LCS / |prediction|,
    R = LCS / |reference|, F1 = 2PR / (P + R); 0 when either is empty.

    References
    ----------
    Lin, ROUGE (2004), section 3.1 (with β = 1).
    """
    p, r = normalize(prediction).split(), normalize(reference).split()
    lcs = lcs_length(p, r)
    if lcs == 0:
        return 0.0
    prec, rec = lcs / len(p), lcs / len(r)
    return 2 * prec * rec / (prec + rec)


JUDGE_SYSTEM = ("You are a strict grader. You judge whether a model's answer to a question matches the ground "
                "truth answer. Reply with Yes or No only.")


def judge_request(*, question: str, gold: Sequence[str], prediction: str, max_tokens: int = 8,
                  seed: int = 0) -> "LLMRequest":
    """The yes / no judge prompt for one question (greedy decoding).

    The grounding paper (Section 5, Appendix D) prompts GPT-4o "to assess if the model's output matches
    ground truth answer" and shows answers as ``Ground Truth Answer: ... Model Answer: ...`` (Appendix G);
    it does not print its exact prompt, so this one follows that description and format.
    """
    from kgrag.generate import clean_question
    from kgrag.llm import LLMRequest

    user = (f"Question: {clean_question(question)}\nGround Truth Answer: {' | '.join(gold)}\n"
            f"Model Answer: {prediction.strip()}\n"
            "Does the model answer match the ground truth answer? Answer Yes or No.")
    return LLMRequest(messages=(("system", JUDGE_SYSTEM), ("user", user)), temperature=0.0, top_p=1.0,
                      max_tokens=max_tokens, seed=seed)


_VERDICT = re.compile(r"\b(yes|no|correct|incorrect|true|false|matches|does not match|doesn't match)\b", re.I)


def parse_verdict(text: str) -> bool | None:
    """A judge's verdict: the first yes / no (or correct / incorrect, true / false, matches / does not
    match) in the reply; None when there is none."""
    m = _VERDICT.search(text or "")
    if m is None:
        return None
    return m.group(1).lower() in ("yes", "correct", "true", "matches")


def judge_scores(*, client: "LLMClient", items: Sequence[tuple[str, Sequence[str], str]], max_tokens: int = 8,
                 seed: int = 0) -> list[dict]:
    """LLM-judge each ``(question, gold, prediction)`` in one batch through ``client`` (its call cache, its
    retries). Per item: ``judge`` (1.0 yes, 0.0 no; an unparseable or failed verdict counts as no),
    ``judge_parsed``, ``judge_reply``. An empty prediction is a no without a call."""
    out: list[dict] = [{"judge": 0.0, "judge_parsed": True, "judge_reply": ""} for _ in items]
    todo = [i for i, (_, _, p) in enumerate(items) if p and p.strip()]
    reqs = [judge_request(question=items[i][0], gold=items[i][1], prediction=items[i][2], max_tokens=max_tokens,
                          seed=seed) for i in todo]
    for i, rec in zip(todo, client.generate(reqs) if reqs else []):
        text = "" if rec.failed else rec.reply.text
        verdict = parse_verdict(text)
        out[i] = {"judge": float(bool(verdict)), "judge_parsed": verdict is not None, "judge_reply": text}
    return out


def retrieval_recall(*, answer_ids: Iterable[int], node_ids: Iterable[int]) -> float | None:
    """Share of gold answer entities present in the retrieved nodes; None without answer ids."""
    gold = set(answer_ids)
    if not gold:
        return None
    return len(gold & set(node_ids)) / len(gold)


def summarize(values: Sequence[float | None]) -> float | None:
    """Mean of the non-null values (None when there are none)."""
    v = [x for x in values if x is not None]
    return float(np.mean(v)) if v else None


def percentile(values: Sequence[float], q: float) -> float | None:
    """q-th percentile of the values (None when empty)."""
    return float(np.percentile(values, q)) if len(values) else None


def evaluate_rows(
    *, questions: Sequence[dict], retrieved: Sequence[dict], generations: Sequence[dict],
    judge: "LLMClient | None" = None, judge_max_tokens: int = 8, judge_seed: int = 0,
) -> tuple[list[dict], dict]:
    """Join questions, retrieval and generation rows; score each question and aggregate.

    Failed generations score 0 and are counted in ``failed``; retrieval recall ignores questions
    without answer entities. Questions with ``choices`` (a label task) also get ``label`` / ``correct``
    and the aggregates ``accuracy``, ``accuracy_answered``, ``label_unparseable`` and ``label_counts``;
    ``task`` says ``entity``, ``label`` or ``mixed``. With a ``judge`` client every prediction is also
    LLM-judged (``judge``, ``judge_unparseable``); without one those metrics are absent.
    """
    from kgrag import schema as S

    ret = {r[S.QUESTION_ID]: r for r in retrieved}
    gen = {g[S.QUESTION_ID]: g for g in generations}
    rows = []
    for q in questions:
        qid = q[S.QUESTION_ID]
        r = ret.get(qid, {})
        g = gen.get(qid, {})
        scores = answer_scores(prediction=g.get(S.PREDICTION) or "", predicted=g.get(S.PREDICTED_ANSWERS) or [],
                               gold=q[S.ANSWERS] or [])
        choices = [c for c in (q.get(S.CHOICES) or []) if c is not None]
        labels = (label_scores(prediction=g.get(S.PREDICTION) or "", predicted=g.get(S.PREDICTED_ANSWERS) or [],
                               gold=q[S.ANSWERS] or [], choices=choices) if choices else {"label": None, "correct": None})
        rows.append(
            {
                S.QUESTION_ID: qid, "question": q[S.TEXT], S.QTYPE: q.get(S.QTYPE) or "", S.HOPS: q.get(S.HOPS),
                "gold": list(q[S.ANSWERS] or []), S.PREDICTION: g.get(S.PREDICTION) or "",
                S.PREDICTED_ANSWERS: list(g.get(S.PREDICTED_ANSWERS) or []),
                "retrieved_triples": r.get(S.CONTEXT_TRIPLES, ""),
                "context_triples": len(r.get(S.TRIPLE_HEADS) or []),
                "retrieval_recall": retrieval_recall(answer_ids=[i for i in (q[S.ANSWER_IDS] or []) if i is not None],
                                                     node_ids=r.get(S.NODE_IDS) or []),
                **scores, S.CHOICES: choices, **labels,
                "rouge_l": rouge_l(g.get(S.PREDICTION) or "", " | ".join(q[S.ANSWERS] or [])),
                S.TOKENS_IN: g.get(S.TOKENS_IN, 0), S.TOKENS_OUT: g.get(S.TOKENS_OUT, 0),
                S.LLM_CALLS: g.get(S.LLM_CALLS, 0), S.CACHED: int(g.get(S.CACHED, 0)),
                S.REQUESTS: g.get(S.REQUESTS, 0), S.DEPTH: g.get(S.DEPTH, 0),
                S.UNPARSEABLE: g.get(S.UNPARSEABLE, 0), S.REASONER: g.get(S.REASONER),
                S.FAILED: bool(g.get(S.FAILED, not g)),
                S.ERROR: g.get(S.ERROR), S.RETRIEVE_MS: r.get(S.RETRIEVE_MS), S.GENERATE_MS: g.get(S.GENERATE_MS),
                S.TRACE: g.get(S.TRACE),
            }
        )
    if judge is not None:
        verdicts = judge_scores(client=judge, items=[(x["question"], x["gold"], x[S.PREDICTION]) for x in rows],
                                max_tokens=judge_max_tokens, seed=judge_seed)
        for x, v in zip(rows, verdicts):
            x.update(v)
    n = len(rows)
    col = lambda k: [x[k] for x in rows]  # noqa: E731
    metrics = {
        "questions": n,
        "failed": sum(col(S.FAILED)),
        "answered": n - sum(col(S.FAILED)),
        # the same scores over the questions whose LLM call succeeded (failures apart from wrong answers)
        "hit_at_1_answered": summarize([x["hit_at_1"] for x in rows if not x[S.FAILED]]),
        "f1_answered": summarize([x["f1"] for x in rows if not x[S.FAILED]]),
        **{k: summarize(col(k)) for k in ("hit_at_1", "hit_any", "em", "precision", "recall", "f1", "rouge_l",
                                          "retrieval_recall")},
        "context_triples_mean": summarize(col("context_triples")),
        "context_tokens_mean": summarize(col(S.TOKENS_IN)),
        "tokens_out_mean": summarize(col(S.TOKENS_OUT)),
        "tokens_per_question": summarize([x[S.TOKENS_IN] + x[S.TOKENS_OUT] for x in rows]),
        "llm_calls_per_question": summarize(col(S.LLM_CALLS)),
        "reasoner_calls_per_question": summarize(col(S.REQUESTS)),
        "depth_mean": summarize(col(S.DEPTH)),
        "unparseable_outputs": sum(col(S.UNPARSEABLE)),
        "llm_answers_from_cache": sum(col(S.CACHED)),
        "retrieve_ms_median": percentile([x for x in col(S.RETRIEVE_MS) if x is not None], 50),
        "generate_ms_median": percentile([x for x in col(S.GENERATE_MS) if x is not None], 50),
    }
    labelled = [x for x in rows if x[S.CHOICES]]
    metrics["task"] = "label" if labelled and len(labelled) == n else "mixed" if labelled else "entity"
    if labelled:
        metrics["accuracy"] = summarize([x["correct"] for x in labelled])
        metrics["accuracy_answered"] = summarize([x["correct"] for x in labelled if not x[S.FAILED]])
        metrics["label_unparseable"] = sum(1 for x in labelled if x["label"] is None and not x[S.FAILED])
        counts: dict[str, int] = {}
        for x in labelled:
            key = x["label"] if x["label"] is not None else ("failed" if x[S.FAILED] else "unparseable")
            counts[key] = counts.get(key, 0) + 1
        metrics["label_counts"] = dict(sorted(counts.items()))
    if judge is not None:
        metrics["judge"] = summarize(col("judge"))
        metrics["judge_unparseable"] = sum(not x["judge_parsed"] for x in rows)
    return rows, metrics


def stage_metrics(*, questions: Sequence[dict], retrieved: Sequence[dict]) -> list[dict]:
    """Per-module retrieval metrics of multi-stage retrievers (the ``stages`` of a retrieved row's trace).

    For each stage: precision, recall, F1 and hit ratio of the gold answer entities among the stage's
    output nodes, mean output size and mean and median wall time (the median is robust to one-time model
    loads in the first question), averaged over questions with answer entities.
    Rows whose trace has no ``stages`` (single-shot retrievers) contribute nothing.

    References
    ----------
    Cao et al., LEGO-GraphRAG (2024), Figures 1-4 (per-module P / R / F1 / hit ratio) and Table 6 (time).
    """
    import json

    from kgrag import schema as S

    gold = {q[S.QUESTION_ID]: {i for i in (q[S.ANSWER_IDS] or []) if i is not None} for q in questions}
    acc: dict[tuple[int, str, str], dict[str, list[float]]] = {}
    for r in retrieved:
        answers = gold.get(r[S.QUESTION_ID]) or set()
        try:
            stages = json.loads(r.get(S.TRACE) or "{}").get("stages") or []
        except (TypeError, ValueError):
            stages = []
        for pos, st in enumerate(stages):
            if not answers or "node_ids" not in st:
                continue
            nodes = set(st["node_ids"])
            tp = len(nodes & answers)
            p = tp / len(nodes) if nodes else 0.0
            rec = tp / len(answers)
            a = acc.setdefault((pos, st["stage"], st.get("module", "")),
                               {"precision": [], "recall": [], "f1": [], "hit": [], "nodes": [], "ms": []})
            a["precision"].append(p)
            a["recall"].append(rec)
            a["f1"].append(2 * p * rec / (p + rec) if p + rec else 0.0)
            a["hit"].append(float(tp > 0))
            a["nodes"].append(float(len(nodes)))
            if "ms" in st:
                a["ms"].append(float(st["ms"]))
    return [
        {"stage": stage, "module": module, "questions": len(v["recall"]),
         **{k: summarize(v[k]) for k in ("precision", "recall", "f1", "hit")},
         "nodes_mean": summarize(v["nodes"]), "ms_mean": summarize(v["ms"]), "ms_median": percentile(v["ms"], 50)}
        for (_, stage, module), v in sorted(acc.items())
    ]
