"""The LEGO instance table, and the LLM-based LEGO stages through the real embedded LLM (SmolLM2 via llama.cpp)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from kgrag import schema as S
from kgrag.llm.backends.llamacpp import LlamaCppBackend, LlamaCppParams
from kgrag.retrieval.lego import REFINERS, SCORERS
from kgrag.retrieval.lego.presets import PRESETS
from kgrag.apps.lego_table import instance_row, modules_of, render, row_key, uses_llm
from kgrag.retrieval.lego.types import Context
from kgrag.llm.calls import LLMClient
from kgrag.params import RetrieveParams
from kgrag.retrieval.run import retrieve_rows
from kgrag.types import Question

MODEL = "all-MiniLM-L6-v2"
QUESTION = "who directed the movies starred by [Al Pacino]"


def test_preset_descriptions():
    assert modules_of("lego-00") == {"extract": "ppr", "prune": "-", "filter": "shortest", "refine": "random"}
    assert modules_of("lego-05")["prune"] == "st-ft"
    assert modules_of("lego-12")["filter"] == "beam(st-ft)"
    assert modules_of("lego-17")["refine"] == "scored(reranker)"
    assert [p for p in PRESETS if uses_llm(p)] == ["lego-06", "lego-07", "lego-13", "lego-14", "lego-19", "lego-20"]


def test_instance_rows_and_render_on_the_tiny_kg(kg, index):
    qs = [Question("q1", QUESTION, kg.ids_of(["Al Pacino"]), kg.ids_of(["Michael Mann", "Martin Scorsese"])),
          Question("q2", "what films did [Tom Cruise] act in", kg.ids_of(["Tom Cruise"]),
                   kg.ids_of(["Top Gun", "Collateral"]))]
    qrows = [{S.QUESTION_ID: q.question_id, S.ANSWER_IDS: list(q.answer_ids)} for q in qs]
    rows = []
    for preset in ("lego-00", "lego-15"):
        params = RetrieveParams(method="lego", lego={"preset": preset})
        rows.append(instance_row(preset=preset, questions=qs, question_rows=qrows, params=params,
                                 retrieve=lambda questions, params: retrieve_rows(
                                     questions=questions, kg=kg, index=index, params=params)))
    for r in rows:
        assert r["questions"] == 2 and r["recall"] == pytest.approx(1.0) and r["hit"] == 1.0
        assert [s["stage"] for s in r["stages"]] == ["neighbourhood", "extract", "filter", "refine"]
        assert all(s["ms_median"] is not None and 0 <= s["precision"] <= 1 for s in r["stages"])
    md = render(rows, title="t")
    assert md.count("| lego-00 |") == 4 and md.count("| lego-15 |") == 4  # 1 instance line + 3 module lines
    assert "scored(bm25)" in md
    k = dict(preset="lego-00", params_json="{}", question_ids=["q1"], code="c")
    assert row_key(**k) == row_key(**k) != row_key(**{**k, "question_ids": ["q2"]})


# ------------------------------------------------------------ LLM stages with the real SmolLM2

class Counting:
    """The real backend, counting the prompts it answers."""

    def __init__(self, backend):
        self.backend, self.calls, self.replies = backend, 0, []
        self.model_id = backend.model_id

    def generate(self, requests):
        self.calls += len(requests)
        out = self.backend.generate(requests)
        self.replies.extend(r.text for r in out)
        return out


@pytest.fixture(scope="module")
def real_llm():
    return LLMClient(Counting(LlamaCppBackend(LlamaCppParams(n_ctx=2048))), cache=None)


def test_llm_scorer_with_the_real_llm(kg, index, real_llm):
    ctx = Context(question=QUESTION, query_vec=index.encode([QUESTION])[0], kg=kg, index=index,
                  topic_names=("Al Pacino",), llm=lambda: real_llm)
    entry = SCORERS.get("llm")
    docs = ["Heat directed by Michael Mann", "Top Gun release year 1986", "Heat starred actors Al Pacino"]
    before = real_llm.backend.calls
    a = entry.impl(query=QUESTION, docs=docs, params=entry.params(max_tokens=60), ctx=ctx)
    b = entry.impl(query=QUESTION, docs=docs, params=entry.params(max_tokens=60), ctx=ctx)
    assert real_llm.backend.calls == before + 2  # one batched prompt each, no cache
    assert a.shape == (3,) and np.all(np.isfinite(a)) and np.array_equal(a, b)  # temperature 0: repeatable
    assert np.all((a >= 0) & (a <= 10))  # whatever the model writes, parsed scores stay numbers


def test_llm_refiner_and_a_whole_llm_preset_with_the_real_llm(kg, index, real_llm, monkeypatch):
    from kgrag.llm import clients as llm_clients

    params = RetrieveParams(method="lego", lego={"preset": "lego-19", "refine": {
        "name": "llm", "params": {"top_k": 4, "max_tokens": 80}}, "llm": {"cache": None}})
    key = json.dumps(params.module_params().llm.model_dump(mode="json"), sort_keys=True)
    monkeypatch.setitem(llm_clients._SETTINGS_CLIENTS, key, real_llm)
    q = Question("q", QUESTION, kg.ids_of(["Al Pacino"]), kg.ids_of(["Michael Mann", "Martin Scorsese"]))
    before = real_llm.backend.calls
    rows = retrieve_rows(questions=[q], kg=kg, index=index, params=params)
    trace = json.loads(rows[0][S.TRACE])
    refine = trace["stages"][-1]
    assert refine["module"] == "llm" and 0 < refine["paths"] <= 4  # selected lines, or the documented fallback
    assert len(rows[0][S.TRIPLE_HEADS]) > 0
    assert real_llm.backend.calls == before + 1 and real_llm.backend.replies[-1].strip()
    assert REFINERS.get("llm").params().fallback is True
