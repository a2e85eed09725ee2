"""Metrics as registered objects: each one scores a question (per-question columns of
``reports/predictions.parquet``) and aggregates those scores (keys of ``reports/metrics.json``), and its
docstring states its rule. The rules themselves are the functions of ``kgrag.evaluation.evaluate`` (kgrag's strict rules
and the papers' own); ``kgrag.evaluation.evaluate.evaluate_rows`` runs every registered metric in name order.

A metric is a class ``Metric(**kwargs)`` with ``score(item) -> dict`` (or ``score_batch(items) -> list[dict]``
when it scores all questions in one batch, like the LLM judge) and ``aggregate(rows) -> dict``. Every
metric but ``judge`` is built with no arguments; ``judge`` is handed an LLM client
(``kgrag.llm.clients.client_for(evaluate.judge_backend)``) and is run only when the stage has one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from kgrag import schema as S
from kgrag.evaluation.evaluate import (  # noqa: F401 (Item: re-exported, the metrics' input)
    Item, answer_scores, echoes_demo, judge_scores, label_scores, llm_stage_counts, normalize, prompt_triples,
    retrieval_recall, rouge_l, summarize,
)
from kgrag.registry import METRICS
from kgrag.types import MetricKey

K = MetricKey  # short name for the declarations below

if TYPE_CHECKING:
    from kgrag.llm.calls import LLMClient


def _miss(item: Item, scores: dict) -> dict:
    """An unanswerable question's scores: every one a miss (0), whatever the prediction says (the benchmark
    protocol: every question counts, and one whose answer the KG lacks cannot be answered from it)."""
    return scores if item.answerable else {k: 0.0 for k in scores}


def _col(rows: Sequence[dict], key: str) -> list[Any]:
    return [x.get(key) for x in rows]


def _answered(rows: Sequence[dict], key: str) -> float | None:
    return summarize([x[key] for x in rows if not x[S.FAILED]])


@METRICS.register("answers", version="2")
class AnswerMetrics:
    """kgrag's answer rules, on ``normalize``d text: ``hit_at_1`` (the first parsed answer equals a gold
    answer), ``hit_any`` (a gold answer occurs in the prediction as whole words), ``em`` (the parsed answer set
    equals the gold set), ``precision`` / ``recall`` / ``f1`` (over the answer sets), ``f1_top1`` (F1 of the
    first answer alone: 2 / (1 + gold answers) when it is gold); ``hit_at_1_answered`` and
    ``f1_answered`` over the questions whose generation did not fail. Beside them the papers' own rules, to
    compare with a paper only under its rule: ``hit_gretriever`` (G-Retriever's Hit, its WebQSP "Hit@1") and
    ``em_tog`` (Think-on-Graph's exact match, ToG / FastToG "Hits@1")."""

    KEYS = ("hit_at_1", "hit_any", "em", "precision", "recall", "f1", "f1_top1", "hit_gretriever", "em_tog")
    RANK = 2
    OUTPUTS = {
        "hit_at_1": K("Hit@1", "Hit@1 (first answer is gold)", 1),
        "hit_any": K("Hit", "Hit (a gold answer appears in the output)", 1),
        "em": K("EM", "Exact match (answer set = gold set)", 1),
        "precision": K("precision", "Answer precision", 1),
        "recall": K("recall", "Answer recall", 1),
        "f1": K("F1", "Answer F1", 1),
        "f1_top1": K("F1 (first answer)", "Answer F1 of the first answer alone (F1 both ways: beside F1 of the "
                     "whole answer list)", 1),
        "hit_at_1_answered": K("Hit@1 (answered)", "Hit@1 over answered questions (failed generations left out)", 1),
        "f1_answered": K("F1 (answered)", "F1 over answered questions (failed generations left out)", 1),
        "hit_gretriever": K("Hit (G-Retriever rule)", "G-Retriever's Hit rule ('|' to lines, substring; its WebQSP "
                            "'Hit@1')", 1),
        "em_tog": K("EM (ToG rule)", "ToG's exact match rule (bidirectional substring, spaces removed; ToG / FastToG "
                    "'Hits@1')", 1),
    }

    def score(self, item: Item) -> dict:
        return _miss(item, answer_scores(prediction=item.prediction, predicted=item.predicted, gold=item.gold))

    def aggregate(self, rows: Sequence[dict]) -> dict:
        return {**{k: summarize(_col(rows, k)) for k in self.KEYS},
                "hit_at_1_answered": _answered(rows, "hit_at_1"), "f1_answered": _answered(rows, "f1")}


@METRICS.register("rouge_l", version="1")
class RougeL:
    """``rouge_l``: Rouge-L F1 between the prediction text and the gold answers joined by `` | ``: longest
    common subsequence of the normalized words, P = LCS / prediction words, R = LCS / reference words (the
    grounding paper's rule-based metric; Lin, 2004)."""

    RANK = 4
    OUTPUTS = {"rouge_l": K("Rouge-L", "Rouge-L F1 (prediction vs gold joined by ' | ')", 1)}

    def score(self, item: Item) -> dict:
        return _miss(item, {"rouge_l": rouge_l(item.prediction, " | ".join(item.gold))})

    def aggregate(self, rows: Sequence[dict]) -> dict:
        return {"rouge_l": summarize(_col(rows, "rouge_l"))}


@METRICS.register("retrieval", version="1")
class RetrievalMetrics:
    """``retrieval_recall``: share of the gold answer entities among the entities of the triples the prompt
    holds (the first ``generate.max_context_triples`` retrieved triples); ``retrieval_recall_uncapped``: among
    the whole retrieved subgraph's nodes (questions without answer entities left out). ``context_triples_mean``
    / ``context_triples_uncapped_mean``: triples in the prompt / retrieved."""

    RANK = 6
    OUTPUTS = {
        "retrieval_recall": K("retrieval recall", "Retrieval answer recall (over the triples the prompt holds)", 1),
        "retrieval_recall_uncapped": K("retrieval recall (uncapped)", "Retrieval answer recall (whole retrieved "
                                       "subgraph)", 1),
        "context_triples_mean": K("context triples / q", "Context triples / question (in the prompt)"),
        "context_triples_uncapped_mean": K("retrieved triples / q", "Retrieved triples / question"),
    }

    def score(self, item: Item) -> dict:
        r = item.retrieved
        answer_ids = [i for i in (item.question.get(S.ANSWER_IDS) or []) if i is not None]
        n_prompt, prompt_nodes = prompt_triples(r, item.max_context_triples)
        return {
            "retrieved_triples": r.get(S.CONTEXT_TRIPLES, ""),
            "context_triples": n_prompt,
            "context_triples_uncapped": len(r.get(S.TRIPLE_HEADS) or []),
            "retrieval_recall": retrieval_recall(answer_ids=answer_ids, node_ids=prompt_nodes),
            "retrieval_recall_uncapped": retrieval_recall(answer_ids=answer_ids, node_ids=r.get(S.NODE_IDS) or []),
        }

    def aggregate(self, rows: Sequence[dict]) -> dict:
        return {"retrieval_recall": summarize(_col(rows, "retrieval_recall")),
                "retrieval_recall_uncapped": summarize(_col(rows, "retrieval_recall_uncapped")),
                "context_triples_mean": summarize(_col(rows, "context_triples")),
                "context_triples_uncapped_mean": summarize(_col(rows, "context_triples_uncapped"))}


@METRICS.register("retrieval_llm", version="1")
class RetrievalLLMCounts:
    """``retrieval_llm_unparsed`` / ``retrieval_llm_fallbacks``: LLM replies a multi-stage retriever's LLM
    stages could not use (LEGO llm scorer / refiner) and the fallbacks they took, summed over questions."""

    RANK = 7
    OUTPUTS = {
        "retrieval_llm_unparsed": K("retriever LLM unparsed", "Retriever LLM stages: replies / items not used", -1,
                                    "d"),
        "retrieval_llm_fallbacks": K("retriever LLM fallbacks", "Retriever LLM stages: fallbacks taken", -1, "d"),
    }

    def score(self, item: Item) -> dict:
        return llm_stage_counts(item.retrieved.get(S.TRACE))

    def aggregate(self, rows: Sequence[dict]) -> dict:
        return {"retrieval_llm_unparsed": sum(_col(rows, "llm_unparsed")),
                "retrieval_llm_fallbacks": sum(_col(rows, "llm_fallbacks"))}


@METRICS.register("labels", version="1")
class LabelMetrics:
    """Label tasks (questions with ``choices``, e.g. ExplaGraphs' support / counter): ``accuracy`` (the
    prediction parsed to one label by ``parse_label`` equals the gold label; unparseable counts as wrong),
    ``accuracy_answered`` (failed generations left out), ``accuracy_gretriever`` (G-Retriever's rule: the
    first label occurring in the text), ``label_unparseable``, ``label_counts``. ``task`` is ``entity``,
    ``label`` or ``mixed``."""

    RANK = 1
    OUTPUTS = {
        "accuracy": K("accuracy", "Accuracy (label task: the parsed label is the gold label)", 1),
        "accuracy_answered": K("accuracy (answered)", "Accuracy over answered questions (failed generations left "
                               "out)", 1),
        "label_unparseable": K("labels unparseable", "Predictions naming no label or several (counted wrong)", -1,
                               "d"),
        "accuracy_gretriever": K("accuracy (G-Retriever rule)", "G-Retriever's ExplaGraphs accuracy rule (first "
                                 "support|counter match)", 1),
    }

    def score(self, item: Item) -> dict:
        if not item.choices:
            return {S.CHOICES: [], "label": None, "correct": None, "correct_gretriever": None}
        return {S.CHOICES: item.choices, **label_scores(prediction=item.prediction, predicted=item.predicted,
                                                       gold=item.gold, choices=item.choices)}

    def aggregate(self, rows: Sequence[dict]) -> dict:
        labelled = [x for x in rows if x[S.CHOICES]]
        out: dict[str, Any] = {"task": "label" if labelled and len(labelled) == len(rows)
                               else "mixed" if labelled else "entity"}
        if labelled:
            out["accuracy"] = summarize([x["correct"] for x in labelled])
            out["accuracy_gretriever"] = summarize([x["correct_gretriever"] for x in labelled])
            out["accuracy_answered"] = summarize([x["correct"] for x in labelled if not x[S.FAILED]])
            out["label_unparseable"] = sum(1 for x in labelled if x["label"] is None and not x[S.FAILED])
            counts: dict[str, int] = {}
            for x in labelled:
                key = x["label"] if x["label"] is not None else ("failed" if x[S.FAILED] else "unparseable")
                counts[key] = counts.get(key, 0) + 1
            out["label_counts"] = dict(sorted(counts.items()))
        return out


@METRICS.register("cost", version="2")
class CostMetrics:
    """What answering cost, per question: ``context_tokens_mean`` (prompt tokens), ``tokens_out_mean``,
    ``tokens_per_question``, ``reasoner_calls_per_question`` (the reasoner's LLM requests), ``depth_mean``,
    ``unparseable_outputs`` (LLM outputs no parser could read). What a run took (wall times, backend attempts,
    answers from the call cache) differs between runs of the same results: it is no metric here but a run
    record (``kgrag.timings``, ``reports/timings.json``)."""

    RANK = 9
    OUTPUTS = {
        "context_tokens_mean": K("prompt tokens / q", "Prompt tokens / question", -1),
        "tokens_out_mean": K("output tokens / q", "Output tokens / question", -1),
        "tokens_per_question": K("tokens / q", "Tokens (prompt + output) / question", -1),
        "reasoner_calls_per_question": K("LLM calls / q", "Reasoner LLM requests / question", -1),
        "depth_mean": K("depth / q", "Reasoning depth / question (mean)"),
        "unparseable_outputs": K("unparseable outputs", "Unparseable LLM outputs", -1, "d"),
    }

    def score(self, item: Item) -> dict:
        g = item.generation
        return {S.TOKENS_IN: g.get(S.TOKENS_IN, 0), S.TOKENS_OUT: g.get(S.TOKENS_OUT, 0),
                S.REQUESTS: g.get(S.REQUESTS, 0), S.DEPTH: g.get(S.DEPTH, 0), S.UNPARSEABLE: g.get(S.UNPARSEABLE, 0)}

    def aggregate(self, rows: Sequence[dict]) -> dict:
        return {
            "context_tokens_mean": summarize(_col(rows, S.TOKENS_IN)),
            "tokens_out_mean": summarize(_col(rows, S.TOKENS_OUT)),
            "tokens_per_question": summarize([x[S.TOKENS_IN] + x[S.TOKENS_OUT] for x in rows]),
            "reasoner_calls_per_question": summarize(_col(rows, S.REQUESTS)),
            "depth_mean": summarize(_col(rows, S.DEPTH)),
            "unparseable_outputs": sum(_col(rows, S.UNPARSEABLE)),
        }


@METRICS.register("demo_echoes", version="1")
class DemoEchoes:
    """``demo_echoes``: predictions naming an entity of the prompts' worked example (placeholders no KG
    holds): the model copied the example instead of answering."""

    RANK = 8
    OUTPUTS = {"demo_echoes": K("demo echoes", "Predictions echoing the prompts' worked example", -1, "d")}

    def score(self, item: Item) -> dict:
        return {"demo_echo": echoes_demo(item.prediction)}

    def aggregate(self, rows: Sequence[dict]) -> dict:
        return {"demo_echoes": sum(bool(x) for x in _col(rows, "demo_echo"))}


@METRICS.register("judge", version="1")
class JudgeMetric:
    """``judge``: share of predictions an LLM judge says Yes to ("does the model answer match the ground truth
    answer?", given question, gold and prediction: the grounding paper's GPT4Score with any backend);
    ``judge_unparseable``: replies with no yes / no (counted as no). An empty prediction is a no without a
    call. Built with the judge's client; its calls go through that client's call cache."""

    RANK = 5
    OUTPUTS = {"judge": K("judge", "LLM judge: share judged correct", 1),
               "judge_unparseable": K("judge unparseable", "LLM judge: unparseable verdicts (counted as no)", -1, "d")}

    def __init__(self, *, client: "LLMClient", max_tokens: int = 8, seed: int = 0) -> None:
        self.client, self.max_tokens, self.seed = client, max_tokens, seed

    def score_batch(self, items: Sequence[Item]) -> list[dict]:
        # an unanswerable question is a no without a call (like an empty prediction)
        scored = judge_scores(client=self.client, items=[(i.question.get(S.TEXT) or "", i.gold,
                                                          i.prediction if i.answerable else "") for i in items],
                              max_tokens=self.max_tokens, seed=self.seed)
        return [s if i.answerable else {**s, "judge": 0.0} for i, s in zip(items, scored)]

    def aggregate(self, rows: Sequence[dict]) -> dict:
        return {"judge": summarize(_col(rows, "judge")),
                "judge_unparseable": sum(not x["judge_parsed"] for x in rows)}


@METRICS.register("answerable", version="1")
class Answerable:
    """The benchmark protocol: every question counts, and one whose gold answers are not in the KG (or in its
    own graph), or that has no topic entity (none linked from its text; ``answerable`` false, set by validate),
    is a miss in every metric. ``answerable_fraction``: the
    share of questions that are answerable; ``hit_at_1_answerable`` / ``hit_any_answerable``: Hit@1 / Hit over
    the answerable questions only, beside the all-question figures."""

    RANK = 3
    OUTPUTS = {
        "answerable_fraction": K("answerable", "Questions whose gold answers are in the KG and that have a topic "
                                 "entity (the rest count as misses)"),
        "hit_at_1_answerable": K("Hit@1 (answerable)", "Hit@1 over the answerable questions only", 1),
        "hit_any_answerable": K("Hit (answerable)", "Hit over the answerable questions only", 1),
    }

    def score(self, item: Item) -> dict:
        return {S.ANSWERABLE: item.answerable}

    def aggregate(self, rows: Sequence[dict]) -> dict:
        ok = [x for x in rows if x[S.ANSWERABLE]]
        return {"answerable_fraction": len(ok) / len(rows) if rows else None,
                "hit_at_1_answerable": summarize(_col(ok, "hit_at_1")),
                "hit_any_answerable": summarize(_col(ok, "hit_any"))}


@METRICS.register("intervals", version="1")
class Intervals:
    """``ci95``: seeded bootstrap 95% intervals (percentile method, ``BOOTSTRAP`` resamples of the questions
    with replacement, seed ``SEED``) of ``hit_at_1``, ``hit_any``, ``f1``, ``retrieval_recall`` (questions
    with answer entities) and, for label tasks, ``accuracy``:
    ``{metric: {"low": l, "high": h}}``, so that two runs can be told apart from sampling noise (Efron & Tibshirani,
    An Introduction to the Bootstrap, 1993, ch. 13)."""

    BOOTSTRAP = 1000
    SEED = 0
    KEYS = {"hit_at_1": "hit_at_1", "hit_any": "hit_any", "f1": "f1", "retrieval_recall": "retrieval_recall",
            "accuracy": "correct"}

    def score(self, item: Item) -> dict:
        return {}

    def aggregate(self, rows: Sequence[dict]) -> dict:
        out = {}
        for key, col in self.KEYS.items():
            values = [x.get(col) for x in rows if x.get(col) is not None]
            if values:
                low, high = bootstrap_ci(values, resamples=self.BOOTSTRAP, seed=self.SEED)
                out[key] = {"low": low, "high": high}
        return {"ci95": out}


@METRICS.register("baselines", version="1")
class Baselines:
    """What the LLM adds over no-LLM picks on the same contexts. ``baseline_first`` / ``baseline_random``: Hit@1
    (label tasks: accuracy) of the first and of a seeded random candidate answer (the generate stage's
    ``schema.BASELINE_FIRST`` / ``BASELINE_RANDOM``: the candidates the ``rank`` reasoner scores,
    ``kgrag.reasoning.generate.baselines``); label tasks also ``baseline_majority``, the accuracy of always answering the
    most frequent gold label. ``llm_lift`` = Hit@1 (label tasks: accuracy) minus the best baseline: the share
    of questions the LLM's choice adds. Unanswerable questions score 0 for every baseline, as for the answer.
    ``by_hops`` (a question set mixing declared hop counts): per hop count, questions, Hit@1, the baselines and
    the lift, so that a mixed set's average hides no hop count."""

    RANK = 2
    OUTPUTS = {
        "llm_lift": K("LLM lift", "Hit@1 (or accuracy) minus the best no-LLM baseline on the same contexts", 1),
        "llm_lift_paired": K("LLM lift (paired)", "Hit@1 (or accuracy) minus the first candidate's, paired per "
                             "question: mean, seeded bootstrap 95% interval, questions won and lost", 1),
        "baseline_first": K("first candidate", "No-LLM baseline: Hit@1 of the first candidate answer", 1),
        "baseline_random": K("random candidate", "No-LLM baseline: Hit@1 of a seeded random candidate answer", 1),
        "baseline_majority": K("majority label", "No-LLM baseline (label tasks): accuracy of the most frequent "
                               "gold label", 1),
    }

    @staticmethod
    def _hit(name: str | None, item: Item) -> float | None:
        if name is None or not item.generation:
            return None
        if item.choices:
            return float(bool(name) and normalize(name) in {normalize(g) for g in item.gold})
        return answer_scores(prediction=name, predicted=[name] if name else [], gold=item.gold)["hit_at_1"]

    def score(self, item: Item) -> dict:
        g = item.generation
        out = {"hit_baseline_first": self._hit(g.get(S.BASELINE_FIRST), item),
               "hit_baseline_random": self._hit(g.get(S.BASELINE_RANDOM), item)}
        return out if item.answerable else {k: (0.0 if v is not None else None) for k, v in out.items()}

    @staticmethod
    def _summary(rows: Sequence[dict]) -> dict:
        labelled = bool(rows) and all(x.get(S.CHOICES) for x in rows)
        main = "correct" if labelled else "hit_at_1"
        out: dict[str, Any] = {"baseline_first": summarize(_col(rows, "hit_baseline_first")),
                               "baseline_random": summarize(_col(rows, "hit_baseline_random"))}
        if labelled:
            counts: dict[str, int] = {}
            for x in rows:
                for g in x.get("gold") or []:
                    counts[normalize(g)] = counts.get(normalize(g), 0) + 1
                    break
            out["baseline_majority"] = max(counts.values()) / len(rows) if counts else None
        score = summarize(_col(rows, main))
        best = [v for v in out.values() if v is not None]
        out["llm_lift"] = round(score - max(best), 4) if score is not None and best else None
        pairs = [(x.get(main), x.get("hit_baseline_first")) for x in rows]
        pairs = [(float(a), float(b)) for a, b in pairs if a is not None and b is not None]
        if pairs:  # the LLM's lift over the first candidate, paired per question, with its bootstrap interval
            d = [a - b for a, b in pairs]
            out["llm_lift_paired"] = {"lift": round(sum(d) / len(d), 4), "ci95": bootstrap_ci(d),
                                      "won": sum(x > 0 for x in d), "lost": sum(x < 0 for x in d),
                                      "questions": len(d)}
        return out

    def aggregate(self, rows: Sequence[dict]) -> dict:
        out = self._summary(rows)
        hops = sorted({x.get(S.HOPS) for x in rows if x.get(S.HOPS) is not None})
        if len(hops) > 1:
            out["by_hops"] = {}
            for k in hops:
                sub = [x for x in rows if x.get(S.HOPS) == k]
                out["by_hops"][str(k)] = {"questions": len(sub), "hit_at_1": summarize(_col(sub, "hit_at_1")),
                                          "f1": summarize(_col(sub, "f1")), **self._summary(sub)}
        return out


#: keys evaluate_rows writes itself, beside the metrics'
TOTALS = {
    "questions": K("questions", "Questions", 0, "d"),
    "failed": K("failed", "Failed questions", -1, "d"),
    "answered": K("answered", "Answered questions (generation did not fail)", 1, "d"),
}


def metric_keys() -> dict[str, MetricKey]:
    """Every ``reports/metrics.json`` key a registered metric declares (its ``OUTPUTS``), in display order
    (metrics by ``RANK``, then name; keys as declared), then the totals: what report and compare read their
    labels, names, directions and formats from. A metric registered from outside the package
    (``METRICS.register``) is in it as soon as it is registered."""
    entries = [METRICS.get(n).impl for n in METRICS.names()]
    out: dict[str, MetricKey] = {}
    for cls in sorted(entries, key=lambda c: (getattr(c, "RANK", 100), c.__name__)):
        for k, v in getattr(cls, "OUTPUTS", {}).items():
            out.setdefault(k, v)
    for k, v in TOTALS.items():
        out.setdefault(k, v)
    return out


def bootstrap_ci(values: Sequence[float], *, resamples: int = 1000, seed: int = 0, level: float = 0.95,
                 chunk: int = 100) -> list[float]:
    """Percentile bootstrap interval of the mean of ``values``: ``[low, high]``, rounded to 4 places.

    ``resamples`` means of ``len(values)`` draws with replacement (numpy ``default_rng(seed)``, drawn ``chunk``
    resamples at a time so that memory stays at ``chunk * len(values)`` indices); the interval is their
    ``(1 - level) / 2`` and ``(1 + level) / 2`` quantiles.
    """
    import numpy as np

    v = np.asarray(values, dtype=np.float64)
    rng = np.random.default_rng(seed)
    means = []
    for start in range(0, resamples, chunk):
        k = min(chunk, resamples - start)
        idx = rng.integers(0, len(v), size=(k, len(v)), dtype=np.int32)
        means.append(v[idx].mean(axis=1))
    m = np.concatenate(means)
    lo, hi = np.quantile(m, [(1 - level) / 2, (1 + level) / 2])
    return [round(float(lo), 4), round(float(hi), 4)]
