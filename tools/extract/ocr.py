"""OCR: the text of page images, read by Tesseract (`pytesseract`, which runs the `tesseract` command), with each
character's box.

A PDF page without a text layer (a scan), or with fewer than `OcrOptions.min_chars` characters of text, is rendered
by PDFium at `OcrOptions.dpi` (`render_page`) and read here; image files (`tools.extract.image`) are read frame by
frame. Tesseract's `image_to_data` (TSV) gives words with their pixel boxes and their block, paragraph and line
numbers: words of a line are joined by a space, lines by a line break, paragraphs and blocks by a blank line. Each
character of a word gets an equal share of the word's width (Tesseract gives no per-character boxes in TSV); spaces
and line breaks get NaN boxes. Pixel boxes become points in page space, as the text layer's boxes are
(`tools.extract.pdf`) and as `tools.render_page` draws them: with the rendered area's bottom-left corner at
`(x0, y0)` (a PDF page's crop box; `(0, 0)` for an image) and its height `h`, `x_pt = x0 + x_px * 72 / dpi`,
`y_pt = y0 + h - y_px * 72 / dpi`. A PDF page shown turned (`/Rotate`) is OCR'd as shown, but its characters get NaN
boxes (no highlight), as the text layer's rotated pages do.

Memory is bounded per page: a PDF page is rendered at `OcrOptions.dpi` unless that would give more than
`MAX_OCR_PIXELS` pixels, when it is rendered at the highest resolution that stays within them (a page of A4 or US
Letter up to about 640 dpi); an image frame over `MAX_OCR_PIXELS` is refused (`tools.extract.image`).

Tesseract is CPU-only and slow (about 1-3 s per 300 dpi page on one core): pages are read by `OcrOptions.workers`
`tesseract` processes at once (threads here wait on them), each limited to one OpenMP thread (`OMP_THREAD_LIMIT=1`;
Tesseract's own advice for parallel runs). Languages are Tesseract's (`eng`, `deu`, `eng+deu`, ...), installed as
Debian packages `tesseract-ocr-<lang>`.
"""

from __future__ import annotations

import logging
import math
import os
import re
import shutil
import time
import unicodedata
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np
import numpy.typing as npt
import pypdfium2 as pdfium
import pytesseract
from PIL import Image

from tools.extract.base import ExtractError

PageBoxes = npt.NDArray[np.float32]
"""`(len(text), 4)` float32 character boxes `(left, bottom, right, top)` in points; NaN rows for spaces and breaks."""
_LIGATURES = re.compile("[\ufb00-\ufb06]")
log = logging.getLogger(__name__)
K = TypeVar("K")
PROGRESS_EVERY_S = 10.0
"""How often a long OCR logs its progress (INFO), seconds."""
MAX_OCR_PIXELS = 40_000_000
"""Most pixels (width x height) of one page image read by OCR: 40 MB in grey levels, and `read_pages` holds up to
twice `OCR_WORKERS` of them. A PDF page is rendered at a lower dpi to stay within it; a larger image frame is
refused."""
_TESSDATA_MISSING = re.compile(r"Failed loading language '([^']+)'|Error opening data file")


def default_workers() -> int:
    """Tesseract processes run at once by default: the machine's CPUs, at most 4 (`OCR_WORKERS`)."""
    return max(1, min(4, os.cpu_count() or 1))


@dataclass(frozen=True)
class OcrOptions:
    """How pages without a text layer are read (built from the settings: `agent.core.wiring`).

    Attributes:
        enabled: OCR at all (`OCR`); off, a PDF without text is refused as before.
        language: Tesseract language(s), `+`-joined (`OCR_LANGUAGE`, e.g. `eng`, `eng+deu`).
        dpi: resolution PDF pages are rendered at for OCR, dots per inch (`OCR_DPI`).
        min_chars: a PDF page whose text layer has fewer characters than this is OCR'd (`OCR_MIN_CHARS`).
        workers: `tesseract` processes at once (`OCR_WORKERS`).
    """

    enabled: bool = True
    language: str = "eng"
    dpi: int = 300
    min_chars: int = 20
    workers: int = field(default_factory=default_workers)

    def __post_init__(self) -> None:
        """Raises ValueError for a dpi, min_chars or workers below 1, or an empty language."""
        if min(self.dpi, self.min_chars, self.workers) < 1 or not self.language.strip():
            raise ValueError(
                f"OCR options dpi={self.dpi}, min_chars={self.min_chars}, workers={self.workers}, "
                f"language={self.language!r}; expected dpi, min_chars and workers >= 1 and a language"
            )


