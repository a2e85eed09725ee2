"""Graph encoders of G-Retriever (eq. 9: h_g = POOL(GNN(S*))), registered by name: ``gcn``, ``gat``,
``transformer`` (the paper's default). Each entry builds a torch module whose ``forward(x, edge_index,
edge_attr)`` returns node embeddings; ``mean_pool`` then gives one vector per graph.

A stack of ``layers`` message-passing layers of width ``hidden`` (the last one of width ``out_dim``), each
but the last followed by LayerNorm, ReLU and dropout. GAT and the Graph Transformer read edge features
(``edge_dim``); GCN does not (it has no edge-feature input).
"""

from __future__ import annotations

from typing import Any, Callable

from pydantic import Field

from kgrag.config.base import Strict
from kgrag.registry import GRAPH_ENCODERS


class EncoderShape(Strict):
    """Sizes of a graph encoder."""

    in_dim: int = Field(..., ge=1, description="node (and edge) feature size")
    hidden: int = Field(1024, ge=1, description="hidden width")
    out_dim: int = Field(1024, ge=1, description="node embedding size d_g")
    layers: int = Field(4, ge=1, description="message-passing layers")
    heads: int = Field(4, ge=1, description="attention heads (gat, transformer); widths must be divisible by it")
    dropout: float = Field(0.0, ge=0.0, lt=1.0)


def _stack(shape: EncoderShape, make_layer: Callable[[int, int, bool], Any]):
    import torch
    from torch import nn

    class Encoder(nn.Module):
        """Message-passing layers with LayerNorm, ReLU and dropout between them."""

        def __init__(self) -> None:
            super().__init__()
            dims = [shape.in_dim] + [shape.hidden] * (shape.layers - 1) + [shape.out_dim]
            self.convs = nn.ModuleList(make_layer(dims[i], dims[i + 1], i == shape.layers - 1)
                                       for i in range(shape.layers))
            self.norms = nn.ModuleList(nn.LayerNorm(d) for d in dims[1:-1])
            self.dropout = shape.dropout

        def forward(self, x: torch.Tensor, edge_index: torch.Tensor, edge_attr: torch.Tensor) -> torch.Tensor:
            for i, conv in enumerate(self.convs):
                x = conv(x, edge_index, edge_attr)
                if i < len(self.convs) - 1:
                    x = nn.functional.dropout(torch.relu(self.norms[i](x)), p=self.dropout, training=self.training)
            return x

    return Encoder()


def _check_heads(shape: EncoderShape) -> None:
    for name, d in (("hidden", shape.hidden), ("out_dim", shape.out_dim)):
        if d % shape.heads:
            raise ValueError(f"graph encoder {name}={d} is not divisible by heads={shape.heads}")


@GRAPH_ENCODERS.register("gcn")
def gcn(shape: EncoderShape):
    """GCN (Kipf and Welling, 2017): symmetric-normalized neighbour averaging; edge features unused."""
    from torch import nn
    from torch_geometric.nn import GCNConv

    class Layer(nn.Module):
        def __init__(self, a: int, b: int) -> None:
            super().__init__()
            self.conv = GCNConv(a, b)

        def forward(self, x, edge_index, edge_attr):
            return self.conv(x, edge_index)

    return _stack(shape, lambda a, b, last: Layer(a, b))


@GRAPH_ENCODERS.register("gat")
def gat(shape: EncoderShape):
    """GAT (Velickovic et al., 2018) with edge features in the attention scores; heads concatenated."""
    from torch import nn
    from torch_geometric.nn import GATConv

    _check_heads(shape)

    class Layer(nn.Module):
        def __init__(self, a: int, b: int) -> None:
            super().__init__()
            self.conv = GATConv(a, b // shape.heads, heads=shape.heads, edge_dim=shape.in_dim, dropout=shape.dropout)

        def forward(self, x, edge_index, edge_attr):
            return self.conv(x, edge_index, edge_attr=edge_attr)

    return _stack(shape, lambda a, b, last: Layer(a, b))


@GRAPH_ENCODERS.register("transformer")
def transformer(shape: EncoderShape):
    """Graph Transformer (Shi et al., 2021: ``TransformerConv``), edge features added to keys and values;
    heads concatenated. G-Retriever's default encoder (Appendix B.1: 4 layers, 4 heads, width 1024)."""
    from torch import nn
    from torch_geometric.nn import TransformerConv

    _check_heads(shape)

    class Layer(nn.Module):
        def __init__(self, a: int, b: int) -> None:
            super().__init__()
            self.conv = TransformerConv(a, b // shape.heads, heads=shape.heads, edge_dim=shape.in_dim,
                                        dropout=shape.dropout)

        def forward(self, x, edge_index, edge_attr):
            return self.conv(x, edge_index, edge_attr=edge_attr)

    return _stack(shape, lambda a, b, last: Layer(a, b))


def build_encoder(name: str, shape: EncoderShape):
    """The registered encoder ``name`` (unknown names fail listing the choices)."""
    return GRAPH_ENCODERS.get(name).impl(shape)


def mean_pool(h, batch, num_graphs: int):
    """Mean of the node embeddings of each graph (``batch[i]`` = graph of node i); a graph without nodes
    gets the zero vector.

    References
    ----------
    He et al., G-Retriever (2024), eq. 9 (POOL = mean pooling).
    """
    import torch

    out = torch.zeros(num_graphs, h.shape[-1], dtype=h.dtype, device=h.device)
    out = out.index_add(0, batch, h)
    counts = torch.bincount(batch, minlength=num_graphs).clamp(min=1).to(h.dtype)
    return out / counts[:, None]
