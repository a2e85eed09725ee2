"""params.yaml's comments, written from the params models (``kgrag params --write``): one source for every param.

The values stay as the file has them (they are the experiment's; a test keeps them equal to the models' defaults);
each key's comment is its field's ``description``; a section's, when its field has none, its model's
``json_schema_extra={"yaml": ...}`` or docstring (first paragraph); a module's sub-section's the module's first
sentence. A comment starts at column ``COLUMN`` (after the value when that is
longer) and wraps at ``WIDTH``, its continuation lines at ``COLUMN``. A commented-out key whose model has that
field (``# key: value``) gets the field's description like any key.

The comment lines that belong to no key are written too: the file's header (``HEADER``) and the notes a params
model puts in its section (``json_schema_extra={"yaml_notes": ...}``, :func:`model_notes`: a note above one of its
keys, or after its last key, e.g. a commented-out example whose values come from a model's defaults, written by
:class:`Example`). Such lines where a note goes are replaced by it, so a hand edit there is undone (and caught by
the check); other comment lines are kept as they are, with their own continuation lines.
"""

from __future__ import annotations

import inspect
import re
import textwrap
from dataclasses import dataclass
from typing import Any, Union

import yaml
from pydantic import BaseModel

from kgrag.config.base import ModuleSection

COLUMN = 27
WIDTH = 120
#: params.yaml's first lines (a blank line follows them): what the file is and how to change one of its keys
HEADER = (
    "kgrag experiment parameters. Every key is validated (unknown keys and module names are errors);",
    "`kgrag modules` lists the module names. Change one with `dvc exp run -S section.key=value`:",
    "DVC re-runs only the stages that read the changed key.",
)
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


@dataclass(frozen=True)
class Example:
    """A key left commented out on purpose, its value a YAML flow collection (``# key: {a: 1, b: [x, y]}``) wrapped
    at its items, continuation lines indented two more; ``comment`` follows the last line, wrapped as a key's."""

    key: str
    value: Any
    comment: str | None = None


#: a line of a note: a comment line, a commented-out value with its comment, or an :class:`Example`
NoteLine = Union[str, "tuple[str, str | None]", Example]


#: where a note goes in its section, besides above a key of that name: after the section's last key, or above the
#: first of its keys that is a module's sub-section (a loader's under ``data``, a retriever's under ``retrieve``)
AFTER_LAST, ABOVE_MODULES = "", ":modules"


def model_notes(model: Any) -> dict[str, tuple[NoteLine, ...]]:
    """The notes a params model writes into its section (``json_schema_extra={"yaml_notes": {...}}``): under a key's
    name the lines written just above that key, under ``AFTER_LAST`` the lines written after the section's last key,
    under ``ABOVE_MODULES`` those written above its first module sub-section."""
    extra = (getattr(model, "model_config", None) or {}).get("json_schema_extra") if isinstance(model, type) else None
    notes = extra.get("yaml_notes") if isinstance(extra, dict) else None
    return {k: tuple(v) for k, v in (notes or {}).items()}


def flow(value: Any) -> str:
    """``value`` as a YAML flow scalar or collection, floats in the file's style (``2.0e-5``, ``0.8``)."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {flow(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(flow(v) for v in value) + "]"
    if isinstance(value, bool) or value is None:
        return {True: "true", False: "false", None: "null"}[value]
    if isinstance(value, float):
        mantissa, _, exponent = repr(value).partition("e")
        return f"{float(mantissa)!r}e{int(exponent)}" if exponent else mantissa
    text = str(value)
    return text if yaml.safe_load(f"k: {text}") == {"k": value} else yaml.safe_dump(value).split("\n")[0]


def _example_lines(indent: str, ex: Example) -> list[str]:
    """``# key: value`` wrapped at the value's items (after ``, ``), then the comment after the last line."""
    lines: list[str] = []
    for item in f"{ex.key}: {flow(ex.value)}".split(", "):
        prefix = f"{indent}# " if not lines else f"{indent}#   "
        if lines and len(f"{lines[-1]}, {item},") <= WIDTH:
            lines[-1] = f"{lines[-1]}, {item}"
        else:
            if lines:
                lines[-1] += ","
            lines.append(f"{prefix}{item}")
    return lines[:-1] + _comment_lines(lines[-1], ex.comment)


def _is_module(model: Any, key: str) -> bool:
    """Whether ``key`` under ``model`` is a module's sub-section (its own params model, no field of ``model``)."""
    modules = getattr(model, "doc_modules", None)
    if modules is not None:
        found = modules(key)
        return found is not None and found[1] is None
    return isinstance(model, type) and issubclass(model, ModuleSection) and key in model._registry


def _note_lines(indent: str, note: tuple[NoteLine, ...]) -> list[str]:
    out: list[str] = []
    for line in note:
        if isinstance(line, Example):
            out += _example_lines(indent, line)
        else:
            code, comment = (line, None) if isinstance(line, str) else line
            out += _comment_lines(f"{indent}# {code}".rstrip(), comment)
    return out


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
    """``text`` (params.yaml) with every key's comment written from ``root``'s models, the header and the models'
    notes written where they go; values and other comment lines kept."""
    lines = text.splitlines()
    start = 0
    while start < len(lines) and (lines[start].startswith("#") or not lines[start].strip()):
        start += 1  # the old header (comment lines above the first key) and the blank lines after it
    out: list[str] = [f"# {line}" for line in HEADER] + [""]
    # (indent, model documenting the section's keys, its keys' indent, whether its ABOVE_MODULES note is written):
    # a key's parent section is the last one with a smaller indent
    stack: list[list[Any]] = [[-1, root, 0, False]]
    pending: list[str] = []  # comment lines of no key (and their continuation lines), not written yet

    def close(indent: int) -> list[str]:
        """Leave the sections ``indent`` ends: the notes they write after their last key."""
        notes: list[str] = []
        while stack[-1][0] >= indent:
            _, model, child, _ = stack.pop()
            end = model_notes(model).get(AFTER_LAST)
            if end:
                notes += _note_lines(" " * child, end)
        return notes

    def place(notes: list[str]) -> None:
        """Write ``notes`` in place of the pending comment lines, or those lines as they are when no note goes here."""
        out.extend(notes if notes else pending)
        pending.clear()

    for line in lines[start:]:
        stripped = line.lstrip()
        indent = len(line) - len(stripped)
        m = _KEY.match(line)
        if not stripped:
            place([])
            out.append(line)
            continue
        if m is None or (m["hash"] and not _commented_key(m, [(i, model) for i, model, *_ in stack])):
            if not stripped.startswith("#"):
                place([])
                out.append(line)
            elif indent >= COLUMN - 1 and not pending:
                continue  # a key's continuation comment: written again below
            else:
                pending.append(line)
            continue
        notes = close(indent)
        parent = stack[-1]
        parent[2] = indent
        before = list(model_notes(parent[1]).get(m["key"], ()))
        if not parent[3] and ABOVE_MODULES in model_notes(parent[1]) and _is_module(parent[1], m["key"]):
            parent[3] = True
            before = list(model_notes(parent[1])[ABOVE_MODULES]) + before
        place(notes + (_note_lines(m["indent"], tuple(before)) if before else []))
        comment, sub = _child(parent[1], m["key"])
        value, _ = _split_comment(m["rest"])
        out += _comment_lines(f"{m['indent']}{m['hash'] or ''}{m['key']}:{value}", comment)
        stack.append([indent, sub, indent + 2, False])
    place(close(0))
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