@dataclass(frozen=True)
class PageImage:
    """One page to read: the image, its size in points (`page_size`), its pixels per point on each axis, and where
    its bottom-left corner lies in page space (`origin`, points; None: the image is turned against page space, and
    its characters get NaN boxes)."""

    image: Image.Image
    page_size: tuple[float, float]
    px_per_pt: tuple[float, float]
    origin: tuple[float, float] | None = (0.0, 0.0)


def ocr_scale(size: tuple[float, float], dpi: int) -> float:
    """Pixels per point to render a page of `size` points for OCR: `dpi / 72`, lowered so that the image has at most
    `MAX_OCR_PIXELS` pixels (PDFium rounds each side up a pixel: `(w * s + 1) * (h * s + 1) <= MAX_OCR_PIXELS`)."""
    w, h = max(size[0], 1.0), max(size[1], 1.0)
    bound = (math.sqrt((w + h) ** 2 + 4 * w * h * (MAX_OCR_PIXELS - 1)) - (w + h)) / (2 * w * h)
    return min(dpi / 72, bound)


def render_page(document: pdfium.PdfDocument, index: int, dpi: int) -> PageImage:
    """Page `index` (0-based) of `document` rendered by PDFium in grey levels at `dpi`, or lower where the image
    would exceed `MAX_OCR_PIXELS` (`ocr_scale`; logged) (the page as shown: crop box and `/Rotate` applied;
    `origin` the crop box's bottom-left corner, None for a turned page). PDFium is not thread-safe: the caller
    serialises calls."""
    page = document[index]
    try:
        size: tuple[float, float] = tuple(page.get_size())
        left, bottom, _, _ = page.get_cropbox()
        origin = None if page.get_rotation() % 360 else (float(left), float(bottom))
        scale = ocr_scale(size, dpi)
        if scale < dpi / 72:
            log.info(
                "page %d (%.0fx%.0f pt) OCR'd at %.0f dpi, not OCR_DPI=%d: at that dpi it would exceed "
                "MAX_OCR_PIXELS (%d)",
                index + 1,
                size[0],
                size[1],
                72 * scale,
                dpi,
                MAX_OCR_PIXELS,
            )
        bitmap = page.render(scale=scale, grayscale=True)
        image = bitmap.to_pil()
        image.load()
        result = PageImage(image.copy(), size, (image.width / size[0], image.height / size[1]), origin)
        bitmap.close()
    finally:
        page.close()
    return result


def _letters(word: str) -> str:
    return _LIGATURES.sub(lambda m: unicodedata.normalize("NFKC", m.group()), word)


def read_page(page: PageImage, language: str) -> tuple[str, PageBoxes]:
    """The text Tesseract reads on `page` (words, lines, blank lines between paragraphs) and each character's box in
    points, page space (`page.origin` added; NaN rows for spaces and line breaks, and for every character of a page
    whose `origin` is None).

    Raises:
        pytesseract.TesseractNotFoundError, pytesseract.TesseractError: see `ocr_error`.
    """
    dpi = round(72 * page.px_per_pt[0])
    data = pytesseract.image_to_data(
        page.image, lang=language, config=f"--dpi {dpi}", output_type=pytesseract.Output.DICT
    )
    sx, sy = page.px_per_pt
    x0, y0 = (0.0, 0.0) if page.origin is None else page.origin
    top_pt = y0 + page.page_size[1]
    parts: list[str] = []
    boxes: list[npt.NDArray[np.float32]] = []
    previous: tuple[int, int, int] | None = None

    def gap(text: str) -> None:
        parts.append(text)
        boxes.append(np.full((len(text), 4), np.nan, np.float32))

    for i, raw in enumerate(data["text"]):
        word = _letters(str(raw).strip())
        if int(data["level"][i]) != 5 or not word:
            continue
        line = (int(data["block_num"][i]), int(data["par_num"][i]), int(data["line_num"][i]))
        if previous is not None:
            gap(" " if line == previous else "\n" if line[:2] == previous[:2] else "\n\n")
        previous = line
        left, top = float(data["left"][i]), float(data["top"][i])
        width, tall = float(data["width"][i]), float(data["height"][i])
        edges = left + width * np.arange(len(word) + 1, dtype=np.float64) / len(word)
        chars = np.empty((len(word), 4), np.float32)
        chars[:, 0] = x0 + edges[:-1] / sx
        chars[:, 2] = x0 + edges[1:] / sx
        chars[:, 1] = top_pt - (top + tall) / sy
        chars[:, 3] = top_pt - top / sy
        if page.origin is None:
            chars[:] = np.nan
        parts.append(word)
        boxes.append(chars)
    text = "".join(parts)
    return text, (np.concatenate(boxes) if boxes else np.empty((0, 4), np.float32))


