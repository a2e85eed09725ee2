"""Reasoning modules (``reason.method``): how the answer is produced from the question, the retrieved context
and, for the graph reasoners, the KG itself. See ``core`` for the protocol and the batched driver."""

from kgrag.reasoning.reasoners.core import (  # noqa: F401
    REASONERS, ReasonInput, Reasoning, Sampling, answers_of, rows_of, run_batched, run_one,
)
