"""Metrics: per-question scores and their aggregates, each named by its rule (every key: ``docs/metrics.md``).

kgrag's own (strict) rules, on ``normalize``d text:

- ``hit_at_1``: the first predicted answer equals a gold answer after normalization.
- ``hit_any``: some gold answer occurs in the prediction text as whole words (normalized both sides).
- ``em``: the set of predicted answers equals the set of gold answers (normalized).
- ``precision`` / ``recall`` / ``f1``: over the normalized answer sets.
- ``retrieval_recall``: share of gold answer entities among the entities of the triples the prompt holds (the
  first ``generate.max_context_triples`` retrieved triples); ``retrieval_recall_uncapped``: among the whole
  retrieved subgraph's nodes. ``context_triples`` / ``context_triples_uncapped`` likewise.
- ``rouge_l``: Rouge-L F1 (longest common subsequence of normalized words) between the prediction text
  and the gold answers joined by `` | `` (the grounding paper's rule-based metric, Lin 2004).
- ``judge``: an LLM judge's yes / no to "does the model answer match the ground truth answer?" (the
  grounding paper's GPT4Score, with any backend); an unparseable verdict counts as no and is counted.
- ``accuracy`` (label tasks: questions with ``choices``, e.g. ExplaGraphs' support / counter): the prediction
  parsed to one label (``parse_label``) equals the gold label; an unparseable prediction is wrong and counted
  in ``label_unparseable``. ``accuracy_answered`` leaves out failed generations.

The papers' own rules, to compare with a paper's numbers only under that paper's rule (each far more lenient):

- ``hit_gretriever``: G-Retriever's Hit (``hit_gretriever_rule``), the number its paper reports as WebQSP
  "Hit@1".
- ``accuracy_gretriever``: G-Retriever's ExplaGraphs accuracy (``accuracy_gretriever_rule``).
- ``em_tog``: Think-on-Graph's exact match (``em_tog_rule``), the "Hits@1" / EM of ToG and FastToG.

Run records (wall times, backend attempts, answers served from the LLM call cache) are no metrics: they differ
between runs of the same results and live in ``reports/timings.json`` (``kgrag.timings``).
"""

from __future__ import annotations

import re
import string
import unicodedata
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable, Sequence

import numpy as np

from kgrag import schema as S
from kgrag.types import retrieval_recall  # noqa: F401 (a metric rule, defined with the Subgraph)


if TYPE_CHECKING:
    from kgrag.llm.calls import LLMClient, LLMRequest

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PERCENT = re.compile(r"%[0-9A-Fa-f]{2}")
_ACRONYM = re.compile(r"\b(?:[^\W\d_]\.){2,}")
_APOSTROPHES = re.compile(r"['\u2018\u2019\u02bc`\u00b4]")
_SEPARATORS = re.compile(r"[^\w\s]|_")


def normalize(s: str) -> str:
    """An answer or a prediction in the form both sides are compared in (kgrag's rule, applied to both).

    In order: ``%XX`` escapes decoded (N-Triples local names: ``Ocean%27s_Eleven``); accents folded
    (NFKD, combining marks dropped: ``Josèphe`` → ``josephe``); lower-cased; dotted acronyms joined
    (``L.A.`` → ``la``, ``J.R.R.`` → ``jrr``); ``&`` read as ``and``; apostrophes deleted (they join a word:
    ``Schindler's`` → ``schindlers``); every other punctuation mark, symbol and separator — ``_`` and ``-``
    of underscore-style and N-Triples names, ``|`` between answers, ``.``, ``,``, ``:``, ``/`` … — read as
    a space (``Drama|Crime`` → ``drama crime``, ``marie_josephe_of_saxony`` and ``Marie-Josephe of Saxony``
    → ``marie josephe of saxony``); the articles a / an / the dropped; white space folded.

    Unlike SQuAD's normalization (which deletes punctuation, so ``Drama|Crime`` became ``dramacrime``) a
    separator never glues two words together.
    """
    if "%" in s:
        from urllib.parse import unquote

        s = _PERCENT.sub(lambda m: unquote(m.group(0)), s)
    s = "".join(c for c in unicodedata.normalize("NFKD", s) if not unicodedata.combining(c)).lower()
    s = _ACRONYM.sub(lambda m: m.group(0).replace(".", ""), s)
    s = _APOSTROPHES.sub("", s.replace("&", " and "))
    s = _SEPARATORS.sub(" ", s)
    return " ".join(_ARTICLES.sub(" ", s).split())


