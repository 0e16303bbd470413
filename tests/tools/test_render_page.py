"""`tools.render_page` on image originals: frame n is page n, turned upright as its EXIF orientation says, scaled to
`scale` pixels per point of the image's own dpi, with boxes in those points (as OCR gave them) highlighted where they
lie; refusals name the page count or the cause, not the file. A PDF page shown turned (`/Rotate`, printed by headless
Chromium and turned by pypdf) is highlighted where its words are shown, as the same page upright is."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tests.document_files import TABLE_HTML, print_pdf, turned_pdf
from tools import render_page
from tools.extract.pdf import extract_pdf
from tools.highlight import line_boxes
from tools.render_page import RenderError, render_here, render_image_here

DPI = 144
"""The test images' resolution: two pixels per point."""


def pixels(png: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(png)).convert("RGB")).astype(int)


def test_an_image_page_is_its_frame_at_the_scale_with_its_boxes_highlighted(tmp_path: Path) -> None:
    tiff = tmp_path / "scan.tiff"
    frames = [Image.new("RGB", (288, 144), "white"), Image.new("RGB", (288, 144), (0, 0, 255))]
    frames[0].save(tiff, save_all=True, append_images=frames[1:], dpi=(DPI, DPI))  # 144 x 72 points each
    plain = render_image_here(str(tiff), 1, [], 2.0)
    assert (plain.width, plain.height, plain.pages) == (288, 144, 2)
    box = (10.0, 10.0, 50.0, 30.0)  # left, bottom, right, top in points, origin bottom left
    marked = pixels(render_image_here(str(tiff), 1, [box], 2.0).png)
    changed = (marked != pixels(plain.png)).any(axis=2)
    # x 10..50 pt -> 20..100 px; y from the top: (72 - 30) * 2 = 84 .. (72 - 10) * 2 = 124 px
    assert changed[86:122, 22:98].all() and marked[86:122, 22:98, 2].mean() < 200  # tinted yellow: less blue
    outside = np.ones_like(changed)
    outside[80:129, 16:105] = False
    assert not changed[outside].any()
    second = pixels(render_image_here(str(tiff), 2, [], 0.5).png)
    assert second.shape == (36, 72, 3) and (second[..., 2] > 200).all() and (second[..., 0] < 50).all()


def test_a_sideways_photo_is_shown_upright_as_its_exif_orientation_says(tmp_path: Path) -> None:
    upright = Image.new("RGB", (200, 100), "white")
    upright.paste((255, 0, 0), (0, 0, 20, 20))  # a red mark at the top left
    exif = Image.Exif()
    exif[0x0112] = 6
    jpeg = tmp_path / "photo.jpg"
    upright.rotate(90, expand=True).save(jpeg, dpi=(72, 72), exif=exif, quality=95)
    shown = pixels(render_image_here(str(jpeg), 1, [], 1.0).png)
    assert shown.shape == (100, 200, 3)
    assert shown[5:15, 5:15, 0].mean() > 200 and shown[5:15, 5:15, 1].mean() < 80  # red, top left


def test_an_image_refusal_names_the_page_count_or_the_cause_not_the_file(tmp_path: Path) -> None:
    png = tmp_path / "one.png"
    Image.new("L", (40, 30), 255).save(png)
    with pytest.raises(RenderError, match=r"page 2 is not in the document: it has 1 page\(s\)") as missing:
        render_image_here(str(png), 2, [], 1.0)
    assert missing.value.reason == "no_page"
    torn = tmp_path / "torn.png"
    torn.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)))
    with pytest.raises(RenderError, match="not an image Pillow can read") as unreadable:
        render_image_here(str(torn), 1, [], 1.0)
    assert unreadable.value.reason == "unreadable" and str(tmp_path) not in str(unreadable.value)


def test_an_image_page_renders_in_the_render_worker_process(tmp_path: Path) -> None:
    png = tmp_path / "one.png"
    Image.new("L", (40, 30), 255).save(png, dpi=(DPI, DPI))
    try:
        rendered = render_page.render_page(png, 1, scale=4.0, image=True)
    finally:
        render_page.close()
    assert (rendered.width, rendered.height) == (80, 60)


def highlighted(pdf: Path, word: str) -> tuple[np.ndarray, np.ndarray]:
    """The page `pdf` rendered at one pixel per point (grey levels), and where highlighting the line boxes of the
    first `word` of its extracted text changes it."""
    extracted = extract_pdf(pdf)
    assert extracted.layout is not None
    at = extracted.text.index(word)
    lines = line_boxes(extracted.text, extracted.layout, at, at + len(word))
    boxes = [(left, bottom, right, top) for _, left, bottom, right, top in lines]
    plain = pixels(render_here(str(pdf), 1, [], 1.0).png)
    marked = pixels(render_here(str(pdf), 1, boxes, 1.0).png)
    return plain.mean(axis=2), (marked != plain).any(axis=2)


def extent(mask: np.ndarray) -> tuple[int, int, int, int]:
    """The pixel rectangle `(x0, y0, x1, y1)` around the true pixels of `mask`."""
    ys, xs = np.nonzero(mask)
    return int(xs.min()), int(ys.min()), int(xs.max()), int(ys.max())


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return print_pdf(TABLE_HTML, tmp_path_factory.mktemp("render_turned") / "table.pdf")


@pytest.mark.parametrize("rotate", [90, 180, 270])
@pytest.mark.parametrize("upright", [True, False])
def test_a_turned_pdf_page_is_highlighted_over_its_word(
    table: Path, tmp_path: Path, rotate: int, upright: bool
) -> None:
    """Shown upright (its content stored turned the other way), the turned page's highlight is the upright page's;
    shown turned, it is the upright page's highlight turned with the page."""
    plain, mask = highlighted(table, "pelican")
    x0, y0, x1, y1 = extent(mask)
    assert 20 < x1 - x0 < 80 and 5 < y1 - y0 < 25  # one word's line
    assert (plain[y0 : y1 + 1, x0 : x1 + 1] < 128).sum() > 50  # over the word's dark letters
    shown, turned_mask = highlighted(turned_pdf(table, tmp_path / "turned.pdf", rotate, upright=upright), "pelican")
    quarters = 0 if upright else -rotate // 90  # np.rot90 turns counter-clockwise
    assert shown.shape == np.rot90(plain, quarters).shape
    want = extent(np.rot90(mask, quarters))
    assert extent(turned_mask) == pytest.approx(want, abs=1)
    tx0, ty0, tx1, ty1 = extent(turned_mask)
    assert (shown[ty0 : ty1 + 1, tx0 : tx1 + 1] < 128).sum() > 50
