"""Images (PNG, JPEG, TIFF) as documents: each frame read by OCR (`tools.extract.ocr`), one page per frame.

A multi-page TIFF (or an animated PNG) is one document of several pages, frame n its page n. A frame's size in points
comes from the resolution the file records (Pillow's `info["dpi"]`: PNG `pHYs`, JPEG JFIF density, TIFF
`XResolution`/`YResolution`); a file that records none, or a nonsensical one (below 10 dpi), is taken at 72 dpi, one
point per pixel. The layout's boxes are in those points, origin at the frame's bottom left, as for PDF pages.
Frames are decoded in this process (Pillow refuses decompression bombs over its `MAX_IMAGE_PIXELS`) and read by
`OCR_WORKERS` tesseract processes at once; callers run this off the event loop (a thread), as for every extractor.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

from PIL import Image, ImageSequence, UnidentifiedImageError

from tools.extract.base import Extracted, ExtractError
from tools.extract.ocr import OcrOptions, PageBoxes, PageImage, progress_logger, read_pages
from tools.extract.pages import join_pages, page_layout

DEFAULT_DPI = 72.0
"""Resolution of an image that records none: one pixel per point."""
_MIN_DPI = 10.0


def _frame_dpi(dpi: object) -> tuple[float, float]:
    """The resolution Pillow read (`info["dpi"]`), or `DEFAULT_DPI` for none or one below 10 dpi."""
    if isinstance(dpi, tuple) and len(dpi) == 2:
        x, y = (float(v) for v in dpi)
        if x >= _MIN_DPI and y >= _MIN_DPI:
            return x, y
    return DEFAULT_DPI, DEFAULT_DPI


def _frames(image: Image.Image) -> Iterator[tuple[tuple[float, float], PageImage]]:
    """(size in points, page) of each frame, decoded one at a time in grey levels."""
    for frame in ImageSequence.Iterator(image):
        dpi_x, dpi_y = _frame_dpi(frame.info.get("dpi"))
        grey = frame.convert("L")
        size = (grey.width * 72 / dpi_x, grey.height * 72 / dpi_y)
        yield size, PageImage(grey, size, (dpi_x / 72, dpi_y / 72))


def extract_image(path: Path, ocr: OcrOptions | None = None) -> Extracted:
    """The text Tesseract reads on each frame of the image `path`, frames joined by a blank line, one
    `Section(page=n)` per frame with text, and the `Layout` (boxes in points at the image's own dpi). The title is
    the first line of text, as for a PDF without one.

    Raises:
        ExtractError: OCR is off (`ocr.enabled` false), the file is not an image Pillow can decode (corrupt,
            truncated, too many pixels), OCR failed (`tools.extract.ocr.ocr_error`), or it read no text.
        OSError: the file cannot be read.
    """
    ocr = OcrOptions() if ocr is None else ocr
    if not ocr.enabled:
        raise ExtractError(f"{path}: an image, whose text only OCR reads, and OCR is off (OCR=false); set OCR=true")
    start = time.perf_counter()
    texts: list[str] = []
    boxes: list[PageBoxes | None] = []
    sizes: list[tuple[float, float] | None] = []
    try:
        with Image.open(path) as image:
            progress = progress_logger(str(path), getattr(image, "n_frames", 1))
            for size, text, page_boxes in read_pages(_frames(image), ocr, str(path), progress):
                texts.append(text)
                boxes.append(page_boxes)
                sizes.append(size)
    except (UnidentifiedImageError, Image.DecompressionBombError, SyntaxError, ValueError) as exc:
        raise ExtractError(
            f"{path}: not a readable image ({exc}); the file is corrupt, truncated or too large"
        ) from None
    except OSError as exc:
        if isinstance(exc, FileNotFoundError | PermissionError):
            raise
        raise ExtractError(f"{path}: not a readable image ({exc}); the file is corrupt or truncated") from None
    if not any(texts):
        raise ExtractError(
            f"{path}: OCR (OCR_LANGUAGE={ocr.language}) read no text on its {len(texts)} frame(s); expected an "
            "image of legible text"
        )
    body, sections = join_pages(texts)
    layout = page_layout(texts, boxes, sizes)
    title = body.split("\n", 1)[0].strip()
    return Extracted(body, title, sections, len(texts), layout, len(texts), time.perf_counter() - start)
