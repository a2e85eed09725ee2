"""G-Retriever's answer generation (He et al., 2024, section 5.4): a graph encoder and a projector turn the
retrieved subgraph into a graph token, a soft prompt put before the embedded textualized graph and question of a
frozen (or LoRA-tuned) decoder LLM.

- ``data``: training examples (question, named triples, label) from the loaders' tables, the seeded split,
  the prompt layout and the graph arrays (node / edge text embeddings) the encoder reads;
- ``encoders``: the graph encoders (GCN, GAT, Graph Transformer) registered by name;
- ``model``: the model's config, the LLM loader, the prompt ids, checkpoints;
- ``module``: ``build_model`` and the ``GRetriever`` nn.Module (graph token, projector, soft prompt, LoRA; ``loss``,
  ``generate``), the one module here that imports torch at its top;
- ``train``: the training loop (AdamW, warm-up + half-cycle cosine, gradient clipping, early stopping,
  checkpoints and resume) and evaluation by generation;
- ``presets``: the configurations of the paper's Table 3 and the ablations of its Table 6;
- ``datasets``, ``run``, ``report``: the examples of each dataset (MetaQA's retrieved by the project's
  retrieval), one preset's run and the results table;
- ``backend``: the ``gretriever`` LLM backend (``kgrag.registry.BACKENDS``), a trained checkpoint answering
  the generate stage's requests.

The package sits on top of the layers (tests/test_import_graph.py): it imports ``llm``, ``retrieval`` and
``evaluation``, and none of them imports it; the backend registry reaches its backend by name
(``kgrag.catalogue``). torch, transformers and torch-geometric are imported inside functions (or by ``module``, imported where a model is built), so importing
this package (the backend registry does, to look ``gretriever`` up) stays cheap.
"""
