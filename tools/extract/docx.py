"""DOCX: headings, paragraphs and tables in document order, with `python-docx`.

A paragraph styled `Heading 1`..`Heading 9` (or `Title`, level 1) starts a section; a table becomes one block with a
row per line and cells separated by ` | `. The title is the core property `title` when set, else the first heading.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import docx
from docx.opc.exceptions import PackageNotFoundError
from docx.table import Table
from docx.text.paragraph import Paragraph

from tools.extract.base import Extracted, ExtractError
from tools.extract.blocks import Block, from_blocks


def _level(paragraph: Paragraph) -> int:
    style = paragraph.style.name if paragraph.style is not None else ""
    if style == "Title":
        return 1
    if style.startswith("Heading "):
        number = style.removeprefix("Heading ").strip()
        return int(number) if number.isdigit() else 0
    return 0


def _table(table: Table) -> str:
    rows = []
    for row in table.rows:
        cells: list[str] = []
        for cell in row.cells:
            text = " ".join(cell.text.split())
            if not cells or cells[-1] != text:  # a merged cell repeats in every grid column it spans
                cells.append(text)
        rows.append(" | ".join(cells))
    return "\n".join(rows)


def extract_docx(path: Path) -> Extracted:
    """Headings, paragraphs and tables of the Word document `path`.

    Raises:
        ExtractError: not a readable DOCX (corrupt ZIP, missing parts, or an encrypted document).
    """
    try:
        document = docx.Document(str(path))
    except (PackageNotFoundError, zipfile.BadZipFile, KeyError, ValueError) as exc:
        raise ExtractError(f"{path}: not a readable DOCX ({exc}); the file is corrupt or encrypted") from None
    blocks: list[Block] = []
    for item in document.iter_inner_content():
        if isinstance(item, Paragraph):
            blocks.append(Block(_level(item), item.text))
        else:
            blocks.append(Block(0, _table(item)))
    title = (document.core_properties.title or "").strip()
    return from_blocks(blocks, title)
