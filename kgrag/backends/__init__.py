"""LLM backends: one file each, registered in ``kgrag.registry.BACKENDS``.

A backend is a class ``Backend(params, *, timeout_s)`` implementing ``kgrag.llm.LLMBackend``.
"""

from kgrag.backends import gretriever, llamacpp, openai, vllm  # noqa: F401
