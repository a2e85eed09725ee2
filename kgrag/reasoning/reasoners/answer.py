"""``answer``: one call answering from the retrieved context (the default; G-Retriever / LEGO generation)."""

from __future__ import annotations

from kgrag.llm.constrain import constrain_choices, constrain_entities, context_entities
from kgrag.llm.prompts import build_request
from kgrag.reasoning.reasoners.core import REASONERS, ReasonGen, ReasonInput, Reasoning, text_of
from kgrag.registry import NoParams


@REASONERS.register("answer", params=NoParams, version="3")
def answer(*, inp: ReasonInput, params: NoParams) -> ReasonGen:
    """Question + textualized subgraph (+ the one-shot format example, ``kgrag.llm.prompts.DEMO``) → answer names.

    With ``inp.constrain_answer`` the output is constrained (grammar) to entity names of the context,
    one or several joined by `` | ``, and shows no worked example; a context without entity names leaves it
    unconstrained. A label question (``Question.choices``) is asked for one of its choices, constrained to
    exactly one of them.
    """
    s = inp.sampling
    choices = inp.question.choices
    # a constrained output needs no format example (and so cannot copy one)
    req = build_request(question=inp.question.text, context=inp.context, temperature=s.temperature, top_p=s.top_p,
                        max_tokens=s.max_tokens, seed=s.seed, few_shot=s.few_shot and not inp.constrain_answer,
                        choices=choices, separator=s.separator)
    trace: dict = {"reasoner": "answer"}
    if inp.constrain_answer and choices:
        req = constrain_choices(req, choices)
        trace["constrained_to"] = len(choices)
    elif inp.constrain_answer:
        # constrained decoding: one or more entity names of the context joined by the separator (the prompt's)
        names = context_entities(inp.context, inp.kg)
        req = constrain_entities(req, names, multiple=True, separator=f" {s.separator} ")
        trace["constrained_to"] = len(names)
    (rec,) = yield [req]
    return Reasoning(answer=text_of(rec), depth=0, trace=trace)
