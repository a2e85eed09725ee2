"""The relplan stage on a KG over the memory budget (issue 55): read through the DuckDB store, not loaded, and the
same plan as in memory. Through the real ingest, validate, index and relplan stages on a tiny movie KG with
mirrored relations (``*_inverse``, as WorldCup2014's), its dev questions worded unlike the evaluated ones."""

from __future__ import annotations

import json

import pytest

from kgrag.index.relplan import mirror_pairs
from kgrag.kg.store import KGStore
from kgrag.kg.store_duckdb import DuckKGStore
from tests.conftest import MOVIES, ROOT

TINY = "1e-9"  # GiB: under any KG's estimate
MIRRORED = MOVIES + [(t, f"{r}_inverse", h) for h, r, t in MOVIES if r in ("directed_by", "starred_actors")]


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """(working folder, the stages' common args) after ingest, validate and index."""
    import os

    from stages import index, ingest, validate

    tmp = tmp_path_factory.mktemp("relplan_duckdb")
    my = tmp / "my"
    my.mkdir()
    (my / "kg.tsv").write_text("".join(f"{h}\t{r}\t{t}\n" for h, r, t in MIRRORED))

    def jsonl(rows, prefix):
        return "".join(json.dumps({"id": f"{prefix}{i}", "question": q, "topic_entities": [t], "answers": a}) + "\n"
                       for i, (q, t, a) in enumerate(rows))
    (my / "test.jsonl").write_text(jsonl([("who directed Collateral", "Collateral", ["Michael Mann"]),
                                          ("who starred in Heat", "Heat", ["Al Pacino", "Robert De Niro"])], "q"))
    (my / "dev.jsonl").write_text(jsonl([("which director made Heat", "Heat", ["Michael Mann"]),
                                         ("name the actors of Top Gun", "Top Gun", ["Tom Cruise"]),
                                         ("what films did Michael Mann direct", "Michael Mann", ["Heat", "Collateral"]),
                                         ("which year is Top Gun from", "Top Gun", ["1986"])], "d"))
    common = ["--params", str(ROOT / "params.yaml"), "-S", "data.dataset=triples", "-S", f"data.input={my}",
              "-S", f"data.triples.path={my / 'kg.tsv'}", "-S", f"data.triples.questions={my / 'test.jsonl'}",
              "-S", "data.sample=0", "-S", f"relplan.file={my / 'dev.jsonl'}"]
    cwd = os.getcwd()
    os.chdir(tmp)
    try:
        ingest.main(common)
        validate.main(common)
        index.main(common)
    finally:
        os.chdir(cwd)
    return tmp, common


def _relplan(project, monkeypatch, *extra) -> tuple[bytes, dict]:
    from kgrag.kg import store as store_mod
    from stages import relplan

    tmp, common = project
    monkeypatch.chdir(tmp)
    store_mod._chosen.cache_clear()
    getattr(store_mod._open_store, "cache_clear", lambda: None)()  # a test's spy has none
    relplan.main(common + list(extra))
    return (tmp / "data" / "relplan" / "plan.parquet").read_bytes(), json.loads(
        (tmp / "data" / "relplan" / "plan.json").read_text())


def test_the_mirrors_counted_by_sql_are_those_of_the_arrays(project):
    db = project[0] / "data" / "validated" / "kg.duckdb"
    want = mirror_pairs(KGStore(db))
    assert want == {"directed_by_inverse": "directed_by", "starred_actors_inverse": "starred_actors"}
    assert mirror_pairs(DuckKGStore(db, cache_dir=project[0] / "duckstore")) == want


def test_over_the_budget_the_zero_shot_plan_is_made_on_the_duckdb_store_and_is_the_same(project, monkeypatch):
    import kgrag.kg.store as store_mod

    # the shipped weights on both sides: over the budget no pseudo-questions are drawn (the next test)
    mem_plan, mem_meta = _relplan(project, monkeypatch, "-S", "relplan.source=kg", "-S", "relplan.pseudo=0")
    store_mod._open_store.cache_clear()
    opened = []
    real = store_mod._open_store.__wrapped__

    def spy(path, mode):
        opened.append(mode)
        return real(path, mode)
    monkeypatch.setattr(store_mod, "_open_store", spy)
    monkeypatch.setattr(KGStore, "__init__", lambda *a, **k: pytest.fail("KGStore loaded over the budget"))
    duck_plan, duck_meta = _relplan(project, monkeypatch, "-S", "relplan.source=kg", "-S", "relplan.pseudo=0",
                                    "-S", f"retrieve.memory_budget_gb={TINY}")
    assert "duckdb" in opened
    assert mem_meta["labelled"] == duck_meta["labelled"] > 0
    assert duck_meta["mirrored_relations"] == ["directed_by_inverse", "starred_actors_inverse"]
    assert duck_plan == mem_plan and duck_meta == mem_meta


def test_over_the_budget_labelled_stops_and_auto_learns_from_the_texts(project, monkeypatch):
    with pytest.raises(SystemExit, match="(?s)relplan.source: labelled reads the whole KG.*Or: relplan.source: kg"):
        _relplan(project, monkeypatch, "-S", "relplan.source=labelled", "-S", f"retrieve.memory_budget_gb={TINY}")
    _, meta = _relplan(project, monkeypatch, "-S", "relplan.source=auto", "-S", f"retrieve.memory_budget_gb={TINY}")
    assert meta["source"] == "kg" and "over the memory budget" in meta["note"]
    _, meta = _relplan(project, monkeypatch, "-S", "relplan.source=auto")
    assert meta["source"] == "labelled"


def test_source_kg_with_pseudo_writes_fitted_weights_the_retriever_reads(project, monkeypatch):
    """relplan.pseudo (issue 54): the stage fits the planner's weights on the KG's pseudo-questions and writes them to
    plan.json, where relpath reads them (PlanModel.weights); over the memory budget it draws none and says why; 0
    writes no weights (the shipped ones)."""
    from kgrag.index.relplan import PlanModel
    from kgrag.index.zeroshot import FEATURES, Weights

    _, meta = _relplan(project, monkeypatch, "-S", "relplan.source=kg", "-S", "relplan.pseudo=6")
    assert meta["pseudo_questions"] > 0 and set(meta["weights"]) == set(FEATURES)
    assert sum(meta["pseudo_by_hops"].values()) == meta["pseudo_questions"]
    plan = PlanModel.load(project[0] / "data" / "relplan")
    assert plan.weights == Weights(**meta["weights"]) and plan.weights != Weights()
    _, over = _relplan(project, monkeypatch, "-S", "relplan.source=kg", "-S", "relplan.pseudo=6",
                       "-S", f"retrieve.memory_budget_gb={TINY}")
    assert "weights" not in over and over["pseudo_questions"] == 0 and "memory budget" in over["pseudo_note"]
    _, off = _relplan(project, monkeypatch, "-S", "relplan.source=kg", "-S", "relplan.pseudo=0")
    assert "weights" not in off and "pseudo_questions" not in off
    assert PlanModel.load(project[0] / "data" / "relplan").weights is None
