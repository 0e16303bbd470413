"""The page-text cleaning done character by character (`tools.extract.pdf._clean_located`, `tools.extract.located`):
the same text as the plain string edits, each character with its source's box."""

from __future__ import annotations

import random

import numpy as np
import pytest

from tools.extract.pdf import _clean, _clean_located


def _boxes(n: int) -> np.ndarray:
    """Box i is (i, i, i + 1, i + 1): a character's source can be read back from its box."""
    i = np.arange(n, dtype=np.float32)[:, None]
    return np.hstack([i, i, i + 1, i + 1])


def _sources(boxes: np.ndarray) -> list[int]:
    return [-1 if np.isnan(row[0]) else int(row[0]) for row in boxes]


@pytest.mark.parametrize(
    "raw",
    [
        "",
        "plain",
        "  lead and trail  \r\n",
        "hy\ufffe\r\nphen and lone\ufffe and \x02 gone",
        "the o\ufb03ce \ufb02ow",
        "a  \r\n\r\n\r\n\r\nb \t\r\nc\rd",
        "\r\n\r\n  x  \r\n",
    ],
)
def test_cleaned_text_is_the_plain_cleaning(raw: str) -> None:
    text, boxes = _clean_located(raw, _boxes(len(raw)))
    assert text == _clean(raw)
    assert boxes.shape == (len(text), 4) and boxes.dtype == np.float32


def test_random_page_texts_clean_the_same() -> None:
    alphabet = ["a", "b", " ", "\t", "\r", "\n", "\r\n", "\ufffe", "\ufffe\r\n", "\x02", "\ufb00", "\ufb01", "\u00a0"]
    rng = random.Random(7)
    for _ in range(2000):
        raw = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))
        text, boxes = _clean_located(raw, _boxes(len(raw)))
        assert text == _clean(raw), repr(raw)
        for char, source in zip(text, _sources(boxes), strict=True):
            assert source == -1 or raw[source] == char or "\ufb00" <= raw[source] <= "\ufb06" or raw[source] == "\r"


def test_each_kept_character_keeps_its_own_box() -> None:
    raw = "ab\ufffe\r\ncd  \r\nef"
    text, boxes = _clean_located(raw, _boxes(len(raw)))
    assert text == "abcd\nef"
    assert _sources(boxes) == [0, 1, 5, 6, 10, 11, 12]


def test_ligature_letters_share_its_box_and_generated_breaks_have_none() -> None:
    raw = "o\ufb03ce\r\nx"
    boxes = _boxes(len(raw))
    boxes[4:6] = np.nan  # PDFium's generated line break
    text, out = _clean_located(raw, boxes)
    assert text == "office\nx"
    assert _sources(out) == [0, 1, 1, 1, 2, 3, -1, 6]


def test_boxes_of_another_length_are_refused() -> None:
    with pytest.raises(ValueError, match="3 boxes for 2 characters"):
        _clean_located("ab", _boxes(3))