# ---- the papers' own rules ---------------------------------------------------------------------------------

_GR_PUNCT = set(string.punctuation)


def gretriever_normalize(s: str) -> str:
    """G-Retriever's ``normalize`` (``src/utils/evaluate.py``), verbatim: lower-case, *delete* ASCII
    punctuation, drop articles and ``<pad>``, fold white space."""
    s = s.lower()
    s = "".join(ch for ch in s if ch not in _GR_PUNCT)
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    s = re.sub(r"\b(<pad>)\b", " ", s)
    return " ".join(s.split())


def hit_gretriever_rule(prediction: str, gold: Sequence[str]) -> float:
    """G-Retriever's Hit (``get_accuracy_webqsp`` / ``eval_hit`` of its code), the number its paper reports
    as WebQSP "Hit@1" (He et al., 2024, section 5 and Table 3).

    The prediction's ``|`` become new lines, its lines are joined by a space, and a question is a hit when
    some gold answer, normalized by ``gretriever_normalize``, is a *substring* of the normalized prediction
    (no word boundary: gold ``art`` hits ``party``; punctuation deleted, so ``Drama|Crime`` still reads
    ``drama crime`` because the ``|`` became a space first). An empty normalized gold answer hits any
    prediction (as in the original code).
    """
    text = " ".join(prediction.replace("|", "\n").split("\n"))
    norm = gretriever_normalize(text)
    return float(any(gretriever_normalize(a) in norm for a in gold))


def accuracy_gretriever_rule(prediction: str, gold: Sequence[str], choices: Sequence[str]) -> float:
    """G-Retriever's ExplaGraphs accuracy (``get_accuracy_expla_graphs`` of its code; the paper's Table 3
    "Accuracy"): the *first* occurrence in the stripped prediction of a choice written lower-case or
    capitalized (``support|Support|Counter|counter`` for ExplaGraphs, no word boundary: ``supports``,
    ``counterargument`` and ``does not support`` count) decides; correct when it equals the gold label
    (lower-cased). No occurrence is wrong; naming both labels counts the first."""
    forms = [f for c in choices for f in dict.fromkeys((c.lower(), c.capitalize()))]
    if not forms:
        return 0.0
    m = re.search("|".join(re.escape(f) for f in forms), prediction.strip())
    return float(m is not None and m.group(0).lower() in {g.lower() for g in gold})


def em_tog_rule(prediction: str, gold: Sequence[str]) -> float:
    """Think-on-Graph's exact match (``exact_match`` in ToG's ``eval/utils.py``; Sun et al., 2024, section 3.1
    "Hits@1"; FastToG reports the same, its section "Dataset and Evaluation Metric").

    When the prediction holds ``{``, only the text between the first ``{`` and the first ``}`` counts (ToG's
    ``clean_results``). Both sides are lower-cased with every space removed (nothing else); a match is
    equality or either string containing the other (``mann`` matches ``michaelmann`` and vice versa).
    One deviation: an empty prediction matches nothing (in ToG's code ``"" in answer`` is always true).
    """
    text = prediction
    if "{" in text:
        start = text.find("{") + 1
        text = text[start: text.find("}")]
    p = text.strip().replace(" ", "").lower()
    if not p:
        return 0.0
    for a in gold:
        g = a.strip().replace(" ", "").lower()
        if p == g or p in g or g in p:
            return 1.0
    return 0.0


def answer_scores(*, prediction: str, predicted: Sequence[str], gold: Sequence[str]) -> dict[str, float]:
    """Hit@1, Hit, EM, precision, recall, F1 of one question (kgrag's rules), and the papers' ``hit_gretriever``
    and ``em_tog``."""
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
        # the first answer alone as the answer set: F1 "both ways" beside f1 (a top_k: auto list, or one answer)
        "f1_top1": (2 / (1 + len(gold_n)) if pred_n and pred_n[0] in gold_n else 0.0) if gold_n else 0.0,
        "hit_gretriever": hit_gretriever_rule(prediction, gold),
        "em_tog": em_tog_rule(prediction, gold),
    }


# a negation up to two words before a label, on normalized text (where "doesn't" reads "doesnt")
_NEGATION = re.compile(r"\b(?:not|no|never|neither|nor|without|cannot|(?:do|does|did|is|are|was|were|has|have|had"
                       r"|would|could|should|ca|wo)nt)(?:\s+\w+){0,2}\s*$")


