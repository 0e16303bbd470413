"""PDF: the text layer, page by page, with PDFium (`pypdfium2`), in a separate worker process (`PdfExtractor`).

Chosen over `pypdf` for speed at equal fidelity (measured by `python -m evals.extract_bench`, results in
`evals/results/extract_bench.json` and docs/evaluations.md, "Format fidelity"). PDFium reads the file through a file
handle, one page at a time, so memory holds one page's text objects (plus the text kept).

What a page shows is what is extracted:
- a page cropped with a `CropBox` smaller than its `MediaBox` gives only the text inside the crop box (PDFium's
  bounded text);
- a page shown turned (`/Rotate`), or whose text is stored turned (a landscape table turned on a portrait sheet and
  shown upright with `/Rotate`), reads upright, in lines top to bottom and with a table's cells apart, as the same page
  shown upright reads: PDFium orders lines and infers spaces on the page as shown, and breaks turned text into one
  character per line, so the page's objects are turned upright in memory and its `/Rotate` set to 0 while its text
  is read (`_turned_page_text`; nothing is written back, and `/Rotate` is restored);
- a page with text turned different ways (a rotated block beside upright text) is read by `pypdf`, which follows each
  run of text's own direction (its crop box is not applied then);
- typographic ligatures (U+FB00..FB06, ﬁ ﬂ ﬀ ...) come out as their letters, from fonts embedded simple or CID-keyed
  (Type0, Identity-H; how Chromium and most office suites embed fonts).

Each character keeps its box on the page (`Extracted.layout`, PDFium's `FPDFText_GetCharBox`), so a cited passage can
be highlighted on the rendered page: the cleaning of the page text (`_clean_located`) carries the boxes along, and a
page whose text cannot be aligned with PDFium's characters one to one, or read by pypdf, has no boxes (NaN) rather
than wrong ones. A turned page's boxes are on the page as shown (`_shown_boxes`: the crop box turned by `/Rotate`
about its bottom-left corner), as `tools.render_page` draws them on the page rendered with `/Rotate` applied.

PDFium is not thread-safe, and a malformed or hostile PDF can crash it (a segfault ends the process): every PDF is
read in a worker process (`PdfExtractor`, a `tools.extract.pdfium_worker.PdfiumWorker`: one process, started with
`spawn`), where `PDFIUM_LOCK` serialises the calls into PDFium. A worker that dies fails the file it was reading
(`ExtractError`) and the next file starts a new one; the calling process (`rag serve`, an ingest) goes on.

A page without a text layer (a scan), or with fewer than `OCR_MIN_CHARS` characters of text, is rendered by PDFium and
read by Tesseract (`tools.extract.ocr`) in the same worker process, several pages at once (`OCR_WORKERS` tesseract
processes); with `OCR=false` a PDF without text is refused as before. Layout models that would need downloaded weights
are left out.
"""

from __future__ import annotations

import ctypes
import logging
import math
import re
import time
import unicodedata
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pypdfium2 as pdfium
import pypdfium2.raw as pdfium_c

from tools.extract import located
from tools.extract.base import Extracted, ExtractError, Layout, Section, tidy
from tools.extract.ocr import (
    OcrOptions,
    PageBoxes,
    PageImage,
    progress_logger,
    read_pages,
    render_page,
    tesseract_installed,
)
from tools.extract.pdfium_worker import PDFIUM_LOCK, PdfiumWorker

log = logging.getLogger(__name__)
_PEEK_BYTES = 65_536
_NO_PAGES = re.compile(rb"/Type\s*/Pages\b[^>]*?/Count\s+0\b|/Count\s+0\b[^>]*?/Type\s*/Pages\b")
_SOFT_HYPHEN_BREAK = "\ufffe\r\n"
"""PDFium marks a word hyphenated across a line end with U+FFFE before the line break: the word is rejoined."""
_LIGATURES = re.compile("[\ufb00-\ufb06]")
_DROPPED = (re.compile(_SOFT_HYPHEN_BREAK), re.compile("\ufffe"), re.compile("\x02"))
"""What `_clean` deletes, in its order: the soft-hyphen line breaks, then lone U+FFFE and U+0002."""
_ROTATED_RAD = 0.05
"""A character whose baseline turns more than this from a quarter turn, radians (about 3°), is text turned off the
page's axes (the page is then read by `_rotated_text`)."""
_CROP_SLACK_PT = 0.5
"""A crop box within this of the media box on every side (points) is no crop."""


