"""LLM backends: one file each, registered in ``kgrag.registry.BACKENDS`` and listed in
``kgrag.catalogue``.

A backend is a class ``Backend(params, *, timeout_s)`` implementing ``kgrag.llm.calls.LLMBackend``.
"""