def parse_label(*, prediction: str, predicted: Sequence[str], choices: Sequence[str]) -> str | None:
    """The one label of ``choices`` a prediction names; None when it names none or several (unparseable).

    Rule, on normalized text (``normalize``): the parsed answers that equal a label decide when they name
    exactly one (``Counter.``), and none when they name several (``support | counter``); when no parsed
    answer is a label, the labels the text mentions as words, allowing an inflection (``supports``,
    ``countered``, ``supporting``), decide when exactly one is mentioned (``support or counter`` is
    ambiguous, so unparseable). A mention negated by one of not / n't / no / never / neither / nor / without
    up to two words before it (``does not support``, ``doesn't really support``) does not name the label:
    a negation is not read as the other label (that is an inference the model did not state), so
    ``does not support`` alone is unparseable and ``does not support it, it counters it`` is counter.
    """
    labels = {normalize(c): c for c in choices if normalize(c)}
    exact = {labels[normalize(p)] for p in predicted if normalize(p) in labels}
    if exact:
        return exact.pop() if len(exact) == 1 else None
    text = normalize(prediction)
    named = [lab for key, lab in labels.items()
             if any(not _NEGATION.search(text[: m.start()])
                    for m in re.finditer(r"(?<!\w)" + re.escape(key) + r"(?:s|es|ed|d|ing)?(?!\w)", text))]
    return named[0] if len(named) == 1 else None


def label_scores(*, prediction: str, predicted: Sequence[str], gold: Sequence[str], choices: Sequence[str]
                 ) -> dict[str, object]:
    """``label`` (the parsed label or None), ``correct`` (1.0 when it is a gold label) and ``correct_gretriever``
    (G-Retriever's rule, ``accuracy_gretriever_rule``) of one label question."""
    label = parse_label(prediction=prediction, predicted=predicted, choices=choices)
    gold_n = {normalize(g) for g in gold}
    return {"label": label, "correct": float(label is not None and normalize(label) in gold_n),
            "correct_gretriever": accuracy_gretriever_rule(prediction, gold, choices)}


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
    from kgrag.llm.prompts import clean_question
    from kgrag.llm.calls import LLMRequest

    user = (f"Question: {clean_question(question)}\nGround Truth Answer: {' | '.join(gold)}\n"
            f"Model Answer: {prediction.strip()}\n"
            "Does the model answer match the ground truth answer? Answer Yes or No.")
    return LLMRequest(messages=(("system", JUDGE_SYSTEM), ("user", user)), temperature=0.0, top_p=1.0,
                      max_tokens=max_tokens, seed=seed)


_VERDICT = re.compile(r"\b(yes|no|correct|incorrect|true|false|matches|match|does not match|doesn't match)\b", re.I)
_POSITIVE = ("yes", "correct", "true", "matches", "match")
_NEGATED = re.compile(r"(?:\bnot|n't|\bnever)\s+(?:\w+\s+)?$", re.I)


def parse_verdict(text: str) -> bool | None:
    """A judge's verdict: the first yes / no (or correct / incorrect, true / false, matches / does not
    match) in the reply, a positive word negated just before it (``not correct``, ``isn't a match``,
    ``not really true``) read as no; None when there is none."""
    t = (text or "").replace("\u2019", "'")
    m = _VERDICT.search(t)
    if m is None:
        return None
    word = m.group(1).lower()
    if word in _POSITIVE:
        return not _NEGATED.search(t[: m.start()])
    return False


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


def prompt_triples(retrieved: dict, max_triples: int | None) -> tuple[int, list[int]]:
    """(triples, entity ids of those triples) of what the prompt holds: the first ``max_triples`` retrieved
    triples (``kgrag.reasoning.generate.contexts_for``; None = all)."""

    heads = list(retrieved.get(S.TRIPLE_HEADS) or [])
    tails = list(retrieved.get(S.TRIPLE_TAILS) or [])
    n = len(heads) if max_triples is None else min(len(heads), max_triples)
    return n, heads[:n] + tails[:n]


def llm_stage_counts(trace: str | None) -> dict[str, int]:
    """LLM replies a multi-stage retriever could not use, summed over its stages' trace entries:
    ``llm_unparsed`` (items an LLM scorer did not rate, replies the refiner matched to no path) and
    ``llm_fallbacks`` (stages that fell back to their documented default)."""
    import json

    out = {"llm_unparsed": 0, "llm_fallbacks": 0}
    try:
        stages = json.loads(trace or "{}").get("stages") or []
    except (TypeError, ValueError):
        return out
    for st in stages:
        for k in out:
            out[k] += int(st.get(k, 0) or 0)
    return out


