"""A page of a kept original PDF or image as a PNG image, with a passage's line boxes drawn on it as translucent
highlights: what `GET /v1/documents/{doc_id}/pages/{n}` and `rag docs page` return.

PDFium renders the page (its crop box, as a viewer shows it) in a worker process of its own (`RENDERER`, a
`tools.extract.pdfium_worker.PdfiumWorker` apart from the ingest's `tools.extract.pdf.EXTRACTOR`, so a page asked for is
not queued behind a long scan's OCR; PDFium is not thread-safe, and a malformed file crashes that process, not the
caller); Pillow draws the boxes there too. Async callers wait for it in `RENDER_THREADS` threads of their own
(`in_render_thread`), not in the event loop's default executor: at most that many renders run at once, the others wait
in its queue without holding a thread. A box `(left, bottom, right, top)` in PDF points becomes the pixels `((left - x0)
* scale, (y1 - top) * scale, (right - x0) * scale, (y1 - bottom) * scale)`, where `(x0, y1)` is the top-left corner of
the page as shown: `x0` and `y0` the left and bottom of its crop box (within the media box), `y1 = y0 + h` with `h`
the height shown. A page shown turned (`/Rotate`) has its boxes on the page as shown (the crop box turned about its
bottom-left corner, `tools.extract.pdf`), so the same mapping highlights it.

An image's page n is its frame n (`render_image_here`), decoded by Pillow in the same worker process, turned upright
as its EXIF orientation says and scaled to `scale` pixels per point at the image's own dpi, as OCR measured its boxes
(`tools.extract.image`): a box becomes `(left * scale, (h - top) * scale, right * scale, (h - bottom) * scale)`, `h`
the upright frame's height in points.
"""

from __future__ import annotations

import asyncio
import functools
import io
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import pypdfium2 as pdfium
from PIL import Image, ImageDraw, UnidentifiedImageError

from tools.extract.image import upright
from tools.extract.ocr import MAX_OCR_PIXELS
from tools.extract.pdfium_worker import PDFIUM_LOCK, PdfiumWorker

MIN_SCALE = 0.25
MAX_SCALE = 4.0
"""Bounds of the render scale (pixels per PDF point: 1 is 72 dpi, 2 is 144 dpi)."""
MAX_PIXELS = 40_000_000
"""Largest image rendered (width x height); a larger page at the scale asked for is refused."""
HIGHLIGHT = (255, 214, 0, 96)
"""Fill of a highlighted line (RGBA: a translucent yellow)."""
OUTLINE = (230, 150, 0, 200)

RENDER_THREADS = 2
"""Renders waited for at once (`in_render_thread`); more wait in its queue."""
RENDERER = PdfiumWorker()
"""The process-wide worker process pages are rendered in (one process, started at the first render; `close`)."""
_THREADS = ThreadPoolExecutor(RENDER_THREADS, thread_name_prefix="page-render")
T = TypeVar("T")

Box = tuple[float, float, float, float]
"""`(left, bottom, right, top)` in PDF points, page space (origin at the page's bottom left)."""


class RenderError(ValueError):
    """A page cannot be rendered (the message does not name the file, which callers may keep from their clients).
    `reason`: `unreadable` (no PDF PDFium can read, or no image Pillow can), `no_page` (the page is not in
    it; `pages` says how many it has), `too_large` (over `MAX_PIXELS` at that scale) or `scale` (outside
    [`MIN_SCALE`, `MAX_SCALE`])."""

    def __init__(self, message: str, reason: str, pages: int = 0) -> None:
        super().__init__(message, reason, pages)
        self.message = message
        self.reason = reason
        self.pages = pages

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True)
class RenderedPage:
    """A rendered page: `png` bytes, `width` x `height` pixels, the document's page count `pages`."""

    png: bytes
    width: int
    height: int
    pages: int


def _check_pixels(width: float, height: float, scale: float, page: int, pages: int) -> None:
    """Raise RenderError ("too_large") when a `width` x `height` point page at `scale` is over `MAX_PIXELS`."""
    if width * height * scale * scale > MAX_PIXELS:
        raise RenderError(
            f"page {page} at scale {scale} would be {width * scale:.0f}x{height * scale:.0f} pixels, "
            f"over {MAX_PIXELS}; ask for a smaller scale",
            "too_large",
            pages,
        )


