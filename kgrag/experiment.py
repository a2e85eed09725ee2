"""One experiment, assembled once from params: the one place that turns a ``Params`` into the parts that run.

Every runner of an experiment builds an :class:`Experiment` and asks it for its parts, so they cannot differ:

- the stages' Prefect flows (``flows/retrieve.py``, ``flows/generate.py``), in each shard task;
- ``kgrag ask`` / ``kgrag serve`` (:class:`kgrag.apps.ask.Asker`);
- ``kgrag lego-table`` (one experiment per LEGO instance, :meth:`Experiment.with_retrieve`);
- the benches (``bench/*.py``);
- the stages that train on held-out questions bringing their own graphs (relplan, tune_answer_scorer), over a store
  of those graphs (:func:`own_graphs_experiment`).

The parts (each built on first use, and shared per process: stores, indexes and LLM clients are cached by
``kgrag.kg.store.open_store``, ``kgrag.index.embed.open_index`` and ``kgrag.llm.clients.client_for``):

- ``kg``: the KG store ``retrieve.store`` chooses (``memory``: ``KGStore``; ``duckdb``: ``DuckKGStore``; ``auto``:
  ``memory`` when the KG fits ``retrieve.memory_budget_gb``, else ``duckdb``: ``kgrag.kg.store.choose_store``),
  honoured by every stage that reads the KG through the experiment;
- ``index``: the embedding index (``index.model``), or None where none was built;
- ``client``: the LLM client of the ``generate`` section (backend, call cache, retries).

The two sides run on it: ``kgrag.retrieval.run.retrieve_with`` (the retriever ``retrieve.method`` names) and
``kgrag.reasoning.generate.answer_rows`` / ``reason_job`` (the reasoner ``reason.method`` names, with
``generate.sampling_of``). They live beside their code and not here, so that a stage's import closure (its DVC
code deps, ``kgrag.code.depgraph``) holds its own side only: editing a reasoner does not re-run retrieve.

Where the files are is :class:`Files` (absolute paths, since shard tasks may run in other processes). The stage
order is dvc.yaml's (:func:`stage_order`); nothing here re-states it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kgrag import io
from kgrag.params import Params, RetrieveParams


@dataclass(frozen=True)
class Files:
    """Where an experiment's inputs and caches are: the validated KG (DuckDB), the embedding index folder, the
    LLM call cache (None: no cache) and the flows' shard folder."""

    db: str
    index: str | None = None
    cache: str | None = None
    shards: str | None = None

    @classmethod
    def of(cls, root: str | Path = ".") -> "Files":
        """The default DAG's files under the working directory ``root`` (``kgrag.io``'s folders), absolute."""
        r = Path(root).resolve()
        return cls(db=str(r / io.VALIDATED / "kg.duckdb"), index=str(r / io.INDEX),
                   cache=str(r / io.CACHE / "llm_calls.sqlite"), shards=str(r / io.SHARDS))

    def has_index(self) -> bool:
        """An index was built (``kgrag.index.embed.has_index``)."""
        from kgrag.index.embed import has_index

        return has_index(self.index)