def _letters(text: str) -> str:
    """`text` with typographic ligatures (U+FB00..FB06) replaced by their letters (NFKC of those characters only)."""
    return _LIGATURES.sub(lambda m: unicodedata.normalize("NFKC", m.group()), text)


Boxes = npt.NDArray[np.float32]
"""`(n, 4)` float32 character boxes `(left, bottom, right, top)` in PDF points; NaN rows for characters without one."""


def _clean(raw: str) -> str:
    return tidy(_letters(raw.replace(_SOFT_HYPHEN_BREAK, "").replace("\ufffe", "").replace("\x02", "")))


def _clean_located(raw: str, boxes: Boxes) -> tuple[str, Boxes]:
    """`_clean(raw)` and the box of each of its characters, from `boxes` (one row per character of `raw`): the
    letters of a ligature share its box; characters the cleaning generates have NaN boxes.

    Raises:
        ValueError: `boxes` has not one row per character of `raw`.
    """
    if len(boxes) != len(raw):
        raise ValueError(f"{len(boxes)} boxes for {len(raw)} characters")
    text, sources = raw, np.arange(len(raw), dtype=np.intp)
    for pattern in _DROPPED:
        text, sources = located.substitute(text, sources, pattern, lambda _: "", "tail")
    text, sources = located.substitute(
        text, sources, _LIGATURES, lambda found: unicodedata.normalize("NFKC", found), "spread"
    )
    text, sources = located.tidy(text, sources)
    table = np.vstack([boxes.astype(np.float32, copy=False), np.full((1, 4), np.nan, dtype=np.float32)])
    return text, table[sources]  # source -1 picks the NaN row


def _no_boxes(length: int) -> Boxes:
    return np.full((length, 4), np.nan, dtype=np.float32)


def _char_boxes(textpage: pdfium.PdfTextPage, chars: list[int]) -> Boxes:
    """The boxes of the characters `chars` (indexes into the text page's character list; -1: none), NaN for -1 and
    for characters PDFium generated (line breaks and spaces it inferred)."""
    out = _no_boxes(len(chars))
    for row, char in enumerate(chars):
        if char >= 0 and not pdfium_c.FPDFText_IsGenerated(textpage.raw, char):
            out[row] = textpage.get_charbox(char)
    return out


def _range_chars(textpage: pdfium.PdfTextPage, raw: str) -> list[int] | None:
    """Per character of `raw` (the page's `get_text_range()`), its index in the text page's character list (-1 for
    none); None where the two cannot be aligned one to one (a character outside UTF-16's basic plane, text PDFium
    inserted): the page then gets no boxes rather than wrong ones."""
    count = textpage.count_chars()
    if len(raw) != count:
        return None
    chars: list[int] = []
    for index, char in enumerate(raw):
        source = pdfium_c.FPDFText_GetCharIndexFromTextIndex(textpage.raw, index)
        if source >= 0 and char != "\ufffe" and pdfium_c.FPDFText_GetUnicode(textpage.raw, source) != ord(char):
            return None  # U+FFFE stands for PDFium's hyphen marks (0x2) in the text
        chars.append(source)
    return chars


def _bounded_chars(textpage: pdfium.PdfTextPage, crop: tuple[float, float, float, float], raw: str) -> list[int] | None:
    """Per character of `raw` (the page's `get_text_bounded(*crop)`), its index in the character list (-1 for a
    character the bounded text generated), found by replaying PDFium's `CPDF_TextPage::GetTextByPredicate` (a
    character is kept when its box intersects the crop box; a line break goes before the first kept character of
    a new line; a space not kept is kept as a separator after a kept character). None when the replay does not
    give `raw` exactly (another PDFium version): the page then gets no boxes."""
    left, bottom, right, top = (float(np.float32(v)) for v in crop)
    out: list[str] = []
    chars: list[int] = []
    posy = 0.0
    contains_previous = False
    add_line_feed = False
    handle = textpage.raw
    origin_x, origin_y = ctypes.c_double(), ctypes.c_double()
    for index in range(textpage.count_chars()):
        unicode = pdfium_c.FPDFText_GetUnicode(handle, index)
        b_left, b_bottom, b_right, b_top = textpage.get_charbox(index)
        inside = max(left, min(b_left, b_right)) < min(right, max(b_left, b_right)) and max(
            bottom, min(b_bottom, b_top)
        ) < min(top, max(b_bottom, b_top))
        if inside:
            pdfium_c.FPDFText_GetCharOrigin(handle, index, origin_x, origin_y)
            if abs(posy - origin_y.value) > 0 and not contains_previous and add_line_feed:
                posy = origin_y.value
                if out:
                    out.extend("\r\n")
                    chars.extend((-1, -1))
            contains_previous = True
            add_line_feed = False
            if unicode:
                out.append(chr(unicode))
                chars.append(index)
        elif unicode == ord(" "):
            if contains_previous:
                out.append(" ")
                chars.append(-1)
                contains_previous = False
                add_line_feed = False
        else:
            contains_previous = False
            add_line_feed = True
    return chars if "".join(out) == raw else None


