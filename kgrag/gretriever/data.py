"""G-Retriever training examples: question, retrieved subgraph (named triples), target text; the seeded split,
the prompt layout and the graph arrays the encoder reads.

An ``Example`` holds everything one training or test row needs, as plain Python values; the graph tensors
(``GraphArrays``: node and edge text embeddings plus ``edge_index``) are built from its triples with a text
embedder, the same way at training time and in the ``gretriever`` LLM backend, so a checkpoint sees at
inference the inputs it was trained on.
"""

from __future__ import annotations

import csv
import io as _io
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from kgrag import schema as S
from kgrag.llm.prompts import clean_question
from kgrag.llm.textualize import csv_text


Triple = tuple[str, str, str]

# System message of every G-Retriever prompt (training and inference alike).
SYSTEM = "Answer from the graph. Reply with the answer only; separate several answers with '|'."
# What separates several answers in a target text (G-Retriever's WebQSP labels are '|'.join(answers)).
LABEL_SEPARATOR = "|"
# The header ``kgrag.llm.prompts.build_request`` puts before a prompt's context (parsed by ``parse_prompt``).
CONTEXT_HEADER = "Knowledge graph facts (head, relation, tail):\n"


@dataclass(frozen=True)
class Example:
    """One question over its retrieved subgraph, with the text the LLM is trained to produce."""

    example_id: str
    question: str
    triples: tuple[Triple, ...]
    label: str
    answers: tuple[str, ...]
    choices: tuple[str, ...] = ()  # a label task's choices (ExplaGraphs: support / counter); () = entity answers


@dataclass(frozen=True)
class GraphArrays:
    """A subgraph as the graph encoder reads it: node features, ``edge_index`` (2, E) and edge features."""

    x: np.ndarray
    edge_index: np.ndarray
    edge_attr: np.ndarray

    @property
    def num_nodes(self) -> int:
        """Number of nodes."""
        return int(self.x.shape[0])


