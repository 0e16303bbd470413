"""Documents read as a sequence of blocks (headings and bodies), as HTML and DOCX are, turned into text with a
`Section` at each heading."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from tools.extract.base import Extracted, Section


@dataclass(frozen=True)
class Block:
    """A heading (`level` 1-9) or a body block (`level` 0: paragraph, list, table, code) and its text."""

    level: int
    text: str


def from_blocks(blocks: Iterable[Block], title: str) -> Extracted:
    """Blocks joined by blank lines; each heading starts a `Section` whose path is the headings above it down to
    itself (a heading of level n closes those of level >= n). Blocks before the first heading form a section with
    no path. Blank blocks are dropped. `title` defaults to the first heading."""
    parts: list[str] = []
    sections: list[Section] = []
    stack: list[tuple[int, str]] = []
    offset = 0
    for block in blocks:
        text = block.text.strip()
        if not text:
            continue
        if parts:
            offset += 2
        if block.level > 0:
            heading = " ".join(text.split())
            while stack and stack[-1][0] >= block.level:
                stack.pop()
            stack.append((block.level, heading))
            sections.append(Section(offset, path=tuple(h for _, h in stack)))
            text = heading
        elif not sections:
            sections.append(Section(offset))
        parts.append(text)
        offset += len(text)
    if not title:
        title = next((s.path[-1] for s in sections if s.path), "")
    if len(sections) == 1 and not sections[0].path:
        sections = []
    return Extracted("\n\n".join(parts), title, tuple(sections))