def _text_turn(textpage: pdfium.PdfTextPage) -> int | None:
    """How far the page's text is turned clockwise in page space, degrees (0, 90, 180 or 270: PDFium's character
    angles; 0 without text), or None where characters are turned different ways or off a quarter turn by more than
    `_ROTATED_RAD` (a rotated block beside upright text: read by `_rotated_text`). The line breaks and spaces PDFium
    generates, at angle 0 on any page, and whitespace are not counted as upright text on a turned page."""
    handle = textpage.raw
    count = textpage.count_chars()
    angles = np.fromiter((pdfium_c.FPDFText_GetCharAngle(handle, i) for i in range(count)), np.float64, count)
    known = angles >= 0  # -1: PDFium could not tell
    quarters = np.rint(angles / (math.pi / 2))
    if (known & (np.abs(angles - quarters * math.pi / 2) > _ROTATED_RAD)).any():
        return None
    quarters %= 4
    turns = set(quarters[known & (quarters != 0)].astype(int).tolist())
    if len(turns) != 1:
        return None if turns else 0
    for index in np.flatnonzero(known & (quarters == 0)).tolist():
        generated = pdfium_c.FPDFText_IsGenerated(handle, index)
        if not generated and not chr(pdfium_c.FPDFText_GetUnicode(handle, index)).isspace():
            return None  # upright text beside turned text
    return int(turns.pop()) * 90


def _crop(page: pdfium.PdfPage) -> tuple[float, float, float, float] | None:
    """The page's crop box (left, bottom, right, top; points) when it cuts into the media box; else None."""
    crop: tuple[float, float, float, float] = tuple(page.get_cropbox())
    media: tuple[float, float, float, float] = tuple(page.get_mediabox())
    inside = crop[0] >= media[0] and crop[1] >= media[1] and crop[2] <= media[2] and crop[3] <= media[3]
    if inside and all(abs(c - m) <= _CROP_SLACK_PT for c, m in zip(crop, media, strict=True)):
        return None
    return crop


def _located_text(
    textpage: pdfium.PdfTextPage, crop: tuple[float, float, float, float] | None
) -> tuple[str, Boxes | None]:
    """The text page's raw text (all of it, or what lies in `crop`) and its characters' boxes in the text page's
    space (None where the text cannot be aligned with PDFium's characters)."""
    if crop is None:
        raw: str = textpage.get_text_range()
        chars = _range_chars(textpage, raw)
    else:
        raw = textpage.get_text_bounded(*crop)
        chars = _bounded_chars(textpage, crop, raw)
    return raw, None if chars is None else _char_boxes(textpage, chars)


def _clockwise(degrees: int) -> npt.NDArray[np.float64]:
    """The 2x2 matrix turning points `degrees` (a multiple of 90) clockwise about the origin (`matrix @ (x, y)`)."""
    quarter = degrees // 90 % 4
    cos, sin = (1, 0, -1, 0)[quarter], (0, 1, 0, -1)[quarter]
    return np.array([[cos, sin], [-sin, cos]], np.float64)


