"""Where a passage stands on its pages: the boxes of a span of a paged document's text (`tools.extract.Layout`) merged
into one rectangle per text line, the form a chunk's metadata stores (`"boxes"`) and a page render highlights.

A line is a run of consecutive characters (in text order) on one page whose boxes overlap vertically by at least half
the smaller one's height; whitespace and characters without a box (page 0: the blank line between pages, generated
line breaks) are left out and do not break a line. Coordinates are PDF points, origin at the page's bottom left,
rounded outwards to 0.1 pt so that the rectangle still covers every character it was merged from.
"""

from __future__ import annotations

import math

import numpy as np

from tools.extract import Layout

LineBox = list[float]
"""`[page, left, bottom, right, top]`: the 1-based page, then the rectangle in PDF points (page space, origin at the
bottom left)."""

_OVERLAP = 0.5
"""Two characters are on one line when their boxes overlap vertically by this share of the lower box's height."""


def _down(value: float) -> float:
    return math.floor(value * 10 + 1e-6) / 10


def _up(value: float) -> float:
    return math.ceil(value * 10 - 1e-6) / 10


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
    keep = (pages > 0) & visible & np.isfinite(boxes).all(axis=1)
    pages, boxes = pages[keep], boxes[keep]
    if not len(pages):
        return []
    left = np.minimum(boxes[:, 0], boxes[:, 2])
    right = np.maximum(boxes[:, 0], boxes[:, 2])
    bottom = np.minimum(boxes[:, 1], boxes[:, 3])
    top = np.maximum(boxes[:, 1], boxes[:, 3])
    overlap = np.minimum(top[1:], top[:-1]) - np.maximum(bottom[1:], bottom[:-1])
    lower = np.minimum(top[1:] - bottom[1:], top[:-1] - bottom[:-1])
    same_line = (pages[1:] == pages[:-1]) & (overlap >= _OVERLAP * lower) & (overlap > 0)
    starts = np.flatnonzero(np.concatenate([[True], ~same_line]))
    return [
        [int(page), _down(float(lo)), _down(float(bo)), _up(float(ri)), _up(float(to))]
        for page, lo, bo, ri, to in zip(
            pages[starts],
            np.minimum.reduceat(left, starts),
            np.minimum.reduceat(bottom, starts),
            np.maximum.reduceat(right, starts),
            np.maximum.reduceat(top, starts),
            strict=True,
        )
    ]
