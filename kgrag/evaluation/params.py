"""Params of stage evaluate: ``evaluate`` and its LLM judge's backend."""

from __future__ import annotations

from pydantic import ConfigDict, Field

from kgrag.config.base import ModuleSection, Strict
from kgrag.registry import BACKENDS


class JudgeBackendParams(ModuleSection, registry=BACKENDS, selector="backend", section="evaluate.judge_backend"):
    """The LLM judge's backend: ``backend`` picks it (default the embedded llamacpp); its sub-section holds
    its params, as under ``generate``."""

    model_config = ConfigDict(json_schema_extra={"yaml": "the judge's LLM backend (same sections as generate's)"})

    backend: str = Field("llamacpp", description="the judge's LLM backend (as generate.backend)")
    max_tokens: int = Field(8, ge=1, description="tokens of the judge's reply (it should say Yes or No)")
    seed: int = Field(0, description="sampling seed (greedy decoding)")
    retries: int = Field(2, ge=0, description="retries after a failed judge call")
    timeout_s: float = Field(120.0, gt=0.0, description="per-call timeout")


class EvaluateParams(Strict):
    """Evaluation."""

    model_config = ConfigDict(json_schema_extra={"yaml": "stage evaluate: metrics.json"})

    answer_separator: str = Field("|", description="separator the prompt asks the LLM to put between answers")
    judge: bool = Field(False, description="LLM-judge metric: the judge says yes / no to each prediction given "
                                           "the question and the gold answers (calls through the LLM call cache)")
    judge_backend: JudgeBackendParams = Field(default_factory=JudgeBackendParams)