def _shown_boxes(boxes: Boxes, turn: int, rotation: int, cropbox: tuple[float, float, float, float]) -> Boxes:
    """`boxes` (`(n, 4)` float32, `(left, bottom, right, top)`, NaN rows kept) measured in page space turned `turn`
    degrees counter-clockwise (a multiple of 90: where text turned `turn` degrees clockwise stands upright), mapped
    onto the page as shown: its crop box `cropbox` (page space) turned
    `rotation` degrees clockwise (`/Rotate`) about its own bottom-left corner, which stays where it is; x runs to the
    right and y up as the page is shown (0, 0: page space itself)."""
    to_shown = _clockwise(rotation)
    corners = np.array([[cropbox[0], cropbox[1]], [cropbox[2], cropbox[3]]], np.float64) @ to_shown.T
    offset = np.array(cropbox[:2], np.float64) - corners.min(axis=0)
    turned = _clockwise(rotation + turn).T
    low = boxes[:, :2].astype(np.float64) @ turned + offset
    high = boxes[:, 2:].astype(np.float64) @ turned + offset
    return np.hstack([np.minimum(low, high), np.maximum(low, high)]).astype(np.float32)


def _turned_page_text(page: pdfium.PdfPage, turn: int, rotation: int) -> tuple[str, Boxes | None]:
    """The raw text and boxes of a page whose text is turned `turn` degrees clockwise or that is shown turned
    (`rotation`, its `/Rotate`): its objects are turned upright in memory and `/Rotate` set to 0 while PDFium reads
    the text (PDFium orders lines and infers spaces on the page as shown), then restored (nothing is written to the
    file). The boxes are on the page as shown (`_shown_boxes`)."""
    crop = _crop(page)
    cropbox: tuple[float, float, float, float] = tuple(page.get_bbox())  # the crop box within the media box
    upright = pdfium.PdfMatrix().rotate(turn, ccw=True)
    for obj in page.get_objects(max_depth=0):
        obj.transform(upright)
    page.set_rotation(0)
    try:
        textpage = page.get_textpage()
        try:
            raw, boxes = _located_text(textpage, None if crop is None else upright.on_rect(*crop))
        finally:
            textpage.close()
    finally:
        page.set_rotation(rotation)
    return raw, None if boxes is None else _shown_boxes(boxes, turn, rotation, cropbox)


def _page_text(document: pdfium.PdfDocument, index: int) -> tuple[str, Boxes | None] | None:
    """The page's text, read upright and in lines as the page is shown, and each of its characters' box on the page
    as shown (`Boxes`; None where the text cannot be aligned with PDFium's characters), or None: the page has text
    turned different ways, to be read by `_rotated_text`."""
    page = document[index]
    try:
        rotation = page.get_rotation() % 360
        textpage = page.get_textpage()
        try:
            turn = _text_turn(textpage)
            read = _located_text(textpage, _crop(page)) if turn == 0 and rotation == 0 else None
        finally:
            textpage.close()
        if turn is None:
            return None
        raw, boxes = _turned_page_text(page, turn, rotation) if read is None else read
    finally:
        page.close()
    if boxes is None:
        return _clean(raw), None
    return _clean_located(raw, boxes)


def _rotated_text(path: Path, indexes: list[int]) -> dict[int, str]:
    """The text of the pages `indexes` (0-based) as pypdf reads it, in each run of text's own direction."""
    import pypdf

    try:
        reader = pypdf.PdfReader(path)
        return {i: _clean(reader.pages[i].extract_text()) for i in indexes}
    except (pypdf.errors.PyPdfError, ValueError, KeyError) as exc:
        raise ExtractError(f"{path}: a page with rotated text cannot be read ({exc}); the file is corrupt") from None


def _load_failure(path: Path, exc: pdfium.PdfiumError) -> str:
    """Why PDFium could not open `path`. PDFium's error code is process-wide state that a failed load does not
    always reset (an empty document fails with the code of the previous failure), so the cause is read from the
    file's own dictionaries where it can be: an `/Encrypt` entry in a trailer (ISO 32000-1 §7.6.1) or a page tree
    with `/Count 0` (§7.7.3.2), looked for in the first and last `_PEEK_BYTES` bytes."""
    size = path.stat().st_size
    with path.open("rb") as handle:
        head = handle.read(_PEEK_BYTES)
        handle.seek(max(0, size - _PEEK_BYTES))
        tail = handle.read(_PEEK_BYTES)
    if b"/Encrypt" in head or b"/Encrypt" in tail:
        return "the PDF is encrypted (password-protected); expected an unprotected PDF"
    if _NO_PAGES.search(head) or _NO_PAGES.search(tail):
        return "the PDF has no pages"
    return f"not a readable PDF ({exc}); the file is corrupt or truncated"


