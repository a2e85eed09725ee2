"""Params of the KG stages: ``data`` (stage ingest: which loader, its params, the question sample), ``validate``
(the data-quality gate) and ``synth`` (the synthetic KG of synth/dvc.yaml)."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, model_validator

from kgrag.config.base import Strict, check_module, inside, validating_all
from kgrag.config.yaml_doc import ABOVE_MODULES
from kgrag.registry import LOADERS


class DataParams(BaseModel):
    """Which KG dump and question set to ingest: ``dataset`` picks the loader.

    ``sample`` and ``seed`` apply to every loader. A loader's params sit in a sub-section named after it
    (``data.triples: {path: kg.tsv, delimiter: "|"}``) and are validated by its params model (``extra="forbid"``);
    sub-sections of unselected loaders are checked too (unknown keys, types; required keys may be left out).
    The default loader's (``dataset``'s default) params may sit at the top of ``data`` instead, the keys its
    params class lists in ``DATA_KEYS`` (kept there as before, so that ``-S data.hops=3`` works); this class
    names no loader.

    ``input`` is the one file or folder the ingest stage's DVC dependency names (``${data.input}`` in
    dvc.yaml), whatever the loader: it must hold every input the selected loader reads (its ``path`` and
    ``questions`` params), which is checked, so that ``dvc status`` notices an edited input file.
    """

    model_config = ConfigDict(extra="allow", frozen=True, json_schema_extra={
        "yaml": "stage ingest (loader = dataset)",
        # params.yaml's note above the loaders' sections (kgrag.config.yaml_doc.model_notes)
        "yaml_notes": {ABOVE_MODULES: (
            "Every other loader's section, so that `-S` reaches it like any key (its `path` null until you set one):",
            "  dvc exp run -S data.dataset=jsonl -S data.jsonl.path=my/q.jsonl -S data.input=my",
            "(docs/ingest.md lists every key and its default; a key left null takes the loader's default)")}})
    dataset: str = Field("metaqa", description="loader name (`kgrag modules`): metaqa | triples | ntriples | jsonl | "
                         "gretriever | explagraphs | irn | rog; a loader's params go in a section named after it, e.g. "
                         "`triples: {path: kg.tsv, delimiter: \"|\", questions: q.jsonl}` (docs/ingest.md), the "
                         "default loader's at the top of data; sample and seed apply to every loader")
    sample: int = Field(200, ge=0, description="questions sampled; 0 = all")
    seed: int = Field(0, description="seed of the question sample")
    link_entities: bool = Field(
        False, description="remove the questions' [brackets] and link their topic entities from the text "
        "(kgrag.kg.linking, as `kgrag ask` does): linking measured, not assumed")
    max_question_chars: int = Field(
        2000, ge=1, description="a longer question is quarantined at ingest, the limit named in its reason (it could "
                                "not fit a prompt)")
    input: str | None = Field(
        None, description="file or folder holding every input of the selected loader: the ingest stage's DVC "
                          "dependency (checked; None = not checked, for params built in code); e.g. for ExplaGraphs -S "
                          "data.dataset=explagraphs -S data.input=../shared/data/explagraphs -S retrieve.method=khop "
                          "(the whole per-question graph, as G-Retriever: k = 0)")

    # loader params that name input files
    _INPUT_FIELDS: ClassVar[tuple[str, ...]] = ("path", "kb", "questions", "names", "relation_labels")
    _loader_params: BaseModel | None = PrivateAttr(None)

    @classmethod
    def top_loader(cls) -> tuple[str, tuple[str, ...]]:
        """The loader whose params may sit at the top of ``data`` (``dataset``'s default) and those keys (its params
        class's ``DATA_KEYS``; none: every loader has a sub-section)."""
        name = str(cls.model_fields["dataset"].default)
        return name, tuple(getattr(LOADERS.get(name).params, "DATA_KEYS", ()))

    @classmethod
    def doc_modules(cls, key: str, impl: bool = False) -> Any:
        """For params.yaml's comments (``kgrag.config.yaml_doc``): a key at the top of ``data`` as (its loader's
        params class, the field), a loader's sub-section as (its params class, None), else None; ``impl``: the
        loader itself."""
        if impl:
            return LOADERS.get(key).impl
        top, keys = cls.top_loader()
        if key in keys:
            return LOADERS.get(top).params, key
        return (LOADERS.get(key).params, None) if key in LOADERS else None

    def _at_top(self, name: str) -> bool:
        top, keys = self.top_loader()
        return name == top and bool(keys)

    def key(self, field: str, name: str | None = None) -> str:
        """The params key of loader ``name``'s (default: the selected one's) ``field``: ``data.<loader>.<field>``,
        or ``data.<field>`` for the keys at the top of ``data``."""
        name = name or self.dataset
        return f"data.{field}" if self._at_top(name) else f"data.{name}.{field}"

    @model_validator(mode="after")
    def _check_loaders(self) -> "DataParams":
        check_module(LOADERS, "dataset", self.dataset)
        top, top_keys = self.top_loader()
        extra = self.model_extra or {}
        for key, value in list(extra.items()):
            if key in top_keys:
                continue
            if key not in LOADERS:
                raise ValueError(
                    f"unknown key {key!r}: neither a field ({', '.join((*self.__class__.model_fields, *top_keys))}) "
                    f"nor a loader module ({', '.join(LOADERS.names())})"
                )
            if key == top and top_keys:
                label = LOADERS.get(top).params.__name__.removesuffix("Params")
                raise ValueError(f"{key}: {label}'s params are {', '.join(f'data.{k}' for k in top_keys)} (no "
                                 f"data.{key} section)")
            if value is not None and not isinstance(value, dict):
                raise ValueError(f"{key}: a loader's section must be a mapping, got {type(value).__name__}")
            if key == self.dataset or not validating_all():  # an unselected loader's section: `kgrag check`
                continue
            self._check_unselected(key, value or {}, prefix=(key,))
        if self.dataset != top and top_keys:  # the top keys of an unselected loader: types, as always
            self._check_unselected(top, {k: extra[k] for k in top_keys if k in extra}, prefix=())
        self._loader_params = self._build_loader_params()
        if self.input is not None:
            self._check_input()
        return self

    @staticmethod
    def _check_unselected(name: str, section: dict[str, Any], prefix: tuple[str, ...]) -> None:
        try:  # a null (params.yaml lists every loader's keys, `path: null` until the user sets one) = left out
            LOADERS.get(name).params.model_validate({k: v for k, v in section.items() if v is not None})
        except ValidationError as e:  # required keys may be left out of an unselected loader's section
            errs = [x for x in e.errors() if x["type"] != "missing"]
            if errs:
                loc = ".".join(str(p) for p in (*prefix, *errs[0]["loc"]))
                raise ValueError(f"{loc}: {errs[0]['msg']}") from None

    def input_paths(self) -> dict[str, str]:
        """The selected loader's input files / folders by params key (``data.path``, ``data.triples.questions``)."""
        lp = self.loader_params()
        return {self.key(f): str(getattr(lp, f)) for f in self._INPUT_FIELDS if getattr(lp, f, None) is not None}

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
        extra = self.model_extra or {}
        if self._at_top(name):
            section, prefix = {k: extra[k] for k in self.top_loader()[1] if k in extra}, ()
        else:
            section, prefix = {k: v for k, v in (extra.get(name) or {}).items() if v is not None}, (name,)
        try:
            return LOADERS.get(name).params.model_validate(section)
        except ValidationError as e:
            first = e.errors()[0]
            loc = ".".join(str(p) for p in (*prefix, *first["loc"]))
            if first["type"] == "missing":
                raise ValueError(f"{loc}: required when data.dataset is {name}; set it, e.g. "
                                 f"`dvc exp run -S data.{loc}=FILE -S data.input=FILE` (docs/ingest.md)") from None
            raise ValueError(f"{loc}: {first['msg']}") from None

    def loader_params(self) -> BaseModel:
        """The selected loader's validated params (its sub-section, or the keys at the top of ``data``)."""
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

    model_config = ConfigDict(json_schema_extra={"yaml": "stage validate (great-expectations): the data-quality "
                                                         "gate"})

    max_bad_fraction: float = Field(0.01, ge=0.0, le=1.0, description="fail when a table's bad share passes this")



class SynthParams(Strict):
    """Stage ``synth``: a SYNTHETIC KG (typed entities and relations, power-law degrees) and questions whose
    answers are known by construction (``kgrag.kg.synth``). Not an input of the default DAG: point ``data`` at its
    files (docs/scale.md "Synthetic KG at scale")."""

    model_config = ConfigDict(json_schema_extra={"yaml": (
        "stage synth: a SYNTHETIC KG (names synth_*) + questions answered by construction; its own pipeline, "
        "synth/dvc.yaml, outside the default DAG (docs/scale.md)"
    )})

    n_triples: int = Field(100_000, ge=1, description="distinct triples generated (bench/scale.py makes 1M and 10M)")
    entities_per_triple: float = Field(0.25, gt=0.0, le=2.0, description="entities generated per triple (those never "
                                                                         "drawn are left out)")
    n_relations: int = Field(24, ge=1, description="relations; relation r joins head type A_r to tail type B_r (drawn "
                                                   "once per relation)")
    n_types: int = Field(8, ge=1, description="entity types (person, film, city, ...)")
    skew: float = Field(1.0, ge=0.0, description="Zipf exponent of entity popularity within a type: power-law degrees "
                                                 "(0 = uniform)")
    relation_skew: float = Field(1.0, ge=0.0, description="Zipf exponent of relation frequencies")
    questions: int = Field(200, ge=1, description="questions, split evenly over hops")
    hops: list[Literal[1, 2, 3]] = Field([1, 2], min_length=1, description="hop counts of the questions (chains of "
                                          "1-3 typed relations)")
    max_answers: int = Field(20, ge=1, description="a drawn question with more answers than this is redrawn")
    graph_extra: int = Field(10, ge=0, description="questions_graphs.jsonl: edges leaving the topic added to "
                             "each question's own graph besides its answer chain")
    bad_lines: int = Field(0, ge=0, description="malformed lines mixed into the triples file (quarantine tests)")
    seed: int = Field(0, description="seed of every random draw (same params + seed = same files)")
    out: str = Field("data/synth", description="output folder (the stage's DVC out): triples.tsv, questions.jsonl, "
                                               "manifest.json")
