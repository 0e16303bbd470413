"""Skew and quarter turns of page images (tools/extract/orientation.py): the skew found by the projection profile on
drawn text lines, and boxes read on a turned image mapped back onto the page image. Pure numpy and Pillow; no
Tesseract."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image, ImageDraw, ImageFont

from tools.extract.orientation import boxes_back, estimate_dpi, is_blank, skew_angle, turned

FONT = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"


def text_page() -> Image.Image:
    """Five level lines of dark text on a white page, 1275x900 px (a third of A4 at 150 dpi)."""
    image = Image.new("L", (1275, 900), 255)
    draw = ImageDraw.Draw(image)
    try:
        font: ImageFont.FreeTypeFont | ImageFont.ImageFont = ImageFont.truetype(FONT, 32)
    except OSError:
        font = ImageFont.load_default(32)
    for i in range(5):
        draw.text((80, 80 + i * 70), "The zebrafish tank needs clean water every week.", fill=0, font=font)
    return image


@pytest.mark.parametrize("tilt", [7.0, -4.0, 12.0])
def test_the_skew_of_tilted_lines_is_found_and_levels_them(tilt: float) -> None:
    page = turned(text_page(), tilt)  # lines rising (or falling) by `tilt` degrees
    assert skew_angle(page) == pytest.approx(-tilt, abs=0.3)


def test_a_level_page_a_blank_page_and_a_slight_skew_are_left_alone() -> None:
    assert skew_angle(text_page()) == 0.0
    assert skew_angle(Image.new("L", (600, 400), 255)) == 0.0
    assert skew_angle(turned(text_page(), 0.3)) == 0.0  # below SKEW_MIN_DEG


def dark_box(image: Image.Image) -> tuple[float, float, float, float]:
    """(left, top, right, bottom) pixel bounds of the dark pixels of `image`."""
    ys, xs = np.nonzero(np.asarray(image) < 128)
    return float(xs.min()), float(ys.min()), float(xs.max() + 1), float(ys.max() + 1)


@pytest.mark.parametrize("degrees", [90.0, -90.0, 180.0, 7.0])
def test_a_box_read_on_the_turned_image_maps_back_onto_the_page_image(degrees: float) -> None:
    page = Image.new("L", (400, 300), 255)
    ImageDraw.Draw(page).rectangle((50, 40, 149, 79), fill=0)  # 100 x 40 px at (50, 40)
    seen = np.array([dark_box(turned(page, degrees))], np.float64)
    back = boxes_back(seen, degrees, page.size)[0]
    # a quarter turn maps the box exactly (to a pixel); a skewed box's bounds contain it
    tolerance = 2.0 if degrees % 90 == 0 else 13.0  # 7 degrees: the bounds of a bound grow by about h·sin and w·sin
    assert back[0] <= 50 + 1 and back[1] <= 40 + 1 and back[2] >= 150 - 1 and back[3] >= 80 - 1
    assert np.allclose(back, [50, 40, 150, 80], atol=tolerance)


def test_no_turn_leaves_boxes_as_they_are() -> None:
    boxes = np.array([[1.0, 2.0, 3.0, 4.0]])
    assert boxes_back(boxes, 0.0, (10, 10)) is boxes


def printed_page(dpi: int) -> Image.Image:
    """A Letter page of twenty lines of 11 pt text at 13.2 pt leading, drawn at `dpi`."""
    k = dpi / 72
    image = Image.new("L", (int(8.5 * dpi), int(11 * dpi)), 255)
    draw = ImageDraw.Draw(image)
    font = ImageFont.truetype(FONT, int(11 * k))
    for i in range(20):
        draw.text((int(72 * k), int(72 * k + i * 13.2 * k)), "The zebrafish tank needs clean water.", fill=0, font=font)
    return image


@pytest.mark.parametrize("dpi", [100, 150, 300])
def test_a_resolution_is_read_off_the_line_pitch_of_body_text(dpi: int) -> None:
    assert estimate_dpi(printed_page(dpi)) == pytest.approx(dpi, rel=0.1)


def test_without_lines_the_resolution_reads_the_longer_side_as_a_letter_page_and_is_clamped() -> None:
    assert estimate_dpi(Image.new("L", (2550, 3300), 255)) == pytest.approx(300)
    assert estimate_dpi(Image.new("L", (100, 100), 255)) == 72.0  # clamped to the lowest plausible
    assert estimate_dpi(Image.new("L", (30000, 1000), 255)) == 600.0


def test_a_blank_page_is_blank_and_a_page_of_text_is_not() -> None:
    assert is_blank(Image.new("L", (1200, 1600), 255))
    assert not is_blank(printed_page(100))