def _title(document: pdfium.PdfDocument) -> str:
    try:
        title = str(document.get_metadata_dict().get("Title", "")).strip()
    except pdfium.PdfiumError:
        return ""
    return title


def extract_here(path: str | Path, ocr: OcrOptions | None = None) -> Extracted:
    """Text of every page of `path`, pages joined by a blank line; one `Section` per page that has text; each
    character's page and box (`Extracted.layout`, see `_assemble`); read in this process (the worker's target: call
    `extract_pdf` elsewhere). Pages with less text than `ocr.min_chars` are OCR'd (`_ocr_short_pages`; their boxes
    are the words' boxes Tesseract gives) unless `ocr.enabled` is false (default options: `OcrOptions()`).

    The title is the document information `Title` when set, else the first line of text.

    Raises:
        ExtractError: not a PDF PDFium can read (corrupt or truncated), encrypted with a password, no pages, no
            text on any page (no text layer, and OCR off or reading none), or OCR failed (tesseract missing, a
            language's data missing; names the file).
    """
    ocr = OcrOptions() if ocr is None else ocr
    path = Path(path)
    with PDFIUM_LOCK:
        try:
            document = pdfium.PdfDocument(path)
        except pdfium.PdfiumError as exc:
            raise ExtractError(f"{path}: {_load_failure(path, exc)}") from None
        try:
            pages = len(document)
            read = [_page_text(document, i) for i in range(pages)]
            sizes = tuple(document.get_page_size(i) for i in range(pages))
            # --- OCR of pages without (enough) text: their text and boxes replaced ---
            ocr_start = time.perf_counter()
            texts = [None if page is None else page[0] for page in read]
            scanned = _ocr_short_pages(document, texts, ocr, path) if ocr.enabled else {}
            ocr_s = time.perf_counter() - ocr_start
            read = [(scanned[i][0], scanned[i][1]) if i in scanned else page for i, page in enumerate(read)]
            # --- end OCR ---
            title = _title(document)
        except pdfium.PdfiumError as exc:
            raise ExtractError(f"{path}: a page cannot be read ({exc}); the file is corrupt") from None
        finally:
            document.close()
    rotated = _rotated_text(path, [i for i, page in enumerate(read) if page is None]) if None in read else {}
    page_texts = [(rotated[i], None) if page is None else page for i, page in enumerate(read)]
    if pages == 0:
        raise ExtractError(f"{path}: the PDF has no pages")
    if not any(text for text, _ in page_texts):
        if ocr.enabled:
            raise ExtractError(
                f"{path}: no text on any of its {pages} page(s): no text layer, and OCR (OCR_LANGUAGE="
                f"{ocr.language}) read none; expected a PDF with selectable text or legible scanned text"
            )
        raise ExtractError(
            f"{path}: no text layer on any of its {pages} page(s) (a scanned PDF?), and OCR is off (OCR=false); "
            "expected a PDF with selectable text, or set OCR=true"
        )
    body, sections, layout = _assemble(page_texts, sizes)
    title = title or body.split("\n", 1)[0].strip()
    return Extracted(body, title, sections, pages, layout, ocr_pages=len(scanned), ocr_s=ocr_s)


def _assemble(
    pages: list[tuple[str, Boxes | None]], sizes: tuple[tuple[float, float], ...]
) -> tuple[str, tuple[Section, ...], Layout | None]:
    """A document's text, sections and layout from its pages in order: per page its text and each character's box
    (`Boxes`, one row per character; None: positions unknown, as for a page read by pypdf).

    Pages without text are left out; the others are joined by a blank line (`"\n\n"`, no page, NaN boxes), with one
    `Section` per page at its first character. A character gets its page number in the layout when its box is
    known, else page 0 (NaN). The layout is None when no character has a box.

    Args:
        sizes: `(width, height)` in points of each page (index n - 1 for page n), as `Layout.page_sizes`.
    """
    parts: list[str] = []
    sections: list[Section] = []
    numbers: list[npt.NDArray[np.int32]] = []
    boxes: list[Boxes] = []
    offset = 0
    for number, (text, page_boxes) in enumerate(pages, 1):
        if not text:
            continue
        if parts:
            offset += 2
            numbers.append(np.zeros(2, dtype=np.int32))
            boxes.append(_no_boxes(2))
        sections.append(Section(offset, page=number))
        parts.append(text)
        offset += len(text)
        if page_boxes is None or len(page_boxes) != len(text):
            page_boxes = _no_boxes(len(text))
        known = ~np.isnan(page_boxes).any(axis=1)
        numbers.append(np.where(known, number, 0).astype(np.int32))
        boxes.append(page_boxes.astype(np.float32, copy=False))
    body = "\n\n".join(parts)
    if not boxes:
        return body, tuple(sections), None
    page_of = np.concatenate(numbers)
    if not page_of.any():
        return body, tuple(sections), None
    all_boxes = np.concatenate(boxes)
    all_boxes[page_of == 0] = np.nan
    sizes = tuple((float(w), float(h)) for w, h in sizes)
    return body, tuple(sections), Layout(page_of, all_boxes, sizes)


