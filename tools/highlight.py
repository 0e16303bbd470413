"""Where a passage stands on its pages: the boxes of a span of a paged document's text (`tools.extract.Layout`) merged
into one rectangle per text line, the form a chunk's metadata stores (`"boxes"`) and a page render highlights.

A line is a run of consecutive characters (in text order) on one page, each overlapping the line so far vertically by
at least a third of the smaller one's height (a quote mark high up and a comma low down both join the line of letters
they stand in); whitespace, characters without a box (page 0: the blank line between pages, generated line breaks)
and boxes of no height are left out and do not break a line. Coordinates are PDF points, origin at the page's bottom
left, rounded outwards to 0.1 pt so that the rectangle still covers every character it was merged from (to within
float32's precision of the stored boxes).
"""

from __future__ import annotations

import math

import numpy as np

from tools.extract import Layout

LineBox = list[float]
"""`[page, left, bottom, right, top]`: the 1-based page, then the rectangle in PDF points (page space, origin at the
bottom left)."""

_OVERLAP = 0.3
"""A character joins a line when their vertical extents overlap by this share of the smaller one's height."""


_EPSILON = 1e-3
"""Slack of the outward rounding, in tenths of a point: a float32 box edge stored as 660.59998 is 660.6."""


def _down(value: float) -> float:
    return math.floor(value * 10 + _EPSILON) / 10


def _up(value: float) -> float:
    return math.ceil(value * 10 - _EPSILON) / 10


def line_boxes(text: str, layout: Layout, start: int, end: int) -> list[LineBox]:
    """One rectangle per text line of `text[start:end]` (offsets into the text `layout` is aligned with), in text
    order: `[[page, left, bottom, right, top], ...]`; empty when no character of the span has a box.

    Raises:
        ValueError: `start`/`end` outside `text`, or `layout` not aligned with `text` (another length).
    """
    if len(layout.pages) != len(text):
        raise ValueError(f"a layout of {len(layout.pages)} characters for a text of {len(text)}")
    if not 0 <= start <= end <= len(text):
        raise ValueError(f"span [{start}, {end}) outside a text of {len(text)} characters")
    pages = layout.pages[start:end]
    boxes = layout.boxes[start:end].astype(np.float64)
    visible = np.fromiter((not ch.isspace() for ch in text[start:end]), dtype=bool, count=end - start)
    keep = (pages > 0) & visible & np.isfinite(boxes).all(axis=1) & (boxes[:, 1] != boxes[:, 3])
    pages, boxes = pages[keep], boxes[keep]
    if not len(pages):
        return []
    left = np.minimum(boxes[:, 0], boxes[:, 2]).tolist()
    right = np.maximum(boxes[:, 0], boxes[:, 2]).tolist()
    bottom = np.minimum(boxes[:, 1], boxes[:, 3]).tolist()
    top = np.maximum(boxes[:, 1], boxes[:, 3]).tolist()
    lines: list[list[float]] = []
    line: list[float] = []
    for page, lo, bo, ri, to in zip(pages.tolist(), left, bottom, right, top, strict=True):
        if line and page == line[0]:
            overlap = min(to, line[4]) - max(bo, line[2])
            if overlap > 0 and overlap >= _OVERLAP * min(to - bo, line[4] - line[2]):
                line[1:] = [min(lo, line[1]), min(bo, line[2]), max(ri, line[3]), max(to, line[4])]
                continue
        line = [page, lo, bo, ri, to]
        lines.append(line)
    return [[int(pg), _down(lo), _down(bo), _up(ri), _up(to)] for pg, lo, bo, ri, to in lines]


def sentence_boxes(chunk_text: str, boxes: list[LineBox], start: int, end: int) -> list[LineBox]:
    """The lines of a chunk's stored `boxes` that hold `chunk_text[start:end]` (a sentence of the chunk).

    A chunk's metadata keeps one rectangle per text line in text order (`line_boxes`), not which characters each
    line holds, so the lines are located by share: the chunk's non-space characters are laid along its lines in
    proportion to their widths, and a line is kept when at least a quarter of its share, or half of the sentence's,
    falls inside the sentence's. Exact for lines of even character width; a line's neighbour can be included
    when widths vary. The whole chunk's lines when the chunk has no visible character.

    Raises:
        ValueError: `start`/`end` outside `chunk_text`.
    """
    if not 0 <= start <= end <= len(chunk_text):
        raise ValueError(f"span [{start}, {end}) outside a chunk of {len(chunk_text)} characters")
    if not boxes:
        return []
    visible = np.cumsum([0, *(not ch.isspace() for ch in chunk_text)])
    total = int(visible[-1])
    if total == 0:
        return list(boxes)
    a, b = visible[start] / total, visible[end] / total
    widths = np.array([max(abs(box[3] - box[1]), 1e-6) for box in boxes], dtype=np.float64)
    edges = np.concatenate([[0.0], np.cumsum(widths) / widths.sum()])
    kept: list[LineBox] = []
    for i, box in enumerate(boxes):
        lo, hi = edges[i], edges[i + 1]
        overlap = max(0.0, min(hi, b) - max(lo, a))
        if overlap > 0 and (overlap >= 0.25 * (hi - lo) or overlap >= 0.5 * (b - a)):
            kept.append(box)
    return kept
