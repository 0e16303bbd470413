"""Pages joined into one document: the text, a `Section` per page, and the `Layout` when every page's character
boxes are known."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from tools.extract.base import Layout, Section

PAGE_JOIN = "\n\n"
"""Between the texts of two pages (pages without text are left out)."""


def join_pages(texts: Sequence[str]) -> tuple[str, tuple[Section, ...]]:
    """The pages' texts joined by `PAGE_JOIN`, and one `Section(start, page=n)` (1-based) per page with text."""
    parts: list[str] = []
    sections: list[Section] = []
    offset = 0
    for number, text in enumerate(texts, 1):
        if not text:
            continue
        if parts:
            offset += len(PAGE_JOIN)
        sections.append(Section(offset, page=number))
        parts.append(text)
        offset += len(text)
    return PAGE_JOIN.join(parts), tuple(sections)


def page_layout(
    texts: Sequence[str],
    boxes: Sequence[npt.NDArray[np.float32] | None],
    sizes: Sequence[tuple[float, float] | None],
) -> Layout | None:
    """The `Layout` of the text `join_pages(texts)` gives, from each page's `(len(text), 4)` character boxes in
    points and its `(width, height)` in points; None when a page with text has no boxes or a page no size (a layout
    is all or nothing).

    Raises:
        ValueError: a page's boxes are not `(len(text), 4)`.
    """
    if any(s is None for s in sizes) or any(t and b is None for t, b in zip(texts, boxes, strict=True)):
        return None
    pages: list[npt.NDArray[np.int32]] = []
    rows: list[npt.NDArray[np.float32]] = []
    for number, (text, page_boxes) in enumerate(zip(texts, boxes, strict=True), 1):
        if not text or page_boxes is None:
            continue
        if page_boxes.shape != (len(text), 4):
            raise ValueError(f"page {number}: boxes of shape {page_boxes.shape}; expected ({len(text)}, 4)")
        if rows:
            pages.append(np.zeros(len(PAGE_JOIN), np.int32))
            rows.append(np.full((len(PAGE_JOIN), 4), np.nan, np.float32))
        on_page = np.where(np.isnan(page_boxes[:, 0]), 0, number).astype(np.int32)
        pages.append(on_page)
        rows.append(page_boxes.astype(np.float32, copy=False))
    known = tuple(s for s in sizes if s is not None)
    if not rows:
        return Layout(np.zeros(0, np.int32), np.empty((0, 4), np.float32), known)
    return Layout(np.concatenate(pages), np.concatenate(rows), known)