def _ocr_short_pages(
    document: pdfium.PdfDocument, read: list[str | None], ocr: OcrOptions, path: Path
) -> dict[int, tuple[str, PageBoxes, tuple[float, float]]]:
    """index -> (text, character boxes, page size in points) of each page whose text layer has fewer than
    `ocr.min_chars` characters, OCR'd; the text layer is kept where OCR reads less (a page number alone, say).
    Pages with text turned different ways (None in `read`) are not OCR'd. Called with `PDFIUM_LOCK` held (pages are
    rendered one at a time, read by `ocr.workers` tesseract processes at once)."""
    short = [i for i, text in enumerate(read) if text is not None and len(text) < ocr.min_chars]
    if short and not tesseract_installed() and any(text and len(text) >= ocr.min_chars for text in read):
        # A PDF with text whose other pages are (near) empty, e.g. a blank separator page, stays readable on a
        # machine without Tesseract; a PDF with no text at all still fails, naming the missing command.
        log.warning("%s: %d page(s) without text not OCR'd: tesseract is not installed", path, len(short))
        return {}

    def rendered() -> Iterator[tuple[tuple[int, tuple[float, float]], PageImage]]:
        for index in short:
            image = render_page(document, index, ocr.dpi)
            yield (index, image.page_size), image

    out: dict[int, tuple[str, PageBoxes, tuple[float, float]]] = {}
    progress = progress_logger(str(path), len(short))
    for (index, size), text, boxes in read_pages(rendered(), ocr, str(path), progress):
        if len(text) >= len(read[index] or ""):
            out[index] = (text, boxes, size)
    return out


class PdfExtractor(PdfiumWorker):
    """`extract_here` in a PDFium worker process (`tools.extract.pdfium_worker.PdfiumWorker`): PDFium's crashes and
    its thread-unsafety stay out of the caller. Thread-safe; callers block in `extract` (call it from a thread, as
    the ingest pipeline does).

    Args:
        target: what a worker runs for a path and the OCR options (`extract_here`; tests pass one that crashes).
            Must be importable by name (a module-level function) for the spawned worker.
        max_workers: worker processes (PDFium is serialised within each).
    """

    def __init__(
        self, target: Callable[[str, OcrOptions | None], Extracted] = extract_here, max_workers: int = 1
    ) -> None:
        super().__init__(max_workers)
        self.target = target

    def extract(self, path: Path, ocr: OcrOptions | None = None) -> Extracted:
        """`extract_here(path, ocr)` run by a worker process; blocks until it is done.

        Raises:
            ExtractError: what `extract_here` raises, or the worker process died under this file `WORKER_DEATHS`
                times (names the file; the file is not retried again).
            OSError: the file cannot be read.
        """
        return self.call(self.target, str(path), ocr, path=path)


EXTRACTOR = PdfExtractor()
"""The process-wide PDF extractor that `extract_pdf` uses."""


def extract_pdf(path: Path, ocr: OcrOptions | None = None) -> Extracted:
    """`extract_here(path, ocr)` in the process-wide worker process (`EXTRACTOR`); see `PdfExtractor.extract`.

    Raises:
        ExtractError: corrupt, encrypted, no pages, no text (see `extract_here`), OCR failed, or the worker process
            died while reading it (names the file).
        OSError: the file cannot be read.
    """
    return EXTRACTOR.extract(path, ocr)
