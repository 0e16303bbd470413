"""OCR of scans by the real Tesseract: pages printed by headless Chromium, rasterised by PDFium and rebuilt by Pillow
as image-only PDFs (`evals.render_docs.scan_pdf`), and images written by Pillow. The text is found, each page keeps
its number, each character's box lies on its page, and the refusals (OCR off, tesseract missing, no text at all)
name the file and what to do. Pages are rendered at 150 dpi to keep each test to a second or two."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pypdf
import pypdfium2 as pdfium
import pytesseract
import pytest
from PIL import Image

from evals.render_docs import scan_pdf
from tests import external_tools
from tests.document_files import print_pdf
from tools.extract import Extracted, ExtractError, extract, image, ocr, sniff, sniff_bytes
from tools.extract.ocr import OcrOptions
from tools.extract.pages import join_pages, page_layout
from tools.extract.pdf import PdfExtractor, extract_here, extract_pdf
from tools.ingest.inputs import plan_inputs
from tools.ingest.readers import read_file_document

DPI = 150
OCR = OcrOptions(dpi=DPI, workers=2)
LIMIT = 10 * 1024 * 1024
SCAN_HTML = """<!doctype html><html><body style="font-family: 'DejaVu Sans'; font-size: 16pt">
<h1>Zebrafish husbandry</h1>
<p>The zebrafish tank needs clean water every week.</p>
<p>Quokkas live on small islands near the coast.</p>
<div style="break-before: page"></div>
<p>Numbats eat termites at dawn in the forest.</p>
</body></html>
"""
"""Two printed pages: `zebrafish` and `quokkas` on page 1, `numbats` on page 2."""


@pytest.fixture(scope="module")
def printed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    external_tools.tesseract()
    return print_pdf(SCAN_HTML, tmp_path_factory.mktemp("ocr") / "printed.pdf")


@pytest.fixture(scope="module")
def scanned(printed: Path) -> Path:
    return scan_pdf(printed, printed.with_name("scanned.pdf"), DPI)


def page_of(extracted: Extracted, word: str) -> int:
    """The page of the section holding the first occurrence of `word` (case-insensitive)."""
    at = extracted.text.lower().index(word)
    return [s.page for s in extracted.sections if s.start <= at][-1] or 0


def assert_boxes_on_their_pages(extracted: Extracted) -> None:
    layout = extracted.layout
    assert layout is not None
    assert layout.pages.shape == (len(extracted.text),) and layout.boxes.shape == (len(extracted.text), 4)
    placed = layout.pages > 0
    assert placed.sum() > len(extracted.text) // 2  # letters are placed; spaces and breaks are not
    assert np.isnan(layout.boxes[~placed]).all() and not np.isnan(layout.boxes[placed]).any()
    sizes = np.array(layout.page_sizes, np.float32)[layout.pages[placed] - 1]
    boxes = layout.boxes[placed]
    assert (boxes[:, 0] >= 0).all() and (boxes[:, 1] >= 0).all()
    assert (boxes[:, 2] <= sizes[:, 0]).all() and (boxes[:, 3] <= sizes[:, 1]).all()
    assert (boxes[:, 0] < boxes[:, 2]).all() and (boxes[:, 1] < boxes[:, 3]).all()
    for section in extracted.sections:  # each page's characters are in its section
        assert layout.pages[section.start] == section.page


def test_a_scanned_pdf_is_read_by_ocr_page_by_page_with_boxes(scanned: Path) -> None:
    assert not pdfium.PdfDocument(scanned)[0].get_textpage().get_text_range().strip()  # no text layer
    extracted = extract_pdf(scanned, OCR)  # in the PDF worker process
    text = extracted.text.lower()
    assert "zebrafish tank needs clean water" in text and "numbats eat termites" in text
    assert (extracted.pages, extracted.ocr_pages) == (2, 2) and extracted.ocr_s > 0
    assert [s.page for s in extracted.sections] == [1, 2]
    assert (page_of(extracted, "quokkas"), page_of(extracted, "numbats")) == (1, 2)
    assert_boxes_on_their_pages(extracted)
    layout = extracted.layout
    assert layout is not None
    heading, line = extracted.text.index("Zebrafish"), extracted.text.lower().index("numbats")
    assert layout.boxes[heading, 3] > 700 and layout.boxes[line, 3] > 700  # near the top: y runs upwards
    assert layout.page_sizes[0] == pytest.approx(pdfium.PdfDocument(scanned)[0].get_size(), abs=1)


def box_of(extracted: Extracted, word: str) -> npt.NDArray[np.float32]:
    """The box `(left, bottom, right, top)` in points around the first occurrence of `word` (case-insensitive)."""
    at = extracted.text.lower().index(word)
    assert extracted.layout is not None
    boxes = extracted.layout.boxes[at : at + len(word)]
    return np.array([boxes[:, 0].min(), boxes[:, 1].min(), boxes[:, 2].max(), boxes[:, 3].max()], np.float32)


def test_a_cropped_scan_s_boxes_are_in_page_space_and_a_turned_one_s_on_the_page_as_shown(
    scanned: Path, tmp_path: Path
) -> None:
    whole = extract_here(scanned, OCR)
    writer = pypdf.PdfWriter()
    writer.append(str(scanned))
    writer.pages[0].cropbox = pypdf.generic.RectangleObject((24, 72, 540, 720))
    writer.pages[1].rotate(90)
    changed = tmp_path / "cropped.pdf"
    writer.write(str(changed))
    cropped = extract_here(changed, OCR)
    assert "quokkas live on small islands" in cropped.text.lower() and "numbats" in cropped.text.lower()
    # the same glyphs on the same page: the same place in page space, whatever the crop box
    assert box_of(cropped, "quokkas") == pytest.approx(box_of(whole, "quokkas"), abs=2)
    layout = cropped.layout
    assert layout is not None and layout.page_sizes[0] == pytest.approx((516, 648))
    placed = layout.boxes[layout.pages == 1]
    assert (placed[:, [0, 2]] >= 24).all() and (placed[:, [0, 2]] <= 540).all()
    assert (placed[:, [1, 3]] >= 72).all() and (placed[:, [1, 3]] <= 720).all()
    # the page turned a quarter clockwise is read as shown, its boxes on the page as shown: x from page space's y,
    # y from the sheet's width less page space's x
    assert whole.layout is not None
    width, height = whole.layout.page_sizes[1]
    assert layout.page_sizes[1] == pytest.approx((height, width))
    left, bottom, right, top = box_of(whole, "numbats")
    assert box_of(cropped, "numbats") == pytest.approx((bottom, width - right, top, width - left), abs=3)


def test_ocr_progress_of_the_worker_process_is_logged_here(scanned: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="tools.extract")
    extractor = PdfExtractor()
    try:
        assert extractor.extract(scanned, OCR).ocr_pages == 2
    finally:
        extractor.close()  # the workers have exited and every record they sent is handled
    assert f"{scanned}: OCR 1/2 pages" in caplog.text and f"{scanned}: OCR 2/2 pages" in caplog.text
    progress = [r for r in caplog.records if "OCR" in r.getMessage()]
    assert progress and all(r.process != os.getpid() for r in progress)  # logged by the worker, handled here


def test_a_mixed_pdf_reads_the_text_page_and_ocrs_the_scanned_one(printed: Path, scanned: Path) -> None:
    writer = pypdf.PdfWriter()
    writer.append(str(printed), pages=[0])
    writer.append(str(scanned), pages=[1])
    mixed = printed.with_name("mixed.pdf")
    writer.write(str(mixed))
    extracted = extract_pdf(mixed, OCR)
    assert extracted.ocr_pages == 1 and [s.page for s in extracted.sections] == [1, 2]
    assert (page_of(extracted, "quokkas"), page_of(extracted, "numbats")) == (1, 2)
    layout = extracted.layout  # the text layer's boxes (PDFium) and the OCR'd page's (Tesseract's words) in one
    assert layout is not None
    for page in (1, 2):
        chars = layout.pages == page
        width, height = layout.page_sizes[page - 1]
        boxes = layout.boxes[chars]
        assert chars.any() and (boxes[:, [0, 2]] >= 0).all() and (boxes[:, [0, 2]] <= width).all()
        assert (boxes[:, [1, 3]] >= 0).all() and (boxes[:, [1, 3]] <= height).all()
    numbats = extracted.text.lower().index("numbats")
    assert layout.pages[numbats] == 2
    (document,) = [read_file_document(inp, LIMIT, OCR) for inp in plan_inputs([mixed])]
    assert document.ocr_pages == 1 and document.pages == 2


def test_a_png_is_a_document_of_one_page_in_points_at_its_dpi(scanned: Path, tmp_path: Path) -> None:
    image = pdfium.PdfDocument(scanned)[0].render(scale=DPI / 72, grayscale=True).to_pil()
    png = tmp_path / "page.png"
    image.save(png, dpi=(DPI, DPI))
    assert sniff(png) == "image" and sniff_bytes(png.read_bytes(), "upload.bin") == "image"
    extracted = extract(png, "image", LIMIT, OCR)
    assert "quokkas live on small islands" in extracted.text.lower()
    assert extracted.title == "Zebrafish husbandry" and extracted.pages == 1
    assert [s.page for s in extracted.sections] == [1]
    assert_boxes_on_their_pages(extracted)
    layout = extracted.layout
    assert layout is not None
    expected = (image.width * 72 / DPI, image.height * 72 / DPI)
    assert layout.page_sizes[0] == pytest.approx(expected, abs=0.5)  # PNG keeps whole pixels per metre


def test_a_sideways_phone_photo_is_read_upright_as_its_exif_orientation_says(scanned: Path, tmp_path: Path) -> None:
    upright = pdfium.PdfDocument(scanned)[0].render(scale=DPI / 72, grayscale=True).to_pil()
    stored = upright.rotate(90, expand=True)  # the pixels as a camera held sideways stores them
    exif = Image.Exif()
    exif[0x0112] = 6  # shown turned a quarter clockwise
    jpeg = tmp_path / "photo.jpg"
    stored.save(jpeg, dpi=(DPI, DPI), exif=exif, quality=95)
    extracted = extract(jpeg, "image", LIMIT, OCR)
    assert "quokkas live on small islands" in extracted.text.lower()
    assert extracted.layout is not None
    expected = (upright.width * 72 / DPI, upright.height * 72 / DPI)
    assert extracted.layout.page_sizes[0] == pytest.approx(expected, abs=0.5)  # the upright frame's size
    assert_boxes_on_their_pages(extracted)


def test_a_multi_page_tiff_is_one_document_of_one_page_per_frame(scanned: Path, tmp_path: Path) -> None:
    document = pdfium.PdfDocument(scanned)
    frames = [document[i].render(scale=DPI / 72, grayscale=True).to_pil() for i in range(2)]
    tiff = tmp_path / "scan.tiff"
    frames[0].save(tiff, save_all=True, append_images=frames[1:], dpi=(DPI, DPI))
    assert sniff(tiff) == "image"
    extracted = extract(tiff, "image", LIMIT, OCR)
    assert (extracted.pages, extracted.ocr_pages) == (2, 2)
    assert (page_of(extracted, "quokkas"), page_of(extracted, "numbats")) == (1, 2)
    assert_boxes_on_their_pages(extracted)


def test_with_ocr_off_a_scan_and_an_image_are_refused_naming_the_setting(scanned: Path, tmp_path: Path) -> None:
    off = OcrOptions(enabled=False)
    with pytest.raises(ExtractError, match=r"scanned\.pdf: no text layer .*OCR is off \(OCR=false\)"):
        extract_here(scanned, off)
    png = tmp_path / "page.png"
    Image.new("L", (200, 100), 255).save(png)
    with pytest.raises(ExtractError, match=r"page\.png: an image, .*OCR is off \(OCR=false\)"):
        extract(png, "image", LIMIT, off)


@pytest.mark.parametrize("degrees", [90, 180, 270, 7, -5])
def test_a_scan_turned_a_quarter_upside_down_or_skewed_is_read_upright(
    scanned: Path, tmp_path: Path, degrees: int, caplog: pytest.LogCaptureFixture
) -> None:
    """Read as it came, a page turned 90 degrees is junk and one skewed 7 degrees reads in pieces; OSD turns it
    upright and the projection profile levels it, and the boxes still lie on the page."""
    page = pdfium.PdfDocument(scanned)[0].render(scale=DPI / 72, grayscale=True).to_pil()
    png = tmp_path / "turned.png"
    page.rotate(degrees, resample=Image.Resampling.BICUBIC, expand=True, fillcolor=255).save(png, dpi=(DPI, DPI))
    with caplog.at_level(logging.INFO, logger="tools.extract.ocr"):
        extracted = extract(png, "image", LIMIT, OCR)
    text = " ".join(extracted.text.lower().split())
    assert "the zebrafish tank needs clean water every week" in text
    assert "quokkas live on small islands near the coast" in text
    assert extracted.title == "Zebrafish husbandry"
    assert_boxes_on_their_pages(extracted)
    if degrees in (90, 180, 7, -5):  # (Tesseract reads text turned 270 degrees as vertical lines by itself)
        assert "read turned" in caplog.text


def test_a_page_read_below_the_confidence_floor_is_not_stored_and_is_named(
    scanned: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    page = pdfium.PdfDocument(scanned)[0].render(scale=DPI / 72, grayscale=True).to_pil()
    png = tmp_path / "page.png"
    page.save(png, dpi=(DPI, DPI))
    strict = OcrOptions(dpi=DPI, workers=1, min_confidence=99.5)  # above what this clean print reads at
    with caplog.at_level(logging.WARNING, logger="tools.extract.ocr"), pytest.raises(ExtractError, match="no text"):
        extract(png, "image", LIMIT, strict)
    assert "below OCR_MIN_CONFIDENCE=99.5: its text is not stored" in caplog.text
    with pytest.raises(ValueError, match="min_confidence=101"):
        OcrOptions(min_confidence=101)


@pytest.mark.parametrize("recorded", [None, (11, 11), (65535, 65535)])
def test_an_image_without_a_plausible_resolution_gets_one_estimated_from_its_text(
    scanned: Path, tmp_path: Path, recorded: tuple[int, int] | None
) -> None:
    """Taken at 72 dpi (none recorded), 11 dpi or 65,535 dpi, the page would be 2x, 13x or 1/900x its size in points
    and OCR told a wrong resolution; estimated, it is about its real size and reads whole."""
    page = pdfium.PdfDocument(scanned)[0].render(scale=DPI / 72, grayscale=True).to_pil()
    png = tmp_path / "page.png"
    page.save(png, **({} if recorded is None else {"dpi": recorded}))
    if recorded is None:
        assert "dpi" not in Image.open(png).info
    extracted = extract(png, "image", LIMIT, OCR)
    assert "quokkas live on small islands near the coast" in " ".join(extracted.text.lower().split())
    assert extracted.layout is not None
    real = (page.width * 72 / DPI, page.height * 72 / DPI)  # an A4 page, in points
    width, height = extracted.layout.page_sizes[0]
    assert 0.5 * real[0] < width < 2 * real[0] and 0.5 * real[1] < height < 2 * real[1]
    assert_boxes_on_their_pages(extracted)


def test_an_image_longer_than_tesseract_s_limit_is_read_in_tiles_with_boxes_on_the_page(
    scanned: Path, tmp_path: Path
) -> None:
    """A 36,000-pixel scroll (Tesseract refuses sides over 32,767): read in tiles cut between lines, in order."""
    page = pdfium.PdfDocument(scanned)[0].render(scale=DPI / 72, grayscale=True).to_pil()
    top = page.crop((0, 0, 1100, page.height // 2))
    scroll = Image.new("L", (top.width, 36_000), 255)  # 39.6 million pixels, within MAX_OCR_PIXELS
    for y in (0, 8_000, 20_000, 36_000 - top.height):  # a copy across the first nominal cut, and one at the end
        scroll.paste(top, (0, y))
    tiff = tmp_path / "scroll.tiff"
    scroll.save(tiff, dpi=(DPI, DPI), compression="tiff_deflate")
    extracted = extract(tiff, "image", LIMIT, OCR)
    assert extracted.text.lower().count("quokkas live on small islands") == 4
    assert extracted.pages == 1
    assert_boxes_on_their_pages(extracted)


def test_blank_frames_are_not_read_by_tesseract_and_a_file_past_its_ocr_time_fails_alone(
    scanned: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []
    real = pytesseract.image_to_data

    def counted(*args: object, **kwargs: object) -> object:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(pytesseract, "image_to_data", counted)
    blank = tmp_path / "blank.tiff"
    frames = [Image.new("L", (850, 1100), 255) for _ in range(200)]
    frames[0].save(blank, save_all=True, append_images=frames[1:], dpi=(100, 100), compression="tiff_deflate")
    with pytest.raises(ExtractError, match="read no text on its 200 frame"):
        extract(blank, "image", LIMIT, OCR)
    assert calls == []  # not one Tesseract run for a blank frame
    page = pdfium.PdfDocument(scanned)[0].render(scale=DPI / 72, grayscale=True).to_pil()
    tiff = tmp_path / "pages.tiff"
    page.save(tiff, save_all=True, append_images=[page, page], dpi=(DPI, DPI))
    timeouts: list[float] = []

    def bounded(*args: object, **kwargs: Any) -> object:
        timeouts.append(float(kwargs["timeout"]))
        return real(*args, **kwargs)

    monkeypatch.setattr(pytesseract, "image_to_data", bounded)
    extract(tiff, "image", LIMIT, OcrOptions(dpi=DPI, workers=1, file_timeout_s=900))
    assert len(timeouts) == 3 and all(0 < t <= 900 for t in timeouts)  # every run killed at the file's deadline
    hurried = OcrOptions(dpi=DPI, workers=1, file_timeout_s=1e-6)  # past before the first run
    with pytest.raises(ExtractError, match=r"pages\.tiff: OCR stopped after 0 page image\(s\).*OCR_FILE_TIMEOUT_S"):
        extract(tiff, "image", LIMIT, hurried)


def test_a_blank_image_is_refused_as_having_no_text(tmp_path: Path) -> None:
    external_tools.tesseract()
    png = tmp_path / "blank.png"
    Image.new("L", (400, 300), 255).save(png)
    with pytest.raises(ExtractError, match=r"blank\.png: OCR \(OCR_LANGUAGE=eng\) read no text"):
        extract(png, "image", LIMIT, OCR)


def test_without_tesseract_ocr_fails_naming_the_file_and_the_package(
    scanned: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pytesseract.pytesseract, "tesseract_cmd", "/nonexistent/tesseract")
    with pytest.raises(ExtractError, match=r"scanned\.pdf: needs OCR .*apt-get install tesseract-ocr.*OCR=false"):
        extract_here(scanned, OCR)  # in this process, where the command was pointed away


def test_a_language_without_its_data_names_the_package_to_install(scanned: Path) -> None:
    with pytest.raises(ExtractError, match=r"OCR_LANGUAGE='qqq'.*tesseract-ocr-qqq"):
        extract_here(scanned, OcrOptions(language="qqq", dpi=DPI))


def test_a_corrupt_image_is_refused_naming_it(tmp_path: Path) -> None:
    bad = tmp_path / "torn.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4)
    with pytest.raises(ExtractError, match=r"torn\.png: not a readable image"):
        extract(bad, "image", LIMIT, OCR)


def test_page_layout_joins_pages_with_unplaced_blank_lines() -> None:
    texts = ["ab", "", "c d"]
    boxes = [
        np.array([[0, 0, 1, 1], [1, 0, 2, 1]], np.float32),
        np.empty((0, 4), np.float32),
        np.array([[0, 0, 1, 1], [np.nan] * 4, [2, 0, 3, 1]], np.float32),
    ]
    body, sections = join_pages(texts)
    assert body == "ab\n\nc d" and [(s.start, s.page) for s in sections] == [(0, 1), (4, 3)]
    layout = page_layout(texts, boxes, [(10.0, 10.0)] * 3)
    assert layout is not None
    assert layout.pages.tolist() == [1, 1, 0, 0, 3, 0, 3]
    assert np.isnan(layout.boxes[[2, 3, 5]]).all() and layout.page_sizes == ((10.0, 10.0),) * 3
    assert page_layout(texts, [boxes[0], None, None], [(10.0, 10.0)] * 3) is None  # a page with text, no boxes


def test_a_page_too_large_at_ocr_dpi_is_rendered_at_a_lower_dpi_within_the_pixel_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(ocr, "MAX_OCR_PIXELS", 1_000_000)
    document = pdfium.PdfDocument.new()
    document.new_page(612, 792)
    page = ocr.render_page(document, 0, 1200)
    assert page.image.width * page.image.height <= 1_000_000
    assert page.image.width * page.image.height > 0.98 * 1_000_000  # as sharp as the bound allows
    assert page.page_size == pytest.approx((612, 792))
    assert page.px_per_pt[0] == pytest.approx(page.image.width / 612) and page.px_per_pt[0] < 1200 / 72
    small = ocr.render_page(document, 0, 72)  # within the bound: the dpi asked for
    assert (small.image.width, small.image.height) == (612, 792)


def test_an_image_frame_over_the_pixel_bound_is_refused_naming_its_pixels_and_the_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(image, "MAX_OCR_PIXELS", 100_000)
    png = tmp_path / "poster.png"
    Image.new("L", (400, 300), 255).save(png)
    limit = r"poster\.png: frame 1 is 400x300 = 120000 pixels, over the limit of 100000"
    with pytest.raises(ExtractError, match=limit):
        extract(png, "image", LIMIT, OCR)


def test_an_image_of_too_many_frames_is_refused_naming_the_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(image, "MAX_IMAGE_FRAMES", 2)
    tiff = tmp_path / "stack.tiff"
    frames = [Image.new("L", (40, 30), shade) for shade in (255, 200, 150)]
    frames[0].save(tiff, save_all=True, append_images=frames[1:])
    with pytest.raises(ExtractError, match=r"stack\.tiff: 3 frames, over the limit of 2 \(MAX_IMAGE_FRAMES\)"):
        extract(tiff, "image", LIMIT, OCR)


def test_words_of_a_chinese_or_japanese_line_are_joined_without_spaces_and_latin_ones_with() -> None:
    """Tesseract gives each Han character (or short run) of a line as a word; the line is stored as written, not
    as `维 生 素 D 缺 乏` (a reading laid out as Tesseract's TSV gives it; no Tesseract run)."""
    words = ["维生", "素", "D", "缺乏", "影响", "老人", "vitamin", "B12", "ビタ", "ミン"]
    lines = [1, 1, 1, 1, 1, 1, 2, 2, 3, 3]
    n = len(words)
    data: dict[str, list[object]] = {
        "text": list(words),
        "level": [5] * n,
        "block_num": [1] * n,
        "par_num": [1] * n,
        "line_num": list(lines),
        "left": [10 + 40 * i for i in range(n)],
        "top": [10 * line for line in lines],
        "width": [30] * n,
        "height": [8] * n,
        "conf": [90] * n,
    }
    page = ocr.PageImage(Image.new("L", (600, 100), 255), (600.0, 100.0), (1.0, 1.0))
    text, boxes = ocr._layout(page, ocr._Reading(data, 0.0, 90.0))
    assert text == "维生素 D 缺乏影响老人\nvitamin B12\nビタミン"
    assert boxes.shape == (len(text), 4)
