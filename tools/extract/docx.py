"""DOCX: headings, paragraphs and tables in document order, read from the WordprocessingML that `python-docx` opens.

A paragraph styled `Heading 1`..`Heading 9` (or `Title`, level 1) starts a section; a table becomes one block with a
row per line and cells separated by ` | `. The title is the core property `title` when set, else the first heading.

The text is the document as it reads with every tracked change accepted (ECMA-376 Part 1, §17.13.5): inserted runs
(`w:ins`, `w:moveTo`) are read, deleted ones (`w:delText` in `w:del` / `w:moveFrom`) are not. Content controls
(`w:sdt`, §17.5.2) are read for their content, at body, table, row, cell and run level. A table cell is read whole,
its nested tables included (their cells joined by ` | `, on the cell's line), once: a cell spanning grid columns
(`w:gridSpan`) is one cell, and the continuation of a vertically merged cell (`w:vMerge` without `restart`,
§17.4.85) is empty, so merged text is not repeated. Of alternative content (`mc:AlternateContent`), only the choice
is read, not its fallback copy. A text box's lines are read on lines of their own; a non-breaking hyphen is a hyphen
and an optional (soft) hyphen is left out.
"""

from __future__ import annotations

import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docx
from docx.opc.exceptions import PackageNotFoundError
from docx.oxml.ns import qn
from docx.text.paragraph import Paragraph

from tools.extract.base import Extracted, ExtractError
from tools.extract.blocks import Block, from_blocks

_P, _TBL, _SDT, _SDT_CONTENT = qn("w:p"), qn("w:tbl"), qn("w:sdt"), qn("w:sdtContent")
_TR, _TC, _T, _TAB, _BR, _CR = qn("w:tr"), qn("w:tc"), qn("w:t"), qn("w:tab"), qn("w:br"), qn("w:cr")
_TC_PR, _V_MERGE = qn("w:tcPr"), qn("w:vMerge")
_NO_BREAK_HYPHEN, _SOFT_HYPHEN, _PTAB, _TEXT_BOX = (
    qn("w:noBreakHyphen"),
    qn("w:softHyphen"),
    qn("w:ptab"),
    qn("w:txbxContent"),
)
_SKIPPED = frozenset(
    {
        qn("w:del"),  # a tracked deletion (its text is `w:delText`; the runs are skipped whole)
        qn("w:moveFrom"),  # the old place of moved text
        qn("w:pPr"),  # paragraph properties (the paragraph mark's revision marks, no text)
        qn("w:rPr"),
        "{http://schemas.openxmlformats.org/markup-compatibility/2006}Fallback",  # a copy of the choice
    }
)


def _level(paragraph: Paragraph) -> int:
    style = paragraph.style.name if paragraph.style is not None else ""
    if style == "Title":
        return 1
    if style.startswith("Heading "):
        number = style.removeprefix("Heading ").strip()
        return int(number) if number.isdigit() else 0
    return 0


def _paragraph_text(p: Any) -> str:
    """The text of a `w:p` element as it reads with tracked changes accepted (module docstring): its runs in
    order, inside insertions, hyperlinks, fields, smart tags and content controls, tabs as tabs and breaks as line
    breaks."""
    parts: list[str] = []

    def walk(element: Any) -> None:
        for child in element:
            tag = child.tag
            if tag in _SKIPPED:
                continue
            if tag == _T:
                parts.append(child.text or "")
            elif tag in (_TAB, _PTAB):
                parts.append("\t")
            elif tag in (_BR, _CR):
                parts.append("\n")
            elif tag == _NO_BREAK_HYPHEN:  # Word's non-breaking hyphen: COVID-19 stays one word
                parts.append("-")
            elif tag == _SOFT_HYPHEN:  # an optional hyphen, shown only at a line end
                continue
            elif tag == _TEXT_BOX:  # a text box anchored in the paragraph: its own lines, not glued to the text
                lines = [_paragraph_text(item) if item.tag == _P else _table_text(item) for item in _content(child)]
                parts.append("\n" + "\n".join(line for line in lines if line.strip()) + "\n")
            else:
                walk(child)

    walk(p)
    return "".join(parts)


def _children(element: Any, tags: tuple[str, ...]) -> Iterator[Any]:
    """The children of `element` with one of `tags`, those inside content controls (`w:sdt`) included."""
    for child in element:
        if child.tag in tags:
            yield child
        elif child.tag == _SDT:
            content = child.find(_SDT_CONTENT)
            if content is not None:
                yield from _children(content, tags)


def _content(element: Any) -> Iterator[Any]:
    """The block-level children (`w:p`, `w:tbl`) of a body, cell or content control, content controls opened."""
    return _children(element, (_P, _TBL))


def _rows(tbl: Any) -> Iterator[Any]:
    """The `w:tr` rows of a table, rows inside content controls included."""
    return _children(tbl, (_TR,))


def _cells(tr: Any) -> Iterator[Any]:
    """The `w:tc` cells of a row, cells inside content controls included."""
    return _children(tr, (_TC,))


def _merged_continuation(tc: Any) -> bool:
    """Whether `tc` continues a vertically merged cell above it (its text is the first cell's)."""
    properties = tc.find(_TC_PR)
    merge = None if properties is None else properties.find(_V_MERGE)
    return merge is not None and merge.get(qn("w:val"), "continue") != "restart"


def _cell_text(tc: Any) -> str:
    """A cell's text on one line: its paragraphs, and its nested tables' rows, joined by spaces."""
    if _merged_continuation(tc):
        return ""
    parts = [_paragraph_text(item) if item.tag == _P else _table_text(item) for item in _content(tc)]
    return " ".join(" ".join(parts).split())


def _table_text(tbl: Any) -> str:
    """A table as one row per line, cells joined by ` | `."""
    return "\n".join(" | ".join(_cell_text(tc) for tc in _cells(tr)) for tr in _rows(tbl))


def extract_docx(path: Path) -> Extracted:
    """Headings, paragraphs and tables of the Word document `path` (module docstring).

    Raises:
        ExtractError: not a readable DOCX (corrupt ZIP, missing parts, or an encrypted document).
    """
    try:
        document = docx.Document(str(path))
    except (PackageNotFoundError, zipfile.BadZipFile, KeyError, ValueError) as exc:
        raise ExtractError(f"{path}: not a readable DOCX ({exc}); the file is corrupt or encrypted") from None
    body = document.element.body
    blocks: list[Block] = []
    for item in _content(body):
        if item.tag == _P:
            blocks.append(Block(_level(Paragraph(item, document)), _paragraph_text(item)))
        else:
            blocks.append(Block(0, _table_text(item)))
    title = (document.core_properties.title or "").strip()
    return from_blocks(blocks, title)
