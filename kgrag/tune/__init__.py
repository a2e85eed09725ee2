"""LoRA tuning of the embedded LLM as the ``rank`` reasoner's answer scorer (stage ``tune_answer_scorer``).

``rows``: training rows (a labelled question's prompt tokens, its candidates' tokens, which are gold) built by the
experiment's own retriever and ``rank``'s candidate rule; ``lora``: low-rank adapters on the top layers of the
Hugging Face model converted from the packaged GGUF; ``train``: the listwise objective, seeded, resumable;
``gguf``: the adapters merged into a copy of the GGUF that llama.cpp serves (the same fast path as the base model).
"""
