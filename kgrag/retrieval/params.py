"""Params of the retrieval stages: ``retrieve`` (the retriever by name and the neighbourhood shared by all) and
``finetune`` (the fine-tuned scorer, ``kgrag.retrieval.finetune``)."""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field

from kgrag.config.base import ModuleSection, Strict
from kgrag.registry import RETRIEVERS


class FinetuneParams(Strict):
    """Fine-tuned sentence-transformer for the LEGO ``st`` scorer (presets lego-05, lego-12, lego-18)."""

    model_config = ConfigDict(json_schema_extra={"yaml": (
        "stage finetune_path_scorer: the LEGO \"Fine-tuned ST\" (presets lego-05, lego-12, lego-18)"
    )})

    base_model: str = Field("all-MiniLM-L6-v2", description="model fine-tuned (packaged name or local folder)")
    split: Literal["dev", "test"] = Field("dev", description="question split the training pairs come from (never the "
                                                             "evaluated one)")
    questions: int = Field(500, ge=1, description="questions sampled from that split; the first val_fraction of them "
                                                  "are held out")
    per_question: int = Field(2, ge=1, description="(question, relevant, irrelevant) triplets per question, for paths "
                                                   "and for edges")
    val_fraction: float = Field(0.1, ge=0.0, lt=1.0, description="questions held out for the pair accuracy")
    max_neighbourhood_edges: int = Field(5_000, ge=1, description="neighbourhood cap while mining paths")
    margin: float = Field(0.2, gt=0.0, description="γ of the margin loss max(0, γ − S(pos, q) + S(neg, q))")
    epochs: int = Field(1, ge=0, description="passes over the training triplets (0 = save the base model)")
    batch_size: int = Field(32, ge=1)
    lr: float = Field(2e-5, gt=0.0, description="AdamW learning rate (linear warm-up, then decay)")
    warmup: float = Field(0.1, ge=0.0, le=1.0, description="share of steps with linear warm-up")
    seed: int = Field(0, description="seed of the question sample, negatives, shuffling and dropout")



class RetrieveParams(ModuleSection, registry=RETRIEVERS, selector="method", section="retrieve"):
    """Retrieval: ``method`` picks the module; its own sub-section holds its params."""

    model_config = ConfigDict(json_schema_extra={"yaml": "stage retrieve (Prefect flow, cached shards)"})

    method: str = Field("relpath", description="relpath (beam over relation sequences, ranked by the learnt plan) | "
                        "pcst (G-Retriever) | lego (LEGO-GraphRAG) | khop (whole k-hop / question graph) | none; "
                        "docs/retrieval.md")
    hops: int = Field(2, ge=0, le=4, description="k of the topic entities' k-hop neighbourhood (edges undirected) of "
                      "pcst, lego and khop; relpath (its own max_hops) hands it to its fallback retriever only, and "
                      "with fallback: null it leaves relpath's cache key (kgrag.retrieval.run.key_hash)")
    max_neighbourhood_edges: int = Field(
        5_000, ge=1,
        description="cap on neighbourhood edges: closer hops first, the farthest hop cut by relation relevance; "
        "read by relpath as hops is (its fallback only); bounds retrieval time and context on hub-heavy 3-hop "
        "neighbourhoods",
    )
    shard_size: int = Field(50, ge=1, description="questions per cached Prefect task")
    oracle_hops: bool = Field(
        False, description="hand the retriever each question's declared hop count (MetaQA's k-hop files): an "
        "oracle a user's questions do not have; marked `oracle` in metrics.json setup and the reports. False = "
        "no stage reads a question's hop count at inference")
    store: Literal["auto", "memory", "duckdb"] = Field(
        "auto", description="KG access: memory (whole KG as CSR arrays, kgrag.kg.store.KGStore), duckdb (SQL per hop "
        "on the DuckDB file, names fetched lazily: kgrag.kg.store_duckdb.DuckKGStore, for KGs too big for memory) or "
        "auto (memory when the KG's estimated in-memory size fits memory_budget_gb, else duckdb; "
        "kgrag.kg.store.choose_store). memory on a KG over the budget stops before loading anything. The stores give "
        "the same neighbourhoods, the same outputs; docs/scale.md")
    memory_budget_gb: float | None = Field(
        None, gt=0, description="GiB the in-memory store may take (store: auto and memory; the estimate is "
        "kgrag.kg.store.memory_estimate of the KG's triple and entity counts). None = half the memory available "
        "when the store is chosen; the estimate: 128 B a triple + 480 B an entity")
