"""Params of stage ``tune_answer_scorer``: LoRA on the embedded LLM as ``rank``'s answer scorer."""

from __future__ import annotations

from pydantic import ConfigDict, Field

from kgrag.config.base import Strict


class TuneParams(Strict):
    """LoRA tuning of the embedded LLM as ``rank``'s answer scorer (stage ``tune_answer_scorer``, ``kgrag/tune/``)."""

    model_config = ConfigDict(json_schema_extra={"yaml": (
        "stage tune_answer_scorer: LoRA on the embedded LLM as rank's answer scorer (kgrag/tune/; docs/inference.md)"
    )})

    enabled: bool = Field(False, description="train (true) or write the 'not trained' record only (false: "
                          "generate.model: tuned then refuses to run); true trains on relplan's held-out labelled "
                          "questions (leak-guarded) and writes data/tune/model.gguf, served with generate.model: tuned")
    questions: int = Field(600, ge=1, description="labelled held-out questions trained on (relplan's: relplan.file "
                           "or the loader's held-out part, leak-guarded), a seeded sample")
    paths: int = Field(2, ge=1, description="relation sequences retrieved per training question: the second one's "
                       "ends are the distractors the scorer learns to reject")
    max_candidates: int = Field(8, ge=2, description="candidates kept per training question (rank's order)")
    negatives: int = Field(3, ge=1, description="wrong candidates scored beside the gold one per training step")
    layers: int = Field(12, ge=1, description="top layers with adapters")
    targets: list[str] = Field(["v_proj", "o_proj", "up_proj", "down_proj"], description="adapted projections "
                               "(those the GGUF stores unpermuted: v_proj, o_proj, up_proj, down_proj, gate_proj), "
                               "merged into the GGUF as additions")
    r: int = Field(8, ge=1, description="LoRA rank")
    alpha: float = Field(16.0, gt=0, description="LoRA scale numerator (update x alpha / r)")
    lr: float = Field(3e-4, gt=0, description="AdamW learning rate")
    epochs: int = Field(2, ge=1)
    max_prompt: int = Field(768, ge=64, description="prompt tokens kept (the last ones) when training")
    threads: int = Field(2, ge=1, description="torch threads (fixed, so that the same inputs give the same weights)")
    checkpoint_every: int = Field(50, ge=1, description="rows between checkpoints (.kgrag_cache/tune/): an interrupted "
                                                        "run resumes")
    split: str | None = Field(None, description="the loader's split it trains on instead of relplan's held-out "
                              "questions (e.g. ExplaGraphs' train: -S tune.split=train); never the evaluated one")
    seed: int = Field(0)
