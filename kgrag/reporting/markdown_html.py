"""The markdown subset of report.md and compare.md (headings, pipe tables, images, paragraphs, ``code`` and
**bold**) as HTML for report.html and ``kgrag compare --html``; every text escaped."""

from __future__ import annotations

import base64
import re
from typing import Mapping, Sequence

from kgrag.reporting.graph_svg import esc

_MD_IMG = re.compile(r"!\[([^\]]*)\]\(([^)]+)\)")


def _inline_md(text: str) -> str:
    """Escaped text with the markdown of report.md's cells: ``code`` and **bold**."""
    t = esc(text)
    t = re.sub(r"`([^`]+)`", r"<code>\1</code>", t)
    return re.sub(r"\*\*([^*]+)\*\*", r"<b>\1</b>", t)


def markdown_html(md: str, images: Mapping[str, bytes] | None = None) -> str:
    """The markdown subset of report.md and compare.md (headings, pipe tables, images, paragraphs) as HTML;
    images whose path is a key of ``images`` are inlined as base64 data URIs, others are shown as their path."""
    images = images or {}
    out: list[str] = []
    lines = md.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("|"):
            block = []
            while i < len(lines) and lines[i].startswith("|"):
                block.append(lines[i])
                i += 1
            cells = [[c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", r.strip()[1:-1])] for r in block]
            body = [r for r in cells[1:] if not all(re.fullmatch(r":?-+:?", c or "-") for c in r)]
            out.append("<table><thead><tr>" + "".join(f"<th>{_inline_md(c)}</th>" for c in cells[0])
                       + "</tr></thead><tbody>" + "".join(
                           "<tr>" + "".join(f"<td>{_inline_md(c)}</td>" for c in r) + "</tr>" for r in body)
                       + "</tbody></table>")
            continue
        m = re.match(r"(#{1,4}) (.*)", line)
        if m:
            level = min(len(m.group(1)) + 1, 4)
            out.append(f"<h{level}>{_inline_md(m.group(2))}</h{level}>")
        elif _MD_IMG.search(line):
            for alt, src in _MD_IMG.findall(line):
                data = images.get(src)
                mime = "image/svg+xml" if src.endswith(".svg") else "image/png"
                out.append(f'<img class="fig" alt="{esc(alt)}" src="data:{mime};base64,'
                           f'{base64.b64encode(data).decode()}">' if data is not None else
                           f'<p class="note">figure {esc(src)} (not found)</p>')
        elif line.strip():
            out.append(f"<p>{_inline_md(line.strip())}</p>")
        i += 1
    return "".join(out)


def report_sections(md: str, drop: Sequence[str] = ("Examples", "Reasoner traces")) -> str:
    """report.md without the sections the per-question views replace (its examples and traces)."""
    keep, out = True, []
    for line in md.splitlines():
        if line.startswith("## "):
            keep = line[3:].strip() not in drop
        if keep:
            out.append(line)
    return "\n".join(out)
