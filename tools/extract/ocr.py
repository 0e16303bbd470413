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
`y_pt = y0 + h - y_px * 72 / dpi`. A PDF page shown turned (`/Rotate`) is OCR'd as shown, and its boxes are on the
page as shown (the crop box turned about its bottom-left corner `(x0, y0)`, `h` the height shown), as the text layer's
boxes of a turned page are and as `tools.render_page` draws them.

Memory is bounded per page: a PDF page is rendered at `OcrOptions.dpi` unless that would give more than
`MAX_OCR_PIXELS` pixels, when it is rendered at the highest resolution that stays within them (a page of A4 or US
Letter up to about 640 dpi); an image frame over `MAX_OCR_PIXELS` is refused (`tools.extract.image`).

Tesseract is CPU-only and slow (about 1-3 s per 300 dpi page on one core): pages are read by `OcrOptions.workers`
`tesseract` processes at once (threads here wait on them), each limited to one OpenMP thread (`OMP_THREAD_LIMIT=1`;
Tesseract's own advice for parallel runs). Languages are Tesseract's (`eng`, `deu`, `eng+deu`, ...), installed as
Debian packages `tesseract-ocr-<lang>`.
"""

from __future__ import annotations

import itertools
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
from tools.extract.orientation import SKEW_MAX_DEG, boxes_back, is_blank, quarter_turn, skew_angle, turned

PageBoxes = npt.NDArray[np.float32]
"""`(len(text), 4)` float32 character boxes `(left, bottom, right, top)` in points; NaN rows for spaces and breaks."""
_LIGATURES = re.compile("[\ufb00-\ufb06]")
_CJK_EDGE = re.compile("[\u3000-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff00-\uffef]")
"""A Han, kana or full-width character (Chinese and Japanese write no spaces; Korean does): Tesseract gives each one
(or each short run) of a line in these scripts as a word of its own, and two such words of a line are joined without
the space a Latin line gets."""
log = logging.getLogger(__name__)
K = TypeVar("K")
T = TypeVar("T")
PROGRESS_EVERY_S = 10.0
"""How often a long OCR logs its progress (INFO), seconds."""
MAX_OCR_PIXELS = 40_000_000
"""Most pixels (width x height) of one page image read by OCR: 40 MB in grey levels, and `read_pages` holds up to
twice `OCR_WORKERS` of them. A PDF page is rendered at a lower dpi to stay within it; a larger image frame is
refused."""
TESSERACT_MAX_SIDE = 32767
"""Tesseract refuses an image with a side longer than this (its coordinates are 16-bit): longer ones are read in
tiles (`TILE_SIDE_PX`)."""
TILE_SIDE_PX = 8192
"""The longest side of a tile of a page image too long for Tesseract; each cut is moved to the emptiest row (or
column) within `TILE_SEARCH_PX` before it, so that it falls between lines of text."""
TILE_SEARCH_PX = 512
REORIENT_BELOW = 75.0
"""A first reading whose mean word confidence (0-100) is below this asks Tesseract's orientation detection for a
quarter turn and reads the upright page again: an upright page of clean print reads at 90-96, the same page turned a
quarter or upside down at 30-40 (measured on the test pages, 150 dpi)."""
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
        min_confidence: a page read at a lower mean word confidence (0-100, Tesseract's) is not stored: its text is
            dropped and a warning names it (`OCR_MIN_CONFIDENCE`; 0 keeps everything).
        file_timeout_s: OCR of one file stops with an error once it has taken longer than this, seconds
            (`OCR_FILE_TIMEOUT_S`): the bound of the work one file can make.
    """

    enabled: bool = True
    language: str = "eng"
    dpi: int = 300
    min_chars: int = 20
    workers: int = field(default_factory=default_workers)
    min_confidence: float = 50.0
    file_timeout_s: float = 900.0

    def __post_init__(self) -> None:
        """Raises ValueError for a dpi, min_chars or workers below 1, or an empty language."""
        if not self.file_timeout_s > 0:
            raise ValueError(f"OCR file_timeout_s={self.file_timeout_s}; expected more than 0 seconds")
        if not 0 <= self.min_confidence <= 100:
            raise ValueError(f"OCR min_confidence={self.min_confidence}; expected 0 to 100")
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
    `origin` the crop box's bottom-left corner: a turned page's boxes are on the page as shown, the crop box turned
    about that corner, as `tools.extract.pdf` gives a turned text layer's). PDFium is not thread-safe: the caller
    serialises calls."""
    page = document[index]
    try:
        size: tuple[float, float] = tuple(page.get_size())
        left, bottom, _, _ = page.get_bbox()  # the crop box within the media box
        origin = (float(left), float(bottom))
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


@dataclass(frozen=True)
class _Reading:
    """One Tesseract run over the page image turned `degrees` counter-clockwise: its TSV as a dict of columns, and
    the mean confidence (0-100) of its words (0 without words)."""

    data: dict[str, list[object]]
    degrees: float
    confidence: float


class OcrTimeoutError(Exception):
    """A Tesseract run was stopped at the file's OCR deadline (`OcrOptions.file_timeout_s`)."""


def _seconds_left(deadline: float | None) -> float:
    """The seconds a Tesseract run may take before `deadline` (`time.monotonic()`; None: no bound, 0 for
    pytesseract).

    Raises:
        OcrTimeoutError: the deadline has passed.
    """
    if deadline is None:
        return 0.0
    left = deadline - time.monotonic()
    if left <= 0:
        raise OcrTimeoutError
    return left


def _bounded(run: Callable[[float], T], deadline: float | None) -> T:
    """`run(timeout)` with the seconds left before `deadline` (pytesseract kills a run past its `timeout` and raises
    RuntimeError "Tesseract process timeout").

    Raises:
        OcrTimeoutError: the deadline passed before or during the run.
    """
    try:
        return run(_seconds_left(deadline))
    except RuntimeError as exc:
        if "timeout" in str(exc).lower():
            raise OcrTimeoutError from None
        raise


def _read(image: Image.Image, degrees: float, language: str, dpi: int, deadline: float | None = None) -> _Reading:
    """Tesseract's words on `image` turned `degrees` counter-clockwise (`tools.extract.orientation.turned`), the run
    bounded by `deadline` (`_bounded`)."""
    page = turned(image, degrees) if degrees else image
    data = _bounded(
        lambda timeout: pytesseract.image_to_data(
            page, lang=language, config=f"--dpi {dpi}", output_type=pytesseract.Output.DICT, timeout=timeout
        ),
        deadline,
    )
    confidences = [
        float(str(c))
        for c, t, level in zip(data["conf"], data["text"], data["level"], strict=True)
        if int(level) == 5 and str(t).strip() and float(str(c)) >= 0
    ]
    return _Reading(data, degrees, float(np.mean(confidences)) if confidences else 0.0)


@dataclass(frozen=True)
class OcrPage:
    """What OCR read on one page: `text`, `boxes` (`PageBoxes`, aligned with `text`), the mean word `confidence`
    (0-100, Tesseract's) and the `degrees` the page image was turned counter-clockwise to be read (0: as it came;
    a quarter turn and a skew correction add up)."""

    text: str
    boxes: PageBoxes
    confidence: float
    degrees: float


def read_page(page: PageImage, language: str, min_confidence: float = 0.0, deadline: float | None = None) -> OcrPage:
    """The text Tesseract reads on `page` (words, lines, blank lines between paragraphs) and each character's box in
    points, page space (`page.origin` added; NaN rows for spaces and line breaks, and for every character of a page
    whose `origin` is None).

    A blank page (`tools.extract.orientation.is_blank`) is not read. A page with a side over `TESSERACT_MAX_SIDE` is
    read in tiles along that side (`_read_tiles`). The page is read level (`tools.extract.orientation.skew_angle`);
    when the mean word confidence is below `REORIENT_BELOW`, Tesseract's orientation detection is asked for a quarter
    turn and the upright page is read again, the better reading kept. A reading whose mean word confidence is below
    `min_confidence` is not text: the result has no text (the caller reports it). Boxes of a turned reading are
    mapped back onto the page image (`boxes_back`); after a quarter turn each character gets its whole word's box.

    Every Tesseract run is bounded by `deadline` (`time.monotonic()` seconds; None: unbounded).

    Raises:
        pytesseract.TesseractNotFoundError, pytesseract.TesseractError: see `ocr_error`.
        OcrTimeoutError: the deadline passed.
    """
    if max(page.image.size) > TESSERACT_MAX_SIDE:
        return _read_tiles(page, language, min_confidence, deadline)
    if is_blank(page.image):
        return OcrPage("", np.empty((0, 4), np.float32), 0.0, 0.0)
    dpi = round(72 * page.px_per_pt[0])
    reading = _read(page.image, skew_angle(page.image), language, dpi, deadline)
    if reading.confidence < REORIENT_BELOW and (
        turn := _bounded(lambda timeout: quarter_turn(page.image, dpi, timeout), deadline)
    ):
        upright = turned(page.image, -turn)
        again = _read(page.image, skew_angle(upright) - turn, language, dpi, deadline)
        if again.confidence > reading.confidence:
            reading = again
    if reading.confidence < min_confidence:
        return OcrPage("", np.empty((0, 4), np.float32), reading.confidence, reading.degrees)
    text, boxes = _layout(page, reading)
    return OcrPage(text, boxes, reading.confidence, reading.degrees)


def _cuts(image: Image.Image, vertical: bool) -> list[int]:
    """Where to cut `image` along its rows (`vertical`) or columns into tiles of at most `TILE_SIDE_PX`: 0, the
    cuts, the length; each cut in the middle of the longest run of the emptiest rows (or columns) within
    `TILE_SEARCH_PX` before its nominal place, so that it falls between lines, in the widest gap."""
    ink = (np.asarray(image.convert("L")) < 128).sum(axis=1 if vertical else 0)
    length = ink.size
    cuts = [0]
    while length - cuts[-1] > TILE_SIDE_PX:
        first = cuts[-1] + TILE_SIDE_PX - TILE_SEARCH_PX
        window = ink[first : first + TILE_SEARCH_PX]
        emptiest = np.concatenate([[False], window == window.min(), [False]])
        edges = np.flatnonzero(emptiest[1:] != emptiest[:-1])  # run starts and ends, alternating
        starts, ends = edges[::2], edges[1::2]
        longest = int(np.argmax(ends - starts))
        cuts.append(first + int((starts[longest] + ends[longest]) // 2))
    return [*cuts, length]


def _read_tiles(page: PageImage, language: str, min_confidence: float, deadline: float | None) -> OcrPage:
    """`read_page` of a page image too long for Tesseract, in tiles along its long side (`_cuts`), their texts
    joined by blank lines, their boxes in the page's space, the confidence the tiles' mean weighted by text."""
    image, (sx, sy) = page.image, page.px_per_pt
    vertical = image.height >= image.width
    cuts = _cuts(image, vertical)
    texts: list[str] = []
    boxes: list[PageBoxes] = []
    weighted = 0.0
    for start, end in itertools.pairwise(cuts):
        if vertical:
            crop = (0, start, image.width, end)
            size = (image.width / sx, (end - start) / sy)
            origin = None if page.origin is None else (page.origin[0], page.origin[1] + (image.height - end) / sy)
        else:
            crop = (start, 0, end, image.height)
            size = ((end - start) / sx, image.height / sy)
            origin = None if page.origin is None else (page.origin[0] + start / sx, page.origin[1])
        tile_image = PageImage(image.crop(crop), size, page.px_per_pt, origin)
        tile = read_page(tile_image, language, min_confidence, deadline)
        if not tile.text:
            continue
        if texts:
            texts.append("\n\n")
            boxes.append(np.full((2, 4), np.nan, np.float32))
        texts.append(tile.text)
        boxes.append(tile.boxes)
        weighted += tile.confidence * len(tile.text)
    text = "".join(texts)
    confidence = weighted / max(1, sum(len(t) for t in texts if t != "\n\n"))
    return OcrPage(text, np.concatenate(boxes) if boxes else np.empty((0, 4), np.float32), confidence, 0.0)


def _layout(page: PageImage, reading: _Reading) -> tuple[str, PageBoxes]:
    """The reading's words as text (module docstring) and their characters' boxes in points, page space."""
    data = reading.data
    sx, sy = page.px_per_pt
    x0, y0 = (0.0, 0.0) if page.origin is None else page.origin
    top_pt = y0 + page.page_size[1]
    quarter = abs(reading.degrees) > SKEW_MAX_DEG  # words run up or down the page image: no per-character split
    parts: list[str] = []
    boxes: list[npt.NDArray[np.float32]] = []
    previous: tuple[int, int, int] | None = None

    def gap(text: str) -> None:
        parts.append(text)
        boxes.append(np.full((len(text), 4), np.nan, np.float32))

    words: list[tuple[str, tuple[int, int, int], tuple[float, float, float, float]]] = []
    for i, raw in enumerate(data["text"]):
        word = _letters(str(raw).strip())
        if int(str(data["level"][i])) != 5 or not word:
            continue
        line = (int(str(data["block_num"][i])), int(str(data["par_num"][i])), int(str(data["line_num"][i])))
        left, top = float(str(data["left"][i])), float(str(data["top"][i]))
        right, bottom = left + float(str(data["width"][i])), top + float(str(data["height"][i]))
        words.append((word, line, (left, top, right, bottom)))
    px = boxes_back(np.array([w[2] for w in words], np.float64).reshape(-1, 4), reading.degrees, page.image.size)
    for (word, line, _), (left, top, right, bottom) in zip(words, px, strict=True):
        if previous is not None:
            same_line = "" if _CJK_EDGE.match(word) and _CJK_EDGE.match(parts[-1][-1:]) else " "
            gap(same_line if line == previous else "\n" if line[:2] == previous[:2] else "\n\n")
        previous = line
        chars = np.empty((len(word), 4), np.float32)
        if quarter:
            chars[:, 0], chars[:, 2] = x0 + left / sx, x0 + right / sx
        else:
            edges = left + (right - left) * np.arange(len(word) + 1, dtype=np.float64) / len(word)
            chars[:, 0] = x0 + edges[:-1] / sx
            chars[:, 2] = x0 + edges[1:] / sx
        chars[:, 1] = top_pt - bottom / sy
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
            `where`); or the file's OCR ran past `options.file_timeout_s` (every Tesseract run is killed at that
            deadline; the pages read so far are dropped: `timeout_error`).
    """
    os.environ.setdefault("OMP_THREAD_LIMIT", "1")
    ahead = 2 * options.workers
    done = 0
    start = time.monotonic()
    deadline = start + options.file_timeout_s  # every Tesseract run of the file is killed past it
    with ThreadPoolExecutor(options.workers, thread_name_prefix="ocr") as pool:
        queued: list[tuple[K, Future[OcrPage]]] = []
        source = iter(pages)
        exhausted = False
        while queued or not exhausted:
            while not exhausted and len(queued) < ahead:
                item = next(source, None)
                if item is None:
                    exhausted = True
                    break
                queued.append(
                    (item[0], pool.submit(read_page, item[1], options.language, options.min_confidence, deadline))
                )
            if not queued:
                break
            key, future = queued.pop(0)
            try:
                page = future.result()
            except (pytesseract.TesseractNotFoundError, pytesseract.TesseractError) as exc:
                for _, other in queued:
                    other.cancel()
                raise ocr_error(where, exc, options.language) from None
            except OcrTimeoutError:
                for _, other in queued:
                    other.cancel()
                raise timeout_error(where, done, time.monotonic() - start, options) from None
            done += 1
            if time.monotonic() > deadline and (queued or not exhausted):
                for _, other in queued:
                    other.cancel()
                raise timeout_error(where, done, time.monotonic() - start, options)
            if 0 < page.confidence < options.min_confidence:  # a blank page has no words to be unsure of
                log.warning(
                    "%s: page image %d read by OCR at a mean word confidence of %.0f, below OCR_MIN_CONFIDENCE=%g: "
                    "its text is not stored (a blurred, faint or handwritten page, or another OCR_LANGUAGE)",
                    where,
                    done,
                    page.confidence,
                    options.min_confidence,
                )
            elif page.degrees:
                log.info("%s: page image %d read turned %.1f degrees counter-clockwise", where, done, page.degrees)
            text, boxes = page.text, page.boxes
            if on_page is not None:
                on_page(done)
            yield key, text, boxes


def timeout_error(where: str, done: int, elapsed_s: float, options: OcrOptions) -> ExtractError:
    """The `ExtractError` of a file whose OCR ran past `options.file_timeout_s` after `done` page images."""
    return ExtractError(
        f"{where}: OCR stopped after {done} page image(s) and {elapsed_s:.0f} s, over OCR_FILE_TIMEOUT_S="
        f"{options.file_timeout_s:g}; split the file into smaller ones, or raise the limit"
    )


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
