"""Prompts and reply text: the answer request built from a question and its textualized subgraph (system
prompt, few-shot demo, label choices), the prompt context of named triples, and the parsing of a reply into
answers. No LLM call is made here: reasoners yield the requests (``kgrag.reasoning.reasoners``)."""

from __future__ import annotations

import re
from typing import Sequence

from kgrag.llm.calls import LLMRequest
from kgrag.registry import TEXTUALIZERS


SYSTEM = (
    "You answer questions using the knowledge graph facts you are given. "
    "Reply with the answer names only, separated by ' | '. No sentences."
)
# One worked example shown before the question (``generate.few_shot``): it teaches small models the
# answer *format* only. It holds no domain and no dataset: its entities and relations are placeholders no KG
# holds ("Entity One" ..., "relation_1", "relation_2"), so that the example primes no domain (kgrag answers
# over any KG) and a model copying the example (small models do) cannot be scored right by accident. Every
# reasoner's worked example uses only these names (tests/test_prompts_neutral.py), and the evaluate stage
# counts predictions that echo them (``demo_echoes``). The names are number words, not letters: answers are
# compared after the articles a / an / the are dropped (``kgrag.evaluation.evaluate.normalize``), so "Entity A"
# would read as "entity" and any prediction naming an entity would count as an echo. A prompt whose output is
# constrained (``reason.constrain_answer``) shows no example. The example's shape: a two-hop question whose
# first hop is walked from tail to head, the facts not in hop order (nor are retrieved ones).
# Follow-up: a worked example taken from the user's own labelled data (as ``demos: k`` does for relation paths).
DEMO_NAMES = ("Entity One", "Entity Two", "Entity Three", "Entity Four", "Entity Five")
#: the placeholder relations of the worked examples
DEMO_RELATIONS = ("relation_1", "relation_2")
#: the worked examples' question (the agent's shows the topic entity in brackets, as its questions do)
DEMO_QUESTION = "what is the relation_2 of the entities whose relation_1 is Entity One"
DEMO = (
    "Knowledge graph facts (head, relation, tail):\n(Entity Two, relation_2, Entity Four)\n"
    "(Entity Two, relation_1, Entity One)\n(Entity Three, relation_1, Entity One)\n"
    "(Entity Three, relation_2, Entity Five)\n\n"
    f"Question: {DEMO_QUESTION}\nAnswer:",
    "Entity Four | Entity Five",
)


#: the separator the prompt constants are written with (``evaluate.answer_separator``'s default): every answer
#: list in them, instruction or worked example, is written `` | ``; :func:`separated` rewrites them for another
DEFAULT_SEPARATOR = "|"


def separated(text: str, separator: str = DEFAULT_SEPARATOR) -> str:
    """A prompt constant (its answer lists written `` | ``) asking for answers separated by ``separator``
    (``evaluate.answer_separator``, the one parsing splits on). Only kgrag's own prompt text goes through here,
    never a question, its choices or its facts."""
    sep = separator.strip() or separator
    return text if sep == DEFAULT_SEPARATOR else text.replace(f" {DEFAULT_SEPARATOR} ", f" {sep} ")


# A label task (a question with ``choices``, e.g. ExplaGraphs' support / counter) is answered with one label.
LABEL_SYSTEM = (
    "You answer questions using the knowledge graph facts you are given. "
    "Reply with exactly one of the listed choices. No sentences."
)


def choices_line(choices: Sequence[str]) -> str:
    """The prompt line that lists a label question's choices ("" for a question answered with entities)."""
    return f"\nChoices: {' | '.join(choices)}" if choices else ""


def clean_question(text: str) -> str:
    """The question without MetaQA's [topic] brackets."""
    return re.sub(r"\[([^\]]+)\]", r"\1", text).strip()


def build_request(
    *, question: str, context: str, temperature: float, top_p: float, max_tokens: int, seed: int,
    few_shot: bool = True, choices: Sequence[str] = (), separator: str = DEFAULT_SEPARATOR,
) -> LLMRequest:
    """Chat request for one question and its context text (after one worked example if ``few_shot``), asking
    for answer names separated by ``separator`` (``evaluate.answer_separator``).

    A label question (``choices``) lists its choices and asks for one of them; the worked example, which
    teaches lists of entity names, is then left out.
    """
    user = f"Question: {clean_question(question)}{choices_line(choices)}\nAnswer:"
    if context:
        user = f"Knowledge graph facts (head, relation, tail):\n{context}\n\n{user}"
    demo = (("user", DEMO[0]), ("assistant", separated(DEMO[1], separator))) if few_shot and not choices else ()
    return LLMRequest(
        messages=(("system", LABEL_SYSTEM if choices else separated(SYSTEM, separator)), *demo, ("user", user)),
        temperature=temperature, top_p=top_p, max_tokens=max_tokens, seed=seed,
    )


# a list bullet before an answer: a dash followed by a space (``-4.5`` is a number), ``*`` or ``•``, or a number
# with ``.`` then a space (``3. Paris``; ``33.82`` and ``1.5 million`` are numbers) or with ``)`` (``1) Rome``)
_BULLET = re.compile(r"^\s*(?:[-–—]\s+|[*•]\s*|\d+\.\s+|\d+\)\s*)")


def parse_answers(text: str, separator: str = DEFAULT_SEPARATOR) -> list[str]:
    """Answer names from an LLM reply: split on the separator and newlines, list bullets and quotes removed, a
    final full stop dropped. Numbers, signs and dates stay whole (``33.82``, ``-4.5``, ``1.5 million``,
    ``2014-06-12``); ``3. Paris`` and ``1) Rome`` are read as bullets. A reasoner that chose entities reports them
    itself (``Reasoning.answers``): its answer is not parsed back from text."""
    text = text.strip()
    if text.lower().startswith("answer:"):
        text = text[7:]
    parts: list[str] = []
    for line in text.splitlines():
        for p in line.split(separator):
            p = _BULLET.sub("", p).strip().strip("\"'`").rstrip(".").strip()
            if p and p not in parts:
                parts.append(p)
    return parts


def context_text(named_triples: Sequence[tuple[str, str, str]], *, form: str, max_triples: int) -> str:
    """Textualize the first ``max_triples`` triples (retrieval order = best first) with textualizer ``form``."""
    return TEXTUALIZERS.get(form).impl(list(named_triples)[:max_triples])