def echoes_demo(prediction: str) -> bool:
    """Whether a prediction names an entity of the prompts' worked example (``kgrag.llm.prompts.DEMO_NAMES``,
    placeholders no KG holds): the model copied the example instead of answering."""
    from kgrag.llm.prompts import DEMO_NAMES

    text = normalize(prediction or "")
    return any(re.search(r"(?<!\w)" + re.escape(normalize(n)) + r"(?!\w)", text) for n in DEMO_NAMES)


def summarize(values: Sequence[float | None]) -> float | None:
    """Mean of the non-null values (None when there are none)."""
    v = [x for x in values if x is not None]
    return float(np.mean(v)) if v else None


@dataclass(frozen=True)
class Item:
    """The input of every metric (``kgrag.evaluation.metrics``): one question's inputs: its questions-table row, its retrieved row and its generations row (empty dicts
    when missing), and the prompt's triple cap (``generate.max_context_triples``; None = no cap)."""

    question: dict
    retrieved: dict = field(default_factory=dict)
    generation: dict = field(default_factory=dict)
    max_context_triples: int | None = None

    @property
    def prediction(self) -> str:
        return self.generation.get(S.PREDICTION) or ""

    @property
    def predicted(self) -> list[str]:
        return list(self.generation.get(S.PREDICTED_ANSWERS) or [])

    @property
    def gold(self) -> list[str]:
        return list(self.question.get(S.ANSWERS) or [])

    @property
    def choices(self) -> list[str]:
        return [c for c in (self.question.get(S.CHOICES) or []) if c is not None]

    @property
    def failed(self) -> bool:
        return bool(self.generation.get(S.FAILED, not self.generation))

    @property
    def answerable(self) -> bool:
        """False when validate found no gold answer in the KG (or the question's graph): scored as a miss."""
        return self.question.get(S.ANSWERABLE) is not False


def percentile(values: Sequence[float], q: float) -> float | None:
    """q-th percentile of the values (None when empty)."""
    return float(np.percentile(values, q)) if len(values) else None


def default_metrics(*, judge: "LLMClient | None" = None, judge_max_tokens: int = 8, judge_seed: int = 0) -> list:
    """Every registered metric (``kgrag.evaluation.metrics``, name order); the LLM judge only when a client is given."""
    from kgrag.registry import METRICS

    out = []
    for name in METRICS.names():
        impl = METRICS.get(name).impl
        if name != "judge":
            out.append(impl())
        elif judge is not None:
            out.append(impl(client=judge, max_tokens=judge_max_tokens, seed=judge_seed))
    return out


#: per-question text columns of ``reports/predictions.parquet`` that no aggregate reads: the evaluate stage streams
#: them to disk and keeps every other column for the aggregates (``aggregate_rows``), so its memory holds a chunk
#: of traces and contexts at a time, not the split's
TEXT_COLUMNS = (S.TRACE, "retrieved_triples")


def chosen_metrics(*, metrics: Sequence | None = None, judge: "LLMClient | None" = None, judge_max_tokens: int = 8,
                   judge_seed: int = 0) -> list:
    """``metrics`` when given, else every registered metric (``default_metrics``)."""
    return list(metrics) if metrics is not None else default_metrics(
        judge=judge, judge_max_tokens=judge_max_tokens, judge_seed=judge_seed)


def score_rows(*, questions: Sequence[dict], retrieved: Sequence[dict], generations: Sequence[dict],
               metrics: Sequence, max_context_triples: int | None = None) -> list[dict]:
    """Join questions, retrieval and generation rows (by question id; a missing row is an empty dict) and score
    each question with every metric of ``metrics``: the per-question rows of ``reports/predictions.parquet``, in
    question order. Any subset of questions can be scored on its own (the stage scores the split a chunk at a
    time)."""
    ret = {r[S.QUESTION_ID]: r for r in retrieved}
    gen = {g[S.QUESTION_ID]: g for g in generations}
    items = [Item(q, ret.get(q[S.QUESTION_ID], {}), gen.get(q[S.QUESTION_ID], {}), max_context_triples)
             for q in questions]
    rows = [{S.QUESTION_ID: it.question[S.QUESTION_ID], "question": it.question[S.TEXT],
             S.QTYPE: it.question.get(S.QTYPE) or "", S.HOPS: it.question.get(S.HOPS), "gold": it.gold,
             S.PREDICTION: it.prediction, S.PREDICTED_ANSWERS: it.predicted, S.REASONER: it.generation.get(S.REASONER),
             S.FAILED: it.failed, S.ERROR: it.generation.get(S.ERROR), S.TRACE: it.generation.get(S.TRACE)}
            for it in items]
    for m in metrics:
        scored = m.score_batch(items) if hasattr(m, "score_batch") else [m.score(it) for it in items]
        for row, s in zip(rows, scored):
            row.update(s)
    return rows