def tesseract_installed() -> bool:
    """Whether the tesseract command pytesseract runs (`pytesseract.pytesseract.tesseract_cmd`) is on PATH or exists."""
    return shutil.which(pytesseract.pytesseract.tesseract_cmd) is not None


def ocr_error(where: str, exc: Exception, language: str) -> ExtractError:
    """The `ExtractError` for a failed Tesseract run on `where` (a file, or a file's page): not installed, a
    language without its data files, or Tesseract's own message."""
    if isinstance(exc, pytesseract.TesseractNotFoundError):
        return ExtractError(
            f"{where}: needs OCR (no text layer), but the tesseract command is not installed; install Tesseract "
            "(Debian: apt-get install tesseract-ocr) or set OCR=false to refuse such files"
        )
    message = str(exc).strip()
    if _TESSDATA_MISSING.search(message):
        langs = ", ".join(f"tesseract-ocr-{lang}" for lang in language.split("+"))
        return ExtractError(
            f"{where}: Tesseract has no data for OCR_LANGUAGE={language!r}; install the language packages "
            f"(Debian: {langs})"
        )
    return ExtractError(f"{where}: OCR failed (tesseract: {message[-300:]})")


def read_pages(
    pages: Iterable[tuple[K, PageImage]],
    options: OcrOptions,
    where: str,
    on_page: Callable[[int], None] | None = None,
) -> Iterator[tuple[K, str, PageBoxes]]:
    """`(key, text, boxes)` of each `(key, page)` of `pages` (in input order), read by `options.workers` tesseract
    processes at once. `pages` is drawn lazily, at most twice `workers` images ahead of the results (memory: a 300
    dpi A4 page is ~8.7 MB in grey levels). `on_page(pages read so far)` is called as each page is read.

    Raises:
        ExtractError: tesseract is missing, a language's data is missing, or tesseract failed (`ocr_error`; names
            `where`).
    """
    os.environ.setdefault("OMP_THREAD_LIMIT", "1")
    ahead = 2 * options.workers
    done = 0
    with ThreadPoolExecutor(options.workers, thread_name_prefix="ocr") as pool:
        queued: list[tuple[K, Future[tuple[str, PageBoxes]]]] = []
        source = iter(pages)
        exhausted = False
        while queued or not exhausted:
            while not exhausted and len(queued) < ahead:
                item = next(source, None)
                if item is None:
                    exhausted = True
                    break
                queued.append((item[0], pool.submit(read_page, item[1], options.language)))
            if not queued:
                break
            key, future = queued.pop(0)
            try:
                text, boxes = future.result()
            except (pytesseract.TesseractNotFoundError, pytesseract.TesseractError) as exc:
                for _, other in queued:
                    other.cancel()
                raise ocr_error(where, exc, options.language) from None
            done += 1
            if on_page is not None:
                on_page(done)
            yield key, text, boxes


def progress_logger(where: str, total: int, every_s: float = PROGRESS_EVERY_S) -> Callable[[int], None]:
    """An `on_page` for `read_pages` that logs `where: OCR n/total pages, r pages/s` at INFO (logger
    `tools.extract.ocr`) after the first page, then at most every `every_s` seconds, and at the last page."""
    start = last = time.perf_counter()

    def on_page(done: int) -> None:
        nonlocal last
        now = time.perf_counter()
        if done in (1, total) or now - last >= every_s:
            last = now
            log.info("%s: OCR %d/%d pages, %.2f pages/s", where, done, total, done / max(now - start, 1e-9))

    return on_page


def ocr_page(document: pdfium.PdfDocument, index: int, language: str, dpi: int) -> tuple[str, PageBoxes]:
    """Page `index` (0-based) of `document` rendered at `dpi` and read by Tesseract in `language`: its text and each
    character's box in points (see `read_page`).

    Raises:
        pytesseract.TesseractNotFoundError, pytesseract.TesseractError: see `ocr_error`.
    """
    return read_page(render_page(document, index, dpi), language)
