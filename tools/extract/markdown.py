"""Markdown: the text as it is, with a `Section` at every heading (ATX `#` and setext), found by `markdown-it-py`'s
CommonMark parser (so `#` lines inside code blocks are no headings)."""

from __future__ import annotations

from markdown_it import MarkdownIt

from tools.extract.base import Extracted, Section

_PARSER = MarkdownIt("commonmark")


def heading_sections(text: str) -> list[Section]:
    """A `Section` at the start of each heading line of Markdown `text`, with the heading path down to it (a
    heading of level n closes those of level >= n).

    A heading with nothing under it but the next heading (`# Guide` directly followed by `## Install`) starts no
    section of its own: its line joins the next section, so no chunk holds a heading alone."""
    line_starts = [0]
    for line in text.splitlines(keepends=True):
        line_starts.append(line_starts[-1] + len(line))
    tokens = _PARSER.parse(text)
    sections: list[Section] = []
    stack: list[tuple[int, str]] = []
    pending: int | None = None  # start of a heading with no body yet, to move into the next section
    body_from = 0  # where the text under the last heading begins
    for i, token in enumerate(tokens):
        if token.type != "heading_open" or token.map is None:
            continue
        level = int(token.tag[1:])
        title = tokens[i + 1].content.strip() if i + 1 < len(tokens) else ""
        if not title:
            continue
        start = line_starts[token.map[0]]
        if sections and not text[body_from:start].strip():
            pending = sections.pop().start if pending is None else pending
        while stack and stack[-1][0] >= level:
            stack.pop()
        stack.append((level, title))
        sections.append(Section(start if pending is None else pending, path=tuple(t for _, t in stack)))
        pending = None
        body_from = line_starts[min(token.map[1], len(line_starts) - 1)]
    return sections


def extract_markdown(text: str, fallback_title: str) -> Extracted:
    """`text` with its heading sections; the title is the first heading when the text starts with one, else
    `fallback_title`. A preamble before the first heading is a section with no path."""
    sections = heading_sections(text)
    first = text.lstrip().splitlines()[0] if text.strip() else ""
    title = first.lstrip("#").strip() if first.startswith("#") else fallback_title
    if sections and text[: sections[0].start].strip():
        sections.insert(0, Section(0))
    return Extracted(text, title, tuple(sections))
