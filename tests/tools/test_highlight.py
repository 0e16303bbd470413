"""A span's character boxes merged into one rectangle per text line (`tools.highlight.line_boxes`)."""

from __future__ import annotations

import numpy as np
import pytest

from tools.extract import Layout
from tools.highlight import line_boxes


def _layout(rows: list[tuple[int, float, float, float, float]]) -> Layout:
    pages = np.array([r[0] for r in rows], dtype=np.int32)
    boxes = np.array([r[1:] for r in rows], dtype=np.float32).reshape(-1, 4)
    boxes[pages == 0] = np.nan
    return Layout(pages, boxes, ((612.0, 792.0), (612.0, 792.0)))


NAN = float("nan")
TEXT = "ab c\nde\n\nfg"
ROWS = [
    (1, 10.0, 700.0, 15.0, 712.0),  # a
    (1, 15.0, 701.0, 20.04, 711.0),  # b
    (1, 20.0, 700.0, 22.0, 700.0),  # space, a zero-height box: left out
    (1, 22.0, 700.0, 27.0, 712.0),  # c
    (0, NAN, NAN, NAN, NAN),  # generated line break
    (1, 10.0, 686.0, 15.0, 698.0),  # d (next line)
    (1, 15.0, 686.0, 20.0, 698.0),  # e
    (0, NAN, NAN, NAN, NAN),
    (0, NAN, NAN, NAN, NAN),
    (2, 50.0, 100.0, 55.0, 110.0),  # f (next page)
    (2, 55.0, 100.0, 60.0, 110.0),  # g
]


def test_one_rectangle_per_line_and_page() -> None:
    assert line_boxes(TEXT, _layout(ROWS), 0, len(TEXT)) == [
        [1, 10.0, 700.0, 27.0, 712.0],
        [1, 10.0, 686.0, 20.0, 698.0],
        [2, 50.0, 100.0, 60.0, 110.0],
    ]


def test_rectangles_cover_their_characters_after_rounding() -> None:
    rows = [(1, 10.04, 700.06, 15.01, 711.99), (1, 15.01, 700.01, 20.99, 712.01)]
    ((_, left, bottom, right, top),) = line_boxes("ab", _layout(rows), 0, 2)
    assert (left, bottom, right, top) == (10.0, 700.0, 21.0, 712.1)


def test_a_span_within_a_line_gets_its_own_part() -> None:
    assert line_boxes(TEXT, _layout(ROWS), 1, 4) == [[1, 15.0, 700.0, 27.0, 712.0]]


def test_a_span_without_boxes_has_none() -> None:
    assert line_boxes(TEXT, _layout(ROWS), 7, 9) == []
    assert line_boxes(TEXT, _layout(ROWS), 3, 3) == []


def test_the_next_line_touching_this_one_starts_a_rectangle() -> None:
    rows = [(1, 10.0, 700.0, 15.0, 712.0), (1, 10.0, 689.0, 15.0, 701.0)]
    assert len(line_boxes("xy", _layout(rows), 0, 2)) == 2


def test_a_quote_mark_and_a_comma_join_the_line_of_their_letters() -> None:
    rows = [(1, 10.0, 661.8, 15.0, 668.8), (1, 15.0, 666.0, 16.0, 668.8), (1, 16.0, 660.6, 17.5, 663.1)]
    assert line_boxes('a",', _layout(rows), 0, 3) == [[1, 10.0, 660.6, 17.5, 668.8]]


@pytest.mark.parametrize(("start", "end"), [(-1, 2), (3, 2), (0, 99)])
def test_a_span_outside_the_text_is_refused(start: int, end: int) -> None:
    with pytest.raises(ValueError, match="outside a text"):
        line_boxes(TEXT, _layout(ROWS), start, end)


def test_a_layout_of_another_text_is_refused() -> None:
    with pytest.raises(ValueError, match="a layout of 11 characters for a text of 3"):
        line_boxes("abc", _layout(ROWS), 0, 1)