@dataclass(frozen=True)
class Experiment:
    """The parts of one experiment, built from ``params`` (a ``kgrag.params.Params``) and ``files``.

    Parameters
    ----------
    params
        The whole params file, validated.
    files
        Where the KG, index, call cache and shards are (default: :meth:`Files.of` the working directory).
    client_overrides
        Backend params replacing the ``generate`` section's (benches: ``{"n_threads": 1}``).
    """

    params: Params
    files: Files = field(default_factory=Files.of)
    client_overrides: dict[str, Any] | None = None

    # ---- building ---------------------------------------------------------------------------------------
    @classmethod
    def from_json(cls, params_json: str, files: Files) -> "Experiment":
        """The experiment of a shard task: params as JSON (what a flow hands its tasks), files by reference."""
        return cls(Params.model_validate_json(params_json), files)

    def with_retrieve(self, retrieve: RetrieveParams) -> "Experiment":
        """The same experiment with another ``retrieve`` section (``kgrag lego-table``: one per instance)."""
        return Experiment(self.params.model_copy(update={"retrieve": retrieve}), self.files, self.client_overrides)

    # ---- parts --------------------------------------------------------------------------------------------
    @functools.cached_property
    def kg(self):
        """The KG store ``retrieve.store`` chooses, opened once per process (``kgrag.kg.store.open_store``)."""
        from kgrag.kg.store import open_store

        rp = self.params.retrieve
        return open_store(str(self.files.db), rp.store, rp.memory_budget_gb)

    @functools.cached_property
    def index(self):
        """The embedding index (``index.model``), or None where ``files.index`` holds none."""
        from kgrag.index.embed import open_index

        return open_index(str(self.files.index), self.params.index.model, self.kg) if self.files.has_index() else None

    @functools.cached_property
    def client(self):
        """The LLM client of the ``generate`` section behind the call cache ``files.cache``."""
        from kgrag.llm.clients import client_for

        overrides = self.client_overrides
        if self.params.generate.model == "tuned":  # tune_answer_scorer's GGUF, same llamacpp backend
            tuned = Path(io.TUNE / "model.gguf").resolve()
            if self.params.generate.backend != "llamacpp" or not tuned.exists():
                raise FileNotFoundError(
                    f"generate.model: tuned needs generate.backend: llamacpp and {io.TUNE / 'model.gguf'}, written by "
                    "`dvc repro tune_answer_scorer` with tune.enabled: true (docs/inference.md \"The tuned scorer\")")
            overrides = {**(overrides or {}), "model_path": str(tuned)}
        return client_for(self.params.generate, cache=self.files.cache, overrides=overrides)


def own_graphs_experiment(exp: Experiment, tables: Any, folder: str | Path, *, log=lambda s: None,
                          with_index: bool = True) -> Experiment:
    """``exp`` over held-out questions' own graphs: questions that bring a graph each (a label task's train file,
    e.g. ExplaGraphs; a RoG-format ``relplan.file``, e.g. WebQSP's train split) are retrieved, labelled or trained
    on from a store of ``tables`` (``kgrag.types.KGTables``: entities, relations, triples) with an index of its
    names (``with_index``; without it the experiment has no index), since those graphs are not in the evaluated
    KG. Both are written under ``folder`` / the tables' content hash and kept (a rerun or a resumed training reads
    them). Same params; no call cache is read."""
    import hashlib

    import pyarrow as pa

    from kgrag.index.build import build_index
    from kgrag.kg.duckdb_io import write_duckdb

    parts = {"entities": tables.entities, "relations": tables.relations, "triples": tables.triples}
    h = hashlib.sha256()
    for name, t in parts.items():
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, t.schema) as w:
            w.write_table(t)
        h.update(name.encode() + sink.getvalue().to_pybytes())
    where = Path(folder) / f"split-{h.hexdigest()[:16]}"
    db, index = where / "kg.duckdb", where / "index"
    if not db.exists():
        write_duckdb(db, parts)
    if not with_index:
        return Experiment(exp.params, Files(db=str(db), index=None))
    split = Experiment(exp.params, Files(db=str(db), index=str(index)))
    if not (index / "meta.json").exists():  # before split.index is first read
        p = exp.params.index
        build_index(split.kg, index, model=p.model, batch_size=p.batch_size, embed_triples=p.embed_triples,
                    entities=p.entities, log=log)
    return split


def stage_order(dvc_yaml: str | Path = "dvc.yaml") -> list[str]:
    """The stages of the default DAG in dvc.yaml's order (the one place that order is written)."""
    import yaml

    path = Path(dvc_yaml)
    if not path.exists():
        return []
    return list((yaml.safe_load(path.read_text()) or {}).get("stages", {}))
