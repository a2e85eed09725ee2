"""Params of stage generate: ``generate`` (the LLM backend by name, the prompt) and ``reason`` (the reasoner by
name)."""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field, model_validator

from kgrag.config.base import ModuleSection, check_module
from kgrag.registry import BACKENDS, REASONERS, TEXTUALIZERS


class GenerateParams(ModuleSection, registry=BACKENDS, selector="backend", section="generate"):
    """Generation: ``backend`` picks the LLM backend; its sub-section holds its params."""

    model_config = ConfigDict(json_schema_extra={"yaml": (
        "stage generate (Prefect flow, cached shards + LLM call cache)"
    )})

    backend: str = Field("llamacpp", description="llamacpp | openai | vllm | gretriever (a trained G-Retriever "
                         "checkpoint: section gretriever: {checkpoint: data/gretriever/explagraphs-g_retriever}; "
                         "docs/gretriever.md)")
    context: str = Field(
        "triples", description="textualizer of the prompt's context (`kgrag modules`: triples text, grouped (one "
        "line per head and relation), G-Retriever's CSV, none)"
    )
    max_context_triples: int = Field(60, ge=0, description="triples kept in the prompt (highest-scored first)")
    few_shot: bool = Field(True, description="show one worked example before the question (teaches the answer format; "
                                             "placeholders only)")
    model: Literal["base", "tuned"] = Field(
        "base", description="the llamacpp backend's model: base = generate.llamacpp.model_path (null: the packaged "
        "SmolLM2); tuned = the tune_answer_scorer stage's LoRA-tuned GGUF (data/tune/model.gguf), prompted without "
        "the worked example it was tuned without")
    temperature: float = Field(0.0, ge=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    max_tokens: int = Field(48, ge=1)
    seed: int = Field(0, description="sampling seed passed to the backend")
    retries: int = Field(2, ge=0, description="retries after a failed call, then it is recorded as failed")
    backoff_s: float = Field(0.5, ge=0.0, description="first retry delay; doubles each retry")
    timeout_s: float = Field(120.0, gt=0.0, description="per-call timeout")
    shard_size: int = Field(25, ge=1, description="questions per cached Prefect task")

    @model_validator(mode="after")
    def _known_textualizer(self) -> "GenerateParams":
        check_module(TEXTUALIZERS, "context", self.context)
        return self


class ReasonParams(ModuleSection, registry=REASONERS, selector="method", section="reason"):
    """Reasoning: ``method`` picks how answers are produced (``rank`` = the context's entities scored, the default;
    ``answer`` = one generated reply over the retrieved context, which every backend can serve, also one that
    returns no log-probs; io / cot / cot-sc baselines; graph reasoners); its sub-section holds its params."""

    model_config = ConfigDict(json_schema_extra={"yaml": (
        "stage generate: how the answer is produced (`kgrag modules` lists reasoners)"
    )})

    method: str = Field("rank", description="rank (the context's entities scored as the answer, no generation; "
                        "scores best with small models) | answer (one generated reply over the retrieved context) | "
                        "io | cot | cot-sc (no-KG baselines) | tog | fasttog | agent | explore (graph reasoners)")
    max_batch: int = Field(0, ge=0, description="prompts per backend batch; 0 = every active question of a shard at "
                                                "each step")
    constrain_answer: bool = Field(
        False, description="constrained decoding of the answer: entity names of the retrieved context only "
        "(one or a ' | ' list; the `answer` reasoner honours it, others see it in ReasonInput.constrain_answer)",
    )
