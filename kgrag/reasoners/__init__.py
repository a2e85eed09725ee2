"""Reasoning modules (``reason.method``): how the answer is produced from the question, the retrieved context
and, for the graph reasoners, the KG itself. See ``core`` for the protocol and the batched driver."""

from kgrag.reasoners.core import (  # noqa: F401
    REASONERS, ReasonInput, Reasoning, Sampling, rows_of, run_batched, run_one,
)

from kgrag.reasoners import answer, baselines  # noqa: E402,F401,I001
from kgrag.reasoners import fasttog, tog  # noqa: E402,F401,I001
from kgrag.reasoners import agent, explore  # noqa: E402,F401,I001
from kgrag.reasoners import rank  # noqa: E402,F401,I001
