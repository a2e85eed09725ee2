"""kgrag: declarative, DAG-orchestrated knowledge-graph retrieval-augmented generation."""

__version__ = "0.1.0"
