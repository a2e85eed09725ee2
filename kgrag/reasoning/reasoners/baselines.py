"""Baselines without the KG: ``io`` (direct answer), ``cot`` (chain of thought), ``cot-sc`` (self-consistency).

They ignore the retrieved context on purpose: they are the no-KG rows of ToG's and FastToG's tables, and
the fallbacks of the graph reasoners.
"""

from __future__ import annotations

from pydantic import Field

from kgrag.config.base import Strict
from kgrag.llm.prompts import DEMO, DEMO_QUESTION, LABEL_SYSTEM, SYSTEM, choices_line, clean_question, separated
from kgrag.llm.calls import LLMRequest
from kgrag.reasoning.reasoners.core import REASONERS, ReasonGen, ReasonInput, Reasoning, Sampling, text_of
from kgrag.reasoning.reasoners.parsing import final_answer, majority
from kgrag.registry import NoParams

COT_SYSTEM = (
    "Answer the question. Think step by step, then give the final line as 'Answer: name | name'."
)
COT_DEMO = (  # the format only: placeholders no KG holds (kgrag.llm.prompts.DEMO_NAMES), no domain
    f"Question: {DEMO_QUESTION}",
    "Entity Two and Entity Three have relation_1 Entity One. The relation_2 of Entity Two is Entity Four; that "
    "of Entity Three is Entity Five.\nAnswer: Entity Four | Entity Five",
)


COT_LABEL_SYSTEM = "Answer the question. Think step by step, then give the final line as 'Answer: <one of the choices>'."


def io_request(question: str, s: Sampling, seed: int | None = None, temperature: float | None = None,
               choices: tuple[str, ...] = ()) -> LLMRequest:
    """ToG's IO prompt: the question alone, answer names only (one-shot format example if few_shot); a label
    question (``choices``) lists its choices and asks for one (no name-list example)."""
    demo = ((("user", DEMO[0].split("\n\n")[-1]), ("assistant", separated(DEMO[1], s.separator)))
            if s.few_shot and not choices else ())
    user = f"Question: {clean_question(question)}{choices_line(choices)}\nAnswer:"
    return LLMRequest(messages=(("system", LABEL_SYSTEM if choices else separated(SYSTEM, s.separator)), *demo,
                                ("user", user)),
                      temperature=s.temperature if temperature is None else temperature, top_p=s.top_p,
                      max_tokens=s.max_tokens, seed=s.seed if seed is None else seed)


def cot_request(question: str, s: Sampling, *, facts: str = "", seed: int | None = None,
                temperature: float | None = None, max_tokens: int | None = None,
                choices: tuple[str, ...] = ()) -> LLMRequest:
    """Chain-of-thought prompt: reasoning, then ``Answer: ...`` (optionally over given facts); a label
    question (``choices``) lists its choices and asks for one (no name-list example)."""
    demo = (("user", COT_DEMO[0]), ("assistant", separated(COT_DEMO[1], s.separator))) if s.few_shot and not choices else ()
    user = f"Question: {clean_question(question)}{choices_line(choices)}"
    if facts:
        user = f"Facts:\n{facts}\n\n{user}"
    system = COT_LABEL_SYSTEM if choices else separated(COT_SYSTEM, s.separator)
    return LLMRequest(messages=(("system", system), *demo, ("user", user)),
                      temperature=s.temperature if temperature is None else temperature, top_p=s.top_p,
                      max_tokens=max(s.max_tokens, 160) if max_tokens is None else max_tokens,
                      seed=s.seed if seed is None else seed)


def cot_answer(text: str) -> tuple[str, bool]:
    """(answer, parsed): the ``Answer:`` line, else the reply's last non-empty line (documented fallback)."""
    got = final_answer(text)
    if got is not None:
        return got, True
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    return (lines[-1] if lines else ""), False


@REASONERS.register("io", params=NoParams, version="3")
def io_baseline(*, inp: ReasonInput, params: NoParams) -> ReasonGen:
    """The question alone; the LLM's own knowledge answers.

    References
    ----------
    Sun et al., Think-on-Graph (2024), IO prompt baseline; Liang et al., FastToG (2024), Table 1.
    """
    (rec,) = yield [io_request(inp.question.text, inp.sampling, choices=inp.question.choices)]
    return Reasoning(answer=text_of(rec), trace={"reasoner": "io"})


@REASONERS.register("cot", params=NoParams, version="3")
def cot(*, inp: ReasonInput, params: NoParams) -> ReasonGen:
    """Chain of thought without the KG; the final ``Answer:`` line is the answer.

    References
    ----------
    Wei et al., Chain-of-Thought Prompting (2022); Sun et al., Think-on-Graph (2024), CoT baseline.
    """
    (rec,) = yield [cot_request(inp.question.text, inp.sampling, choices=inp.question.choices)]
    ans, ok = cot_answer(text_of(rec))
    return Reasoning(answer=ans, trace={"reasoner": "cot", "thought": text_of(rec)}, unparseable=int(not ok and bool(
        text_of(rec))))


class CoTSCParams(Strict):
    """Params of ``cot-sc``."""

    samples: int = Field(5, ge=1, description="chains sampled (seeds seed, seed+1, ...); their majority vote answers")
    temperature: float = Field(0.7, ge=0.0, description="sampling temperature of the chains")


@REASONERS.register("cot-sc", params=CoTSCParams, version="3")
def cot_sc(*, inp: ReasonInput, params: CoTSCParams) -> ReasonGen:
    """``samples`` chains of thought at ``temperature`` in one batch; the majority answer wins.

    References
    ----------
    Wang et al., Self-Consistency Improves Chain of Thought Reasoning (2023); ToG's CoT-SC baseline.
    """
    s = inp.sampling
    recs = yield [cot_request(inp.question.text, s, seed=s.seed + i, temperature=params.temperature,
                              choices=inp.question.choices)
                  for i in range(params.samples)]
    parsed = [cot_answer(text_of(r)) for r in recs]
    answers = [a for a, _ in parsed]
    return Reasoning(answer=majority(answers), trace={"reasoner": "cot-sc", "answers": answers},
                     unparseable=sum(1 for (a, ok), r in zip(parsed, recs) if not ok and text_of(r)))