def render_here(path: str, page: int, boxes: Sequence[Box], scale: float) -> RenderedPage:
    """Page `page` (from 1) of the PDF `path` at `scale` pixels per point, `boxes` highlighted; in this process
    (the worker's target: call `render_page` elsewhere).

    Raises:
        RenderError: not a readable PDF, no page `page`, or too large an image at this scale.
    """
    with PDFIUM_LOCK:
        try:
            document = pdfium.PdfDocument(path)
        except pdfium.PdfiumError as exc:
            raise RenderError(f"not a PDF PDFium can read ({exc})", "unreadable") from None
        try:
            pages = len(document)
            if not 1 <= page <= pages:
                raise RenderError(f"page {page} is not in the document: it has {pages} page(s)", "no_page", pages)
            pdf_page = document[page - 1]
            try:
                width, height = pdf_page.get_size()
                _check_pixels(width, height, scale, page, pages)
                left, bottom, _, _ = pdf_page.get_bbox()  # the crop box within the media box
                bitmap = pdf_page.render(scale=scale)
                try:
                    image = bitmap.to_pil().convert("RGBA")
                finally:
                    bitmap.close()
            finally:
                pdf_page.close()
        finally:
            document.close()
    return _finish(image, boxes, scale, (left, bottom + height), pages)


def _finish(
    image: Image.Image, boxes: Sequence[Box], scale: float, corner: tuple[float, float], pages: int
) -> RenderedPage:
    """`image` (RGBA) with `boxes` drawn as highlights (`corner`: its top-left corner in points), as a PNG."""
    left, top = corner
    if boxes:
        overlay = Image.new("RGBA", image.size, (0, 0, 0, 0))
        draw = ImageDraw.Draw(overlay)
        for b_left, b_bottom, b_right, b_top in boxes:
            x0, x1 = (b_left - left) * scale, (b_right - left) * scale
            y0, y1 = (top - b_top) * scale, (top - b_bottom) * scale
            draw.rectangle((x0, y0, x1, y1), fill=HIGHLIGHT, outline=OUTLINE, width=max(1, round(scale)))
        image = Image.alpha_composite(image, overlay)
    out = io.BytesIO()
    image.convert("RGB").save(out, format="PNG", optimize=False)
    return RenderedPage(out.getvalue(), image.width, image.height, pages)


def render_image_here(path: str, page: int, boxes: Sequence[Box], scale: float) -> RenderedPage:
    """Frame `page` (from 1) of the image `path`, upright (EXIF orientation) and at `scale` pixels per point of its
    own dpi, `boxes` highlighted; in this process (the worker's target: call `render_page` elsewhere).

    Raises:
        RenderError: not an image Pillow can read, no frame `page`, a frame over `MAX_OCR_PIXELS` (not decoded), or
            too large an image at this scale.
    """
    try:
        with Image.open(path) as image:
            pages = getattr(image, "n_frames", 1)
            if not 1 <= page <= pages:
                raise RenderError(f"page {page} is not in the document: it has {pages} page(s)", "no_page", pages)
            image.seek(page - 1)
            if image.width * image.height > MAX_OCR_PIXELS:
                raise RenderError(
                    f"page {page} is {image.width}x{image.height} pixels, over {MAX_OCR_PIXELS}", "too_large", pages
                )
            frame, (dpi_x, dpi_y) = upright(image)
            width, height = frame.width * 72 / dpi_x, frame.height * 72 / dpi_y
            _check_pixels(width, height, scale, page, pages)
            size = (max(1, round(width * scale)), max(1, round(height * scale)))
            picture = frame.convert("RGBA").resize(size, Image.Resampling.LANCZOS)
    except RenderError:
        raise
    except (UnidentifiedImageError, Image.DecompressionBombError, SyntaxError, ValueError, OSError) as exc:
        cause = str(exc).replace(repr(path), "the file").replace(path, "the file")  # Pillow names the path
        raise RenderError(f"not an image Pillow can read ({cause})", "unreadable") from None
    return _finish(picture, boxes, scale, (0.0, height), pages)


def render_page(
    path: Path, page: int, boxes: Sequence[Box] = (), scale: float = 2.0, *, image: bool = False
) -> RenderedPage:
    """`render_here` (or with `image`, `render_image_here`) in the render worker process (`RENDERER`; blocks: call
    it through `in_render_thread` in async code).

    Raises:
        RenderError: see `render_here`; `scale` outside [`MIN_SCALE`, `MAX_SCALE`].
        tools.extract.ExtractError: the worker process died on this file.
    """
    if not MIN_SCALE <= scale <= MAX_SCALE:
        raise RenderError(f"scale={scale}; expected {MIN_SCALE} to {MAX_SCALE} (pixels per PDF point)", "scale")
    target = render_image_here if image else render_here
    return RENDERER.call(target, str(path), page, [tuple(b) for b in boxes], scale, path=path)


async def in_render_thread(fn: Callable[..., T], *args: object) -> T:
    """`fn(*args)` (a blocking call that renders: `render_page`, with the file look-ups around it) in one of the
    `RENDER_THREADS` render threads; awaits its result or exception."""
    return await asyncio.get_running_loop().run_in_executor(_THREADS, functools.partial(fn, *args))


def close() -> None:
    """Stop the render worker process (waits for the render it is doing); the next render starts a new one."""
    RENDERER.close()