def split_indices(n: int, *, ratios: Sequence[float], seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Train / validation / test row indices: a seeded permutation of ``range(n)`` cut by ``ratios``.

    The cut points are ``floor(n * r_train)`` and ``floor(n * (r_train + r_val))``; the test part takes the
    rest. Each part is returned sorted.

    References
    ----------
    He et al., G-Retriever (2024), Appendix C: ExplaGraphs' train and dev rows split 6:2:2 at random.
    """
    if len(ratios) != 3 or any(r < 0 for r in ratios) or not np.isclose(sum(ratios), 1.0):
        raise ValueError(f"ratios must be three non-negative shares summing to 1, got {list(ratios)}")
    perm = np.random.default_rng(seed).permutation(n)
    a = int(np.floor(n * ratios[0]))
    b = int(np.floor(n * (ratios[0] + ratios[1])))
    return np.sort(perm[:a]), np.sort(perm[a:b]), np.sort(perm[b:])


# ---- prompt ------------------------------------------------------------------------------------------


def graph_text(triples: Sequence[Triple]) -> str:
    """The textualized graph put in the prompt: G-Retriever's node table and edge table (``csv_text``)."""
    return csv_text(list(triples)) if triples else ""


def question_text(question: str) -> str:
    """The question line(s) of the prompt."""
    return f"Question: {clean_question(question)}"


def relation_text(relation: str) -> str:
    """An edge's text for its embedding (as the index stage embeds relations)."""
    return relation.replace("_", " ")


def parse_prompt(user: str) -> tuple[str, list[Triple]]:
    """(question, triples) of a user message written by ``kgrag.llm.prompts.build_request``.

    The context block (after ``CONTEXT_HEADER``, before the first blank line followed by ``Question:``) is
    read as G-Retriever's CSV tables (``generate.context: csv``, exact) or as ``(head, relation, tail)`` lines
    (``triples``; a name containing ", " cannot be told apart there, so such a line is split at its first
    and last ", "). The question is what follows ``Question:``, without a trailing ``Choices:`` line and the
    final ``Answer:``.
    """
    text = user.strip()
    context = ""
    if text.startswith(CONTEXT_HEADER):
        body = text[len(CONTEXT_HEADER):]
        cut = body.find("\n\nQuestion: ")
        if cut < 0:
            raise ValueError("prompt has a context block but no 'Question:' after it")
        context, text = body[:cut], body[cut + 2:]
    if text.startswith("Question: "):
        text = text[len("Question: "):]
    if text.endswith("Answer:"):
        text = text[: -len("Answer:")].rstrip("\n")
    lines = text.split("\n")
    if len(lines) > 1 and lines[-1].startswith("Choices: "):
        text = "\n".join(lines[:-1])
    return text.strip(), parse_context(context)


def parse_context(context: str) -> list[Triple]:
    """Triples of a textualized context: G-Retriever CSV tables, ``(h, r, t)`` lines, or ``grouped`` lines
    ``(h, r, t1 | t2)``."""
    context = context.strip()
    if not context:
        return []
    if context.startswith("node_id,node_attr"):
        nodes_part, _, edges_part = context.partition("\n\nsrc,edge_attr,dst")
        names = {}
        for row in csv.reader(_io.StringIO(nodes_part.split("\n", 1)[1] if "\n" in nodes_part else "")):
            if len(row) >= 2:
                names[row[0]] = ",".join(row[1:])
        out = []
        for row in csv.reader(_io.StringIO(edges_part.strip())):
            if len(row) == 3 and row[0] in names and row[2] in names:
                out.append((names[row[0]], row[1], names[row[2]]))
        return out
    out = []
    for line in context.splitlines():
        line = line.strip()
        if not (line.startswith("(") and line.endswith(")")):
            continue
        inner = line[1:-1]
        a, b = inner.find(", "), inner.rfind(", ")
        if a < 0 or a == b:
            continue
        head, mid, tail = inner[:a], inner[a + 2: b], inner[b + 2:]
        if ", " in mid:  # ambiguous: the relation is taken as the middle part's last piece
            extra, mid = mid.rsplit(", ", 1)
            head = f"{head}, {extra}"
        out.extend((head, mid, t) for t in tail.split(" | "))  # a ``grouped`` line: a triple per tail
    return out


# ---- graph arrays ------------------------------------------------------------------------------------


class TextEmbedder:
    """Texts → unit embeddings with a sentence-transformers model, each distinct text encoded once.

    ``preset`` seeds the cache with known vectors (say, the index stage's entity and relation vectors),
    so those texts are not re-encoded.
    """

    def __init__(self, model: str, preset: dict[str, np.ndarray] | None = None,
                 encode: Callable[[list[str]], np.ndarray] | None = None) -> None:
        self.model = model
        self._cache: dict[str, np.ndarray] = dict(preset or {})
        self._encode = encode

    def _run(self, texts: list[str]) -> np.ndarray:
        if self._encode is not None:
            return self._encode(texts)
        from kgrag.index.embed import encode

        return encode(texts, model=self.model)

    def __call__(self, texts: Iterable[str]) -> np.ndarray:
        texts = list(texts)
        missing = sorted({t for t in texts if t not in self._cache})
        if missing:
            for t, v in zip(missing, self._run(missing)):
                self._cache[t] = np.asarray(v, dtype=np.float32)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([self._cache[t] for t in texts]).astype(np.float32)

    @property
    def dim(self) -> int:
        """Embedding size."""
        if self._cache:
            return int(next(iter(self._cache.values())).shape[-1])
        return int(self._run(["x"]).shape[-1])


def graph_arrays(triples: Sequence[Triple], embed: Callable[[list[str]], np.ndarray]) -> GraphArrays:
    """Nodes in first-appearance order (the node table of ``graph_text``), edges head → tail, features the
    embeddings of node names and of relation texts (``relation_text``).

    References
    ----------
    He et al., G-Retriever (2024), section 4 (indexing: node and edge attributes encoded by a language
    model) and eq. 9 (the encoder reads the retrieved subgraph S*).
    """
    ids: dict[str, int] = {}
    for h, _, t in triples:
        ids.setdefault(h, len(ids))
        ids.setdefault(t, len(ids))
    x = embed(list(ids))
    edge_index = np.array([[ids[h] for h, _, _ in triples], [ids[t] for _, _, t in triples]], dtype=np.int64)
    edge_attr = embed([relation_text(r) for _, r, _ in triples])
    if not triples:
        edge_index = np.zeros((2, 0), dtype=np.int64)
    return GraphArrays(x=np.asarray(x, dtype=np.float32), edge_index=edge_index.reshape(2, -1),
                       edge_attr=np.asarray(edge_attr, dtype=np.float32))


