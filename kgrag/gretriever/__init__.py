"""G-Retriever's answer generation (He et al., 2024, section 5.4): a graph encoder and a projector turn the
retrieved subgraph into a graph token, a soft prompt put before the embedded textualized graph and question of a
frozen (or LoRA-tuned) decoder LLM.

- ``data``: training examples (question, named triples, label) from the loaders' tables, the seeded split,
  the prompt layout and the graph arrays (node / edge text embeddings) the encoder reads;
- ``encoders``: the graph encoders (GCN, GAT, Graph Transformer) registered by name;
- ``model``: the LLM loader, LoRA, the projector and the soft-prompt assembly (``GRetriever``);
- ``train``: the training loop (AdamW, warm-up + half-cycle cosine, gradient clipping, early stopping,
  checkpoints and resume) and evaluation by generation;
- ``presets``: the configurations of the paper's Table 3 and the ablations of its Table 6.

torch, transformers and torch-geometric are imported inside functions, so importing this package (the
``gretriever`` LLM backend does, through the backend registry) stays cheap.
"""
