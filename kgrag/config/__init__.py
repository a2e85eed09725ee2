"""The params framework: the base models (``Strict``, ``ModuleSection``), the validation depth, reading and
validating ``params.yaml`` with errors that name file, line and key (``load``), and the writer that puts every
key's comment into ``params.yaml`` from its model's description (``yaml_doc``).

It names no section: each section's model is declared by the package that uses it (``kgrag.kg.params``,
``kgrag.index.params``, ``kgrag.retrieval.params``, ...), and ``kgrag.params`` assembles them into the whole file.
"""

from kgrag.config.base import DEPTHS, ModuleSection, ParamsError, Strict, inside, section_hash  # noqa: F401
