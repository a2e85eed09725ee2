"""params.yaml's comments, written from the params models (``kgrag params --write``): one source for every param.

The values stay as the file has them (they are the experiment's; a test keeps them equal to the models' defaults);
each key's comment is its field's ``description``; a section's, when its field has none, its model's
``json_schema_extra={"yaml": ...}`` or docstring (first paragraph); a module's sub-section's the module's first
sentence. A comment starts at column ``COLUMN`` (after the value when that is
longer) and wraps at ``WIDTH``, its continuation lines at ``COLUMN``. Lines that are comments only, at a key's
indentation (the file's header, a note before a key, ``# key: value`` left commented out on purpose), are kept
as they are, with their own continuation lines; a commented-out key whose model has that field gets the field's
description like any key.
"""

from __future__ import annotations

import inspect
import re
import textwrap
from typing import Any

import yaml
from pydantic import BaseModel

from kgrag.config.base import ModuleSection

COLUMN = 27
WIDTH = 120
_KEY = re.compile(r"^(?P<indent> *)(?P<hash># )?(?P<key>[A-Za-z_][\w-]*):(?P<rest>.*)$")


def _split_comment(rest: str) -> tuple[str, str]:
    """A key line's text after ``key:`` as (value, comment), the comment being what follows the first `` #``
    outside quotes."""
    quote = None
    for i, ch in enumerate(rest):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch == "#" and (i == 0 or rest[i - 1] in " \t"):
            return rest[:i].rstrip(), rest[i:]
    return rest.rstrip(), ""


def _text(s: str | None) -> str | None:
    if not s:
        return None
    return " ".join(s.replace("``", "`").split())


def model_doc(model: Any) -> str | None:
    """A model's own docstring, first paragraph (``json_schema_extra={"yaml": ...}`` in its config first)."""
    extra = (getattr(model, "model_config", None) or {}).get("json_schema_extra")
    if isinstance(extra, dict) and extra.get("yaml"):
        return _text(str(extra["yaml"]))
    doc = model.__dict__.get("__doc__") if isinstance(model, type) else None
    return _text(inspect.cleandoc(doc).split("\n\n")[0]) if doc else None


def module_doc(impl: Any) -> str | None:
    """A registered module's first sentence (its docstring's first paragraph up to the first full stop)."""
    doc = _text(inspect.cleandoc(inspect.getdoc(impl) or "").split("\n\n")[0])
    if not doc:
        return None
    end = re.search(r"[.;](\s|$)", doc)
    return doc[: end.start()] if end else doc


def _child(model: Any, key: str) -> tuple[str | None, Any]:
    """(the comment of ``key`` under ``model``, the model documenting ``key``'s own keys, if any)."""
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        return None, None
    fields = {f.alias or n: f for n, f in model.model_fields.items()}
    if key in fields:
        f = fields[key]
        sub = f.annotation if isinstance(f.annotation, type) and issubclass(f.annotation, BaseModel) else None
        if sub is None and f.default_factory is not None:
            default = f.default_factory()  # type: ignore[call-arg]
            sub = type(default) if isinstance(default, BaseModel) else None
        return _text(f.description) or (model_doc(sub) if sub else None), sub
    modules = getattr(model, "doc_modules", None)  # DataParams: the loaders and the keys at the top of data
    if modules is not None:
        found = modules(key)
        if found is not None:
            sub, field = found
            if field is None:
                return module_doc(modules(key, impl=True)) or model_doc(sub), sub
            return _text(sub.model_fields[field].description), None
    if issubclass(model, ModuleSection) and key in model._registry:
        entry = model._registry.get(key)
        return module_doc(entry.impl) or model_doc(entry.params), entry.params
    return None, None


def _comment_lines(code: str, comment: str | None) -> list[str]:
    if not comment:
        return [code]
    pad = max(COLUMN, len(code) + 2) if code.strip() else COLUMN
    first = textwrap.wrap(comment, WIDTH - pad - 2, break_long_words=False, break_on_hyphens=False)[0]
    rest = comment[len(first):].strip()
    out = [f"{code.ljust(pad)}# {first}"]
    out += [f"{' ' * COLUMN}# {line}" for line in textwrap.wrap(rest, WIDTH - COLUMN - 2, break_long_words=False,
                                                              break_on_hyphens=False)]
    return out


def render(text: str, root: type[BaseModel]) -> str:
    """``text`` (params.yaml) with every key's comment written from ``root``'s models; values and free comment
    lines kept."""
    out: list[str] = []
    stack: list[tuple[int, Any]] = [(-1, root)]
    keep_continuation = False  # the comment lines under a free comment line belong to it
    for line in text.splitlines():
        stripped = line.lstrip()
        indent = len(line) - len(stripped)
        m = _KEY.match(line)
        if not stripped:
            out.append(line)
            keep_continuation = False
            continue
        if m is None or (m["hash"] and not _commented_key(m, stack)):
            if stripped.startswith("#") and indent >= COLUMN - 1 and not keep_continuation and out:
                continue  # a key's continuation comment: written again below
            out.append(line)
            keep_continuation = stripped.startswith("#")
            continue
        keep_continuation = False
        while stack[-1][0] >= indent:
            stack.pop()
        comment, sub = _child(stack[-1][1], m["key"])
        value, _ = _split_comment(m["rest"])
        out += _comment_lines(f"{m['indent']}{m['hash'] or ''}{m['key']}:{value}", comment)
        stack.append((indent, sub))
    return "\n".join(out) + "\n"


def _commented_key(m: re.Match[str], stack: list[tuple[int, Any]]) -> bool:
    """Whether ``# key: value`` is a key left commented out: a field of the model at its indentation, with a
    value that is whole YAML."""
    indent = len(m["indent"])
    parent = next((model for i, model in reversed(stack) if i < indent), None)
    value, _ = _split_comment(m["rest"])
    try:
        yaml.safe_load(value or "null")
    except yaml.YAMLError:
        return False
    return _child(parent, m["key"]) != (None, None)


def first_difference(have: str, want: str) -> str | None:
    """The first line where ``have`` differs from ``want``, with the key above it, or None when they agree."""
    a, b = have.splitlines(), want.splitlines()
    for i in range(max(len(a), len(b))):
        x, y = (a[i] if i < len(a) else "<end>"), (b[i] if i < len(b) else "<end>")
        if x != y:
            keys = [_KEY.match(s) for s in b[: i + 1]]
            key = next((k["key"] for k in reversed(keys) if k), "(top)")
            return f"line {i + 1} (at key {key!r}):\n  file:      {x}\n  generated: {y}"
    return None
