"""Images (PNG, JPEG, TIFF) as documents: each frame read by OCR (`tools.extract.ocr`), one page per frame.

A multi-page TIFF (or an animated PNG) is one document of several pages, frame n its page n. A frame's size in points
comes from the resolution the file records (Pillow's `info["dpi"]`: PNG `pHYs`, JPEG JFIF density, TIFF
`XResolution`/`YResolution`); a file that records none, or one outside `PLAUSIBLE_DPI` (a screenshot tool's 11 dpi, a
scanner's 65,535), gets a resolution estimated from its pixels (`tools.extract.orientation.estimate_dpi`: the text's
line pitch read as body text's, else the longer side read as a Letter page's), so that its page has a page's size in
points, OCR is told a sensible resolution, and the cited page renders at a sensible size. A frame is first turned
upright as its EXIF `Orientation` says (`ImageOps.exif_transpose`: a phone photo taken sideways), so its text is read
upright and the layout's boxes are in points of the upright frame, origin at its bottom left, as for PDF pages (and as
`tools.render_page` draws an image's page).
Frames are decoded in this process, one at a time, and read by `OCR_WORKERS` tesseract processes at once; callers run
this off the event loop (a thread), as for every extractor. Memory is bounded: a frame of more than
`tools.extract.ocr.MAX_OCR_PIXELS` pixels (stricter than Pillow's own `MAX_IMAGE_PIXELS` warning), or an image of more
than `MAX_IMAGE_FRAMES` frames, is refused before it is decoded.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path

from PIL import Image, ImageOps, ImageSequence, UnidentifiedImageError

from tools.extract.base import Extracted, ExtractError
from tools.extract.ocr import MAX_OCR_PIXELS, OcrOptions, PageBoxes, PageImage, progress_logger, read_pages
from tools.extract.orientation import estimate_dpi
from tools.extract.pages import join_pages, page_layout

log = logging.getLogger(__name__)

PLAUSIBLE_DPI = (50.0, 1200.0)
"""The resolutions (dots per inch) a recorded one is believed within; outside, the resolution is estimated."""
_ORIENTATION = 0x0112
"""The EXIF tag of how the stored pixels are to be turned to show the image upright (1: as stored; 5-8: a quarter
turn, with or without a mirror)."""
MAX_IMAGE_FRAMES = 1000
"""Most frames (pages) of one image file; a file with more is refused."""


def _frame_dpi(dpi: object) -> tuple[float, float] | None:
    """The resolution Pillow read (`info["dpi"]`), or None for none or one outside `PLAUSIBLE_DPI`."""
    low, high = PLAUSIBLE_DPI
    if isinstance(dpi, tuple) and len(dpi) == 2:
        x, y = (float(v) for v in dpi)
        if low <= x <= high and low <= y <= high:
            return x, y
    return None


def check_frame(path: Path, frame: Image.Image, number: int) -> None:
    """Refuse frame `number` (from 1) of the image `path` before it is decoded when it has more than
    `MAX_OCR_PIXELS` pixels or `number` exceeds `MAX_IMAGE_FRAMES`.

    Raises:
        ExtractError: names the file, the frame's pixels (or the frame count) and the limit.
    """
    if number > MAX_IMAGE_FRAMES:
        raise ExtractError(
            f"{path}: more than {MAX_IMAGE_FRAMES} frames, the limit (MAX_IMAGE_FRAMES); split the file into smaller "
            "ones"
        )
    pixels = frame.width * frame.height
    if pixels > MAX_OCR_PIXELS:
        raise ExtractError(
            f"{path}: frame {number} is {frame.width}x{frame.height} = {pixels} pixels, over the limit of "
            f"{MAX_OCR_PIXELS} (MAX_OCR_PIXELS); scale the image down (300 dpi is enough for OCR)"
        )


def upright(frame: Image.Image) -> tuple[Image.Image, tuple[float, float]]:
    """`frame` turned as its EXIF `Orientation` says (`ImageOps.exif_transpose`; unchanged without one), and its
    resolution `(x, y)` in dots per inch along the upright frame's axes (`_frame_dpi`, swapped for a quarter turn; a
    missing or implausible one estimated from the upright frame's pixels, `estimate_dpi`, the same on every call)."""
    recorded = _frame_dpi(frame.info.get("dpi"))
    orientation = frame.getexif().get(_ORIENTATION, 1)
    turned = ImageOps.exif_transpose(frame)
    if recorded is None:
        dpi = estimate_dpi(turned)
        log.info(
            "an image frame records no plausible resolution (%s): read at an estimated %.0f dpi",
            frame.info.get("dpi"),
            dpi,
        )
        return turned, (dpi, dpi)
    dpi_x, dpi_y = recorded
    if orientation in (5, 6, 7, 8):
        dpi_x, dpi_y = dpi_y, dpi_x
    return turned, (dpi_x, dpi_y)


def _frames(path: Path, image: Image.Image) -> Iterator[tuple[tuple[float, float], PageImage]]:
    """(size in points, page) of each frame, checked (`check_frame`) and decoded one at a time in grey levels."""
    for number, frame in enumerate(ImageSequence.Iterator(image), 1):
        check_frame(path, frame, number)
        turned, (dpi_x, dpi_y) = upright(frame)
        grey = turned.convert("L")
        size = (grey.width * 72 / dpi_x, grey.height * 72 / dpi_y)
        yield size, PageImage(grey, size, (dpi_x / 72, dpi_y / 72))


def extract_image(path: Path, ocr: OcrOptions | None = None) -> Extracted:
    """The text Tesseract reads on each frame of the image `path`, frames joined by a blank line, one
    `Section(page=n)` per frame with text, and the `Layout` (boxes in points at the image's own dpi). The title is
    the first line of text, as for a PDF without one.

    Raises:
        ExtractError: OCR is off (`ocr.enabled` false), the file is not an image Pillow can decode (corrupt,
            truncated), a frame has too many pixels or the file too many frames (`check_frame`), OCR failed
            (`tools.extract.ocr.ocr_error`), or it read no text.
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
            frames = getattr(image, "n_frames", 1)
            if frames > MAX_IMAGE_FRAMES:
                raise ExtractError(
                    f"{path}: {frames} frames, over the limit of {MAX_IMAGE_FRAMES} (MAX_IMAGE_FRAMES); split the "
                    "file into smaller ones"
                )
            progress = progress_logger(str(path), frames)
            for size, text, page_boxes in read_pages(_frames(path, image), ocr, str(path), progress):
                texts.append(text)
                boxes.append(page_boxes)
                sizes.append(size)
    except ExtractError:
        raise
    except Image.DecompressionBombError as exc:
        raise ExtractError(
            f"{path}: too many pixels ({exc}); scale the image down (300 dpi is enough for OCR)"
        ) from None
    except (UnidentifiedImageError, SyntaxError, ValueError) as exc:
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