def aggregate_rows(rows: Sequence[dict], metrics: Sequence, *, max_context_triples: int | None = None) -> dict:
    """``reports/metrics.json``'s aggregates of every question's row (``score_rows``; the ``TEXT_COLUMNS`` may be
    left out): the totals, then each metric's ``aggregate``."""
    n = len(rows)
    failed = sum(x[S.FAILED] for x in rows)
    out: dict = {"questions": n, "failed": failed, "answered": n - failed, "max_context_triples": max_context_triples}
    for m in metrics:
        out.update(m.aggregate(rows))
    return out


def evaluate_rows(
    *, questions: Sequence[dict], retrieved: Sequence[dict], generations: Sequence[dict],
    judge: "LLMClient | None" = None, judge_max_tokens: int = 8, judge_seed: int = 0,
    max_context_triples: int | None = None, metrics: Sequence | None = None,
) -> tuple[list[dict], dict]:
    """Join questions, retrieval and generation rows; score each question with every registered metric
    (``kgrag.evaluation.metrics``: each states its rule) and aggregate (``score_rows`` then ``aggregate_rows``,
    in memory; the evaluate stage streams the same two steps a chunk at a time).

    Failed generations score 0 and are counted in ``failed``; retrieval recall ignores questions
    without answer entities. Label tasks (questions with ``choices``) get ``accuracy`` and its companions;
    ``task`` says ``entity``, ``label`` or ``mixed``. With a ``judge`` client every prediction is also
    LLM-judged (``judge``, ``judge_unparseable``); without one those metrics are absent.
    ``retrieval_recall`` and ``context_triples`` count what the prompt holds, the first ``max_context_triples``
    triples (``generate.max_context_triples``; None = no cap); ``*_uncapped`` the whole retrieved subgraph.
    ``metrics`` replaces the registered set (objects with ``score`` or ``score_batch``, and ``aggregate``).
    """
    chosen = chosen_metrics(metrics=metrics, judge=judge, judge_max_tokens=judge_max_tokens, judge_seed=judge_seed)
    rows = score_rows(questions=questions, retrieved=retrieved, generations=generations, metrics=chosen,
                      max_context_triples=max_context_triples)
    return rows, aggregate_rows(rows, chosen, max_context_triples=max_context_triples)


RULES = (
    ("kgrag", "hit_at_1", "first parsed answer equals a gold answer (normalize both)"),
    ("kgrag", "hit_any", "a gold answer occurs in the text as whole words (normalize both)"),
    ("kgrag", "em", "parsed answer set equals the gold set"),
    ("kgrag", "f1", "F1 of the parsed answer set"),
    ("kgrag", "accuracy", "label tasks: parse_label equals the gold label"),
    ("G-Retriever", "hit_gretriever", "'|' to line breaks, substring match (its WebQSP 'Hit@1')"),
    ("G-Retriever", "accuracy_gretriever", "label tasks: first support|counter match (its ExplaGraphs accuracy)"),
    ("ToG", "em_tog", "bidirectional substring on space-stripped lower-cased text (ToG / FastToG 'Hits@1')"),
)


