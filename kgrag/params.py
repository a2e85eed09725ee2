"""The whole ``params.yaml``: one typed section per top-level key, each declared by the package that uses it, and
the checks that read two sections (the held-out splits against the evaluated one). ``load`` reads, overrides and
validates the file; errors name the file, line and key, and list the valid choices (``kgrag.config``).

The framework (``Strict``, ``ModuleSection``, the validation depth) is ``kgrag.config``; the sections' models are
re-exported here, so that ``from kgrag.params import RetrieveParams`` works wherever the model lives (code below
this layer imports them from their packages).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from pydantic import ConfigDict, Field, ValidationError, field_validator, model_validator

from kgrag.config.base import DEPTHS, ModuleSection, ParamsError, Strict, inside, section_hash  # noqa: F401
from kgrag.config.load import parse_as, read, set_override  # noqa: F401
from kgrag.evaluation.params import EvaluateParams, JudgeBackendParams  # noqa: F401
from kgrag.index.params import IndexParams, RelPlanParams
from kgrag.kg.params import DataParams, SynthParams, ValidateParams
from kgrag.reasoning.params import GenerateParams, ReasonParams
from kgrag.reporting.params import ReportParams
from kgrag.retrieval.params import FinetuneParams, RetrieveParams
from kgrag.task_runners.params import ClusterParams
from kgrag.tune.params import TuneParams


def _by_name(ref: str) -> Any:
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)


def gretriever_model() -> Any:
    """G-Retriever's section model (``kgrag.gretriever.params.GRetrieverParams``), named, not imported: its package
    sits on top and nothing outside it imports it (the generate stage reaches its backend by name too, through the
    registry); it is imported when a ``gretriever`` section is validated, and its stages import it themselves."""
    return _by_name("kgrag.gretriever.params:GRetrieverParams")


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
    gretriever: Any = Field(default_factory=lambda: gretriever_model()())  # a GRetrieverParams

    @field_validator("gretriever", mode="before")
    @classmethod
    def _gretriever(cls, value: Any) -> Any:
        model = gretriever_model()
        if isinstance(value, model):
            return value
        try:
            return model.model_validate(value or {})
        except ValidationError as e:  # "key.path: message", as a module's sub-section reports it
            first = e.errors()[0]
            raise ValueError(f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']}") from None

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @model_validator(mode="after")
    def _finetune_split_held_out(self) -> "Params":
        # both leak checks read the selected loader's split (data.<loader>.split, or data.split for keys at the top
        # of data), where its splits are disjoint parts; the stages' own guards (kgrag.kg.overlap) check ids and texts too
        lp = self.data.loader_params()
        if getattr(type(lp), "SPLITS_ARE_DISJOINT", False):
            key = self.data.key("split")
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



def parse(raw: dict[str, Any], *, source: str = "params.yaml", text: str = "", modules: str = "selected") -> Params:
    """Validate a raw params dict; errors name the source, line and key. ``modules``: ``selected`` validates the
    chosen modules' sub-sections (importing only them), ``all`` every sub-section (``kgrag.config.base``)."""
    return parse_as(Params, raw, source=source, text=text, modules=modules)


def load(path: str | Path = "params.yaml", overrides: list[str] | None = None, modules: str = "selected") -> Params:
    """Read, override and validate ``params.yaml`` (``modules``: how deep, see :func:`parse`)."""
    raw, text = read(path, overrides)
    return parse(raw, source=str(path), text=text, modules=modules)
