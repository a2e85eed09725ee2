"""Params of stage report."""

from __future__ import annotations

from pydantic import ConfigDict, Field

from kgrag.config.base import Strict


class ReportParams(Strict):
    """Report."""

    model_config = ConfigDict(json_schema_extra={"yaml": "stage report: reports/report.md and report.html"})

    examples: int = Field(5, ge=0, description="questions shown in full in report.md")
    traces: int = Field(3, ge=0, description="questions whose reasoner trace (steps and LLM calls) report.md shows")
    html_max_questions: int = Field(200, ge=0, description="questions with a full view (subgraph, trace, LLM calls) "
                                    "in report.html; its question list covers all")
    html_seed: int = Field(0, description="seed of report.html's graph layouts (igraph Kamada-Kawai from a seeded "
                           "start)")
