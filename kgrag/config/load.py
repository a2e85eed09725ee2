"""Reading ``params.yaml``: YAML to a raw dict, ``-S``-style overrides, and validation into a params model whose
errors name the file, line and key and list the valid keys or choices."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from kgrag.config.base import ParamsError, depth

M = TypeVar("M", bound=BaseModel)


def _lines(text: str) -> dict[tuple[str, ...], int]:
    """Map each key path of a YAML document to its 1-based line."""
    out: dict[tuple[str, ...], int] = {}

    def walk(node: yaml.Node, path: tuple[str, ...]) -> None:
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                p = (*path, str(k.value))
                out[p] = k.start_mark.line + 1
                walk(v, p)

    try:
        root = yaml.compose(text)
    except yaml.YAMLError:
        return out
    if root is not None:
        walk(root, ())
    return out


def set_override(raw: dict[str, Any], assignment: str) -> None:
    """Apply ``a.b.c=value`` (value parsed as YAML) to a nested dict in place."""
    if "=" not in assignment:
        raise ParamsError(f"--set {assignment!r}: expected key=value")
    key, value = assignment.split("=", 1)
    parts = key.strip().split(".")
    node = raw
    for p in parts[:-1]:
        node = node.setdefault(p, {})
        if not isinstance(node, dict):
            raise ParamsError(f"--set {assignment!r}: {p} is not a section")
    node[parts[-1]] = yaml.safe_load(value)


def _is_model(t: Any) -> bool:
    return isinstance(t, type) and issubclass(t, BaseModel)


def _valid_keys(model: Any, loc: tuple[str, ...]) -> list[str]:
    """Field names of the params model at ``loc`` (by alias), for error messages."""
    for part in loc:
        fields = {f.alias or n: f for n, f in model.model_fields.items()}
        field = fields.get(part)
        sub = field.annotation if field is not None else None
        if field is not None and field.default_factory is not None and not _is_model(sub):
            sub = type(field.default_factory())  # type: ignore[call-arg]  # a section typed Any (G-Retriever's)
        if not _is_model(sub):
            return []
        model = sub
    return [f.alias or n for n, f in model.model_fields.items()]


def parse_as(model: type[M], raw: dict[str, Any], *, source: str = "params.yaml", text: str = "",
             modules: str = "selected") -> M:
    """Validate a raw params dict as ``model``; errors name the source, line and key. ``modules``: ``selected``
    validates the chosen modules' sub-sections (importing only them), ``all`` every sub-section."""
    try:
        with depth(modules):
            return model.model_validate(raw)
    except ValidationError as e:
        lines = _lines(text)
        msgs = []
        for err in e.errors():
            loc = tuple(str(p) for p in err["loc"])
            msg = err["msg"].removeprefix("Value error, ")
            # Module sections report "sub.key: message": move the key path into the location.
            head, sep, rest = msg.partition(": ")
            if sep and head.replace("_", "").replace(".", "").isalnum() and " " not in head:
                loc, msg = (*loc, *head.split(".")), rest
            if err["type"] == "extra_forbidden" or msg.startswith("Extra inputs are not permitted"):
                valid = _valid_keys(model, loc[:-1])
                if valid:
                    msg += f"; valid keys here: {', '.join(valid)}"
            line = None
            for n in range(len(loc), 0, -1):
                if loc[:n] in lines:
                    line = lines[loc[:n]]
                    break
            where = f"{source}:{line}" if line else source
            key = ".".join(loc) or "(top level)"
            msgs.append(f"{where}: {key}: {msg}")
        raise ParamsError("invalid params\n  " + "\n  ".join(msgs)) from None


def read(path: str | Path, overrides: list[str] | None = None) -> tuple[dict[str, Any], str]:
    """``path``'s YAML as a dict with the ``a.b=value`` overrides applied, and its text (for error lines)."""
    path = Path(path)
    text = path.read_text() if path.exists() else ""
    try:
        raw = yaml.safe_load(text) or {}
    except yaml.YAMLError as e:
        raise ParamsError(f"{path}: not valid YAML: {e}") from None
    if not isinstance(raw, dict):
        raise ParamsError(f"{path}: top level must be a mapping")
    for o in overrides or []:
        set_override(raw, o)
    return raw, text
