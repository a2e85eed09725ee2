"""The ``triples`` loader's record rules, shared by its two engines (``triples``: line by line;
``triples_arrow``: vectorized): where head / relation / tail stand, and why a record is not a triple.

Both engines import these from here, so that the quarantine reasons they write are the same strings and
neither engine imports the other back.
"""

from __future__ import annotations

from pathlib import Path

from kgrag.kg.loaders.common import LoaderInputError


def column_layout(
    src: Path, header_fields: list[str] | None, *, header: bool, head: int | str, relation: int | str,
    tail: int | str, columns: int | None,
) -> tuple[int, int, int, int]:
    """Fields per line and the head / relation / tail positions.

    Parameters
    ----------
    src : Path
        The triples file (named in the errors).
    header_fields : list of str or None
        With ``header``, the header record's fields (None: the header is unreadable, an error).
    header : bool
        The first record names the columns.
    head, relation, tail : int or str
        The columns: 0-based positions, or (with ``header``) header names.
    columns : int or None
        Fields per line (None: the header's count, else the last used column + 1).

    Returns
    -------
    tuple of int
        ``(fields per line, head position, relation position, tail position)``.

    Raises
    ------
    LoaderInputError
        The header is unreadable, names no such column, or a position lies beyond the fields per line.
    """
    pos = [head, relation, tail]
    if header:
        if header_fields is None:
            raise LoaderInputError(f"{src}: header row unreadable")
        names = [c.strip() for c in header_fields]
        for i, c in enumerate(pos):
            if isinstance(c, str):
                if c not in names:
                    raise LoaderInputError(f"{src}: column {c!r} not in the header ({', '.join(names)})")
                pos[i] = names.index(c)
        expected = columns or len(names)
    else:
        expected = columns or max(int(p) for p in pos) + 1
    if max(int(p) for p in pos) >= expected:
        raise LoaderInputError(f"{src}: column position {max(int(p) for p in pos)} beyond the {expected} fields per line")
    h, r, t = (int(p) for p in pos)
    return expected, h, r, t


def field_count_reason(expected: int, got: int, delimiter: str) -> str:
    """Quarantine reason of a record with the wrong number of fields.

    Parameters
    ----------
    expected : int
        Fields per line.
    got : int
        Fields of the record.
    delimiter : str
        The field separator (quoted in the reason).

    Returns
    -------
    str
        The reason.
    """
    return f"expected {expected} {delimiter!r}-separated fields, got {got}"


def empty_reason(empty: list[str]) -> str:
    """Quarantine reason of a record whose head / relation / tail is blank.

    Parameters
    ----------
    empty : list of str
        The blank fields' names (``"head"``, ``"relation"``, ``"tail"``), in that order.

    Returns
    -------
    str
        The reason.
    """
    return f"empty {'/'.join(empty)} field"


def record_problem(fields: list[str], expected: int, cols: tuple[int, int, int], delimiter: str) -> str | None:
    """Why a parsed record is not a triple (wrong field count, blank head / relation / tail), or None.

    Parameters
    ----------
    fields : list of str
        The record's fields.
    expected : int
        Fields per line.
    cols : tuple of int
        Head, relation and tail positions.
    delimiter : str
        The field separator (quoted in a field-count reason).

    Returns
    -------
    str or None
        The quarantine reason, or None for a valid triple.
    """
    if len(fields) != expected:
        return field_count_reason(expected, len(fields), delimiter)
    empty = [n for n, i in zip(("head", "relation", "tail"), cols) if not fields[i].strip()]
    return empty_reason(empty) if empty else None
