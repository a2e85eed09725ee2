"""A reasoner and a metric registered from outside the package, as a user's own module registers them: each is
one definition plus its registration, and nothing in kgrag is edited. They are listed by `kgrag modules`, the
reasoner answers in a real generate flow, the metric scores the run and names its row in the report and its
column (label and direction) in `kgrag compare`; the reasoner's own trace view (registered beside it) draws its
trace in report.html."""

from __future__ import annotations

import re
import statistics
import uuid

import numpy as np
import pytest

from kgrag import schema as S
from kgrag.reasoning.reasoners.core import Reasoning
from kgrag.registry import METRICS, REASONERS, TRACE_VIEWS
from kgrag.kg.store import KGStore
from kgrag.types import MetricKey
from tests.conftest import experiment_params, flow_inputs, shard_rows, write_index

TRIPLE = re.compile(r"\(([^,()]+), ([^,()]+), ([^()]+)\)")


def toy_first(*, inp, params):
    """The tail of the context's first triple: no LLM call."""
    m = TRIPLE.search(inp.context)
    return Reasoning(answer=m.group(3).strip() if m else "", trace={"reasoner": "toy-first"})
    yield  # a reasoner is a generator; this one asks for nothing


class AnswerChars:
    """Characters of the prediction, per question."""

    RANK = 50
    OUTPUTS = {"toy_answer_chars": MetricKey("answer chars", "Toy: characters / answer", -1)}

    def score(self, item) -> dict:
        return {"toy_chars": len(item.prediction)}

    def aggregate(self, rows) -> dict:
        return {"toy_answer_chars": statistics.fmean(r["toy_chars"] for r in rows) if rows else None}


def toy_view(trace, gi, marks, data, uid):
    """The toy reasoner's trace view in report.html (its own file registers it; the page builder is not edited)."""
    return f'<p class="toy-view">toy-first answered from the first of {len(data.subgraph.edges)} triples</p>'


@pytest.fixture
def registered():
    """The toy reasoner and metric registered for one test, and only their names taken out again (a copy of the
    registries put back instead would lose the modules that lazy lookups registered meanwhile)."""
    REASONERS.register("toy-first")(toy_first)
    METRICS.register("toy_answer_chars")(AnswerChars)
    TRACE_VIEWS.register("toy-first")(toy_view)
    yield
    REASONERS._entries.pop("toy-first", None)
    METRICS._entries.pop("toy_answer_chars", None)
    TRACE_VIEWS._entries.pop("toy-first", None)


def test_a_reasoner_and_a_metric_from_outside_reach_modules_a_run_the_report_and_compare(
        tmp_path, movies_db, capsys, registered):
    from flows.generate import generate_flow
    from flows.retrieve import retrieve_flow
    from kgrag import cli, io
    from kgrag.reporting import compare as C
    from kgrag.evaluation.evaluate import evaluate_rows
    from kgrag.params import GenerateParams, ReasonParams, RetrieveParams
    from kgrag.reporting.report import render

    assert cli.main(["modules"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert "reasoner toy-first" in [x.strip() for x in listed] and "metric toy_answer_chars" in [x.strip() for x in listed]

    # a run: retrieve (khop) and generate (toy-first) flows over a real DuckDB KG and a real MiniLM index
    kg = KGStore(movies_db)
    model = "all-MiniLM-L6-v2"
    write_index(tmp_path / "index", kg, model)
    topic = kg.find_entities("[Heat]")
    questions = [{S.QUESTION_ID: f"q{i}", S.SPLIT: "test", S.HOPS: 1, S.TEXT: f"who directed [Heat] {i}",
                  S.QTYPE: "", S.TOPIC_IDS: topic, S.ANSWER_IDS: [], S.ANSWERS: ["Michael Mann"]} for i in range(3)]
    files = flow_inputs(tmp_path / "in", questions)
    shards = retrieve_flow(questions=files["questions"], db_path=str(movies_db), db_hash=uuid.uuid4().hex,
                           index_dir=str(tmp_path / "index"), index_hash="i",
                           params=experiment_params(retrieve=RetrieveParams(method="khop", hops=1, shard_size=2),
                                                    index_model=model), shard_dir=files["shard_dir"])
    retrieved = tmp_path / "retrieved.parquet"
    io.stream_shards(shards, {retrieved: S.RETRIEVED})
    res = generate_flow(questions=files["questions"], retrieved=str(retrieved), db_path=str(movies_db),
                        params=experiment_params(
                            generate=GenerateParams(backend="openai", openai={"base_url": "http://127.0.0.1:9/v1"},
                                                    shard_size=2),
                            reason=ReasonParams(method="toy-first")),
                        cache_path=str(tmp_path / "calls.sqlite"), shard_dir=str(tmp_path / "gen"))
    gens = shard_rows(res["shards"])
    assert [g[S.REASONER] for g in gens] == ["toy-first"] * 3 and not any(g[S.FAILED] for g in gens)
    first_tails = [TRIPLE.search(r[S.CONTEXT_TRIPLES]).group(3).strip()
                   for r in io.read_parquet(retrieved).to_pylist()]
    assert [g[S.PREDICTION] for g in gens] == first_tails

    rows, metrics = evaluate_rows(questions=questions, retrieved=io.read_parquet(retrieved).to_pylist(),
                                  generations=gens)
    assert metrics["toy_answer_chars"] == statistics.fmean(len(t) for t in first_tails)

    md = render(metrics={**metrics, "setup": {}}, rows=rows, figure="f.png", examples=0, validation=None)
    assert f"| Toy: characters / answer (`toy_answer_chars`) | {metrics['toy_answer_chars']:.3f} |" in md

    # report.html draws the toy reasoner's trace with the view it registered (and the built-ins with theirs)
    from kgrag.reporting.report_html import QuestionData, question_view, subgraph_from_ids

    r0 = io.read_parquet(retrieved).to_pylist()[0]
    sub = subgraph_from_ids(heads=r0[S.TRIPLE_HEADS], relations=r0[S.TRIPLE_RELATIONS], tails=r0[S.TRIPLE_TAILS],
                            node_ids=r0[S.NODE_IDS], entity_name=kg.names,
                            relation_name=lambda ids: [str(x) for x in kg.relation_names[np.asarray(ids)]])
    html = question_view(QuestionData(row={**gens[0], "question": questions[0][S.TEXT]}, subgraph=sub,
                                      topic_ids=topic))
    assert f'class="toy-view">toy-first answered from the first of {len(sub.edges)} triples' in html
    TRACE_VIEWS._entries.pop("toy-first")
    assert "toy-view" not in question_view(QuestionData(row={**gens[0], "question": "q"}, subgraph=sub,
                                                        topic_ids=topic))  # the generic view without it

    assert C.label("toy_answer_chars") == "answer chars" and C.direction("toy_answer_chars") == -1
    exps = [C.Experiment(name=n, rev=n, baseline="b", kind="experiment", params={"reason.method": "toy-first"},
                         metrics={"toy_answer_chars": v}) for n, v in (("a", 4.0), ("b", 9.0))]
    table = C.render(exps, metrics=["toy_answer_chars"])
    assert "answer chars ↓" in table and "**4.000**" in table  # lower is better: the shorter answers win
