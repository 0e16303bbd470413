"""HTML: the main content with `trafilatura` (navigation, headers, footers, ads and scripts removed), headings kept
as sections.

trafilatura returns the main content as XML (`<head rend="h2">`, `<p>`, `<list>`, `<table>`, `<code>`), read here
into blocks. The title is the page's metadata title (`<title>`, OpenGraph), else its first heading.
"""

from __future__ import annotations

from pathlib import Path

import trafilatura
from lxml import etree

from tools.extract.base import Extracted, ExtractError, tidy
from tools.extract.blocks import Block, from_blocks
from tools.extract.encoding import decode_html


def _text(element: etree._Element) -> str:
    return " ".join("".join(element.itertext()).split())


def _blocks(main: etree._Element) -> list[Block]:
    blocks: list[Block] = []
    for element in main:
        tag = element.tag
        if tag == "head":
            rend = str(element.get("rend", "h2"))
            level = int(rend[1:]) if rend[1:].isdigit() else 2
            blocks.append(Block(level, _text(element)))
        elif tag == "list":
            blocks.append(Block(0, "\n".join(_text(item) for item in element if item.tag == "item")))
        elif tag == "table":
            rows = [" | ".join(_text(cell) for cell in row) for row in element if row.tag == "row"]
            blocks.append(Block(0, "\n".join(rows)))
        elif tag == "code":
            blocks.append(Block(0, tidy("".join(element.itertext()))))
        else:
            blocks.append(Block(0, _text(element)))
    return blocks


def extract_html(path: Path, data: bytes) -> Extracted:
    """The main content of the HTML page `data` (read from `path`), decoded by `tools.extract.encoding.decode_html`
    (byte order mark, `<meta charset>`, detection; a page its declaration does not read is read as detected, with a
    WARNING naming `path`).

    Raises:
        ExtractError: no main content (a page of scripts or styles only, or nothing readable).
    """
    page = decode_html(data, str(path))  # trafilatura's own guess ignores the page's `<meta charset>`
    xml = trafilatura.extract(
        page,
        output_format="xml",
        include_comments=False,
        include_tables=True,
        include_formatting=True,
        favor_recall=True,
    )
    main = None
    if xml:
        main = etree.fromstring(xml.encode("utf-8")).find("main")
    blocks = _blocks(main) if main is not None else []
    if not any(b.text.strip() for b in blocks):
        raise ExtractError(f"{path}: the HTML page has no readable main content (only scripts, styles or markup)")
    metadata = trafilatura.extract_metadata(page)
    title = (metadata.title or "").strip() if metadata is not None else ""
    return from_blocks(blocks, title)
