"""``answer``: one call answering from the retrieved context (the default; G-Retriever / LEGO generation)."""

from __future__ import annotations

from kgrag.generate import build_request
from kgrag.reasoners.core import REASONERS, ReasonGen, ReasonInput, Reasoning, text_of
from kgrag.registry import NoParams


@REASONERS.register("answer", params=NoParams, version="1")
def answer(*, inp: ReasonInput, params: NoParams) -> ReasonGen:
    """Question + textualized subgraph (+ the one-shot format example) → answer names."""
    s = inp.sampling
    req = build_request(question=inp.question.text, context=inp.context, temperature=s.temperature, top_p=s.top_p,
                        max_tokens=s.max_tokens, seed=s.seed, few_shot=s.few_shot)
    (rec,) = yield [req]
    return Reasoning(answer=text_of(rec), depth=0, trace={"reasoner": "answer"})
