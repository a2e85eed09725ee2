"""Training rows of the tuned scorer: what ``rank`` would score for a labelled question, and which is gold.

For each labelled question the experiment's own retriever runs (with ``paths`` relation sequences, so that the
candidates hold distractors: the ends of a second-best sequence), the context is textualized as generate does,
and ``rank``'s candidate rule picks the candidates; a row is the chat prompt's tokens (the prompt ``rank`` sends,
without a worked example: a tuned model needs none), each candidate's tokens, and which candidates are gold
answers. Tokens come from the GGUF's own tokenizer and chat template (``llamacpp_engine.chat_tokens``), so the
tuned scores are those llama.cpp computes.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Sequence

from kgrag.types import Question


def build_rows(*, exp: Any, questions: Sequence[Question], tokenizer: Any, paths: int, max_candidates: int,
               batch: int = 50, log=lambda s: None) -> list[dict]:
    """Rows of ``questions`` (their answers known) through ``exp`` (``kgrag.experiment.Experiment``) with
    ``retrieve.relpath.paths`` = ``paths``: {question_id, prompt: [token], candidates: [[token]], names, gold:
    [bool]}, candidates in ``rank``'s order, at most ``max_candidates`` (0: all)."""
    from kgrag.evaluation.evaluate import normalize
    from kgrag.llm.backends.llamacpp_engine import chat_tokens, continuation_tokens
    from kgrag.llm.constrain import answer_candidates
    from kgrag.llm.prompts import build_request
    from kgrag.reasoning.generate import contexts_for, proposals_for
    from kgrag.retrieval.run import retrieve_rows

    rp = exp.params.retrieve
    if rp.method == "relpath":
        rp = rp.model_copy(update={"relpath": {**rp.module_params().model_dump(), "paths": paths}})
    rank = exp.params.reason.module_params("rank")
    rows = []
    for start in range(0, len(questions), batch):
        part = [replace(q, hops=None) for q in questions[start:start + batch]]
        ret = retrieve_rows(questions=part, kg=exp.kg, index=exp.index, params=rp)
        ctx = contexts_for(ret, kg=exp.kg, params=exp.params.generate)
        prop = proposals_for(ret, kg=exp.kg)
        for q, c, p in zip(part, ctx, prop):
            names = answer_candidates(question=q, context=c, proposed=p, kg=exp.kg, candidates=rank.candidates,
                                      distance=rank.distance)
            if max_candidates:
                names = names[:max_candidates]
            gold = {normalize(a) for a in q.answers}
            req = build_request(question=q.text, context=c, temperature=0.0, top_p=1.0, max_tokens=8, seed=0,
                                few_shot=False, choices=q.choices, separator=exp.params.evaluate.answer_separator)
            rows.append({"question_id": q.question_id, "names": list(names),
                         "prompt": chat_tokens(tokenizer, [{"role": r, "content": m} for r, m in req.messages]),
                         "candidates": [continuation_tokens(tokenizer, n) for n in names],
                         "gold": [normalize(n) in gold for n in names]})
        log(f"{min(start + batch, len(questions))} of {len(questions)} training questions retrieved")
    return rows
