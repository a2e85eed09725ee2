"""The index: entity/relation embeddings, the fine-tuned scorer, relation-path plans."""