def rescore_rows(rows: Sequence[dict]) -> dict[str, float | int | None]:
    """Today's kgrag rules and the papers' rules recomputed from per-question rows of
    ``reports/predictions.parquet`` (``prediction``, ``predicted_answers``, ``gold``, ``choices``): the
    numbers ``RULES`` names, plus ``questions``."""

    per = []
    for x in rows:
        pred = x.get(S.PREDICTION) or ""
        predicted = list(x.get(S.PREDICTED_ANSWERS) or [])
        gold = [g for g in (x.get("gold") or []) if g is not None]
        choices = [c for c in (x.get(S.CHOICES) or []) if c is not None]
        sc = answer_scores(prediction=pred, predicted=predicted, gold=gold)
        if x.get(S.ANSWERABLE) is False:  # the protocol: a question whose answers the KG lacks is a miss
            sc = {k: 0.0 for k in sc}
        if choices:
            sc.update(label_scores(prediction=pred, predicted=predicted, gold=gold, choices=choices))
        per.append(sc)
    out: dict[str, float | int | None] = {"questions": len(per)}
    for _, key, _ in RULES:
        src = {"accuracy": "correct", "accuracy_gretriever": "correct_gretriever"}.get(key, key)
        out[key] = summarize([x.get(src) for x in per])
    return out


def stage_metrics(*, questions: Sequence[dict], retrieved: Iterable[dict],
                  stage_ms: dict[str, Sequence[float] | None] | None = None) -> list[dict]:
    """Per-module retrieval metrics of multi-stage retrievers (the ``stages`` of a retrieved row's trace).

    For each stage: precision, recall, F1 and hit ratio of the gold answer entities among the stage's
    output nodes, mean output size and mean and median wall time (``ms_mean``, ``ms_median``; the median is
    robust to one-time model loads in the first question), averaged over questions with answer entities;
    ``llm_unparsed`` / ``llm_fallbacks``: LLM replies of the stage not used / fallbacks taken, summed.
    Rows whose trace has no ``stages`` (single-shot retrievers) contribute nothing. ``retrieved`` is read once,
    in order (the evaluate stage streams it from retrieved.parquet).

    The wall times are run records, never in the trace: ``stage_ms`` maps a question id to its ``stage_ms``
    (the retrieve stage's ``data/timings/retrieve/questions.parquet``); without it each row's own
    ``stage_ms`` column is read (the in-memory rows of ``runner.retrieve_rows`` carry it). A list is used
    only when it has one entry per trace stage; ``ms_mean`` / ``ms_median`` are None without times.

    References
    ----------
    Cao et al., LEGO-GraphRAG (2024), Figures 1-4 (per-module P / R / F1 / hit ratio) and Table 6 (time).
    """
    import json


    gold = {q[S.QUESTION_ID]: {i for i in (q[S.ANSWER_IDS] or []) if i is not None} for q in questions}
    acc: dict[tuple[int, str, str], dict[str, list[float]]] = {}
    for r in retrieved:
        answers = gold.get(r[S.QUESTION_ID]) or set()
        try:
            stages = json.loads(r.get(S.TRACE) or "{}").get("stages") or []
        except (TypeError, ValueError):
            stages = []
        ms = (stage_ms.get(r[S.QUESTION_ID]) if stage_ms is not None else r.get(S.STAGE_MS)) or []
        if len(ms) != len(stages):  # not this trace's times
            ms = []
        for pos, st in enumerate(stages):
            if not answers or "node_ids" not in st:
                continue
            nodes = set(st["node_ids"])
            tp = len(nodes & answers)
            p = tp / len(nodes) if nodes else 0.0
            rec = tp / len(answers)
            a = acc.setdefault((pos, st["stage"], st.get("module", "")),
                               {"precision": [], "recall": [], "f1": [], "hit": [], "nodes": [], "ms": [],
                                "llm_unparsed": [], "llm_fallbacks": []})
            a["precision"].append(p)
            a["recall"].append(rec)
            a["f1"].append(2 * p * rec / (p + rec) if p + rec else 0.0)
            a["hit"].append(float(tp > 0))
            a["nodes"].append(float(len(nodes)))
            if ms and ms[pos] is not None:
                a["ms"].append(float(ms[pos]))
            a["llm_unparsed"].append(float(st.get("llm_unparsed", 0) or 0))
            a["llm_fallbacks"].append(float(st.get("llm_fallbacks", 0) or 0))
    return [
        {"stage": stage, "module": module, "questions": len(v["recall"]),
         **{k: summarize(v[k]) for k in ("precision", "recall", "f1", "hit")},
         "nodes_mean": summarize(v["nodes"]), "ms_mean": summarize(v["ms"]), "ms_median": percentile(v["ms"], 50),
         "llm_unparsed": int(sum(v["llm_unparsed"])), "llm_fallbacks": int(sum(v["llm_fallbacks"]))}
        for (_, stage, module), v in sorted(acc.items())
    ]
