"""`tools.render_page` on image originals: frame n is page n, turned upright as its EXIF orientation says, scaled to
`scale` pixels per point of the image's own dpi, with boxes in those points (as OCR gave them) highlighted where they
lie; refusals name the page count or the cause, not the file."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tools import render_page
from tools.render_page import RenderError, render_image_here

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
