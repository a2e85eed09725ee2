"""LLM backends: one file each, registered in ``kgrag.registry.BACKENDS`` and listed in
``kgrag.catalogue``. G-Retriever's backend (``gretriever``) lives with its model, in ``kgrag.gretriever.backend``:
the LLM layer does not import the G-Retriever package, which is built on it.

A backend is a class ``Backend(params, *, timeout_s)`` implementing ``kgrag.llm.calls.LLMBackend``.
"""
