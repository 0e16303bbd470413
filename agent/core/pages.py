"""A page of a stored document (a PDF's page, an image's frame) as an image, with a cited chunk's lines highlighted
(`RagApp.page_image`, behind `GET /v1/documents/{doc_id}/pages/{n}` and `rag docs page`).

The page comes from the document's kept original (`tools.originals`, `ORIGINALS_DIR`); the highlight from the chunk's
line boxes in its metadata (`tools.highlight`). The chunk, or without one the document, is looked up in the store
within the caller's collections, so a chunk or document of another collection, a chunk of another document, and a
deleted document whose original file was left behind all read exactly like a missing one.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from agent.core.errors import InputError
from agent.core.library import DocumentLibrary
from agent.core.results import location_fields
from tools.access import UNRESTRICTED, Access
from tools.extract import ExtractError, sniff
from tools.extract.formats import is_renderable
from tools.highlight import sentence_boxes
from tools.originals import Originals
from tools.render_page import Box, RenderedPage, RenderError, in_render_thread, render_page

log = logging.getLogger(__name__)


class PageError(LookupError):
    """A page cannot be shown. `kind`: `chunk_not_found` (no such chunk of that document in the collections
    read), `document_not_found` (no such document stored in them), `original_not_kept` (no original file kept for
    the document), `page_not_found` (the document has fewer pages; the message says how many), `not_a_pdf` (the
    original is neither a PDF nor an image, or unreadable); `str(exc)` says which and what to do."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


async def page_image(
    library: DocumentLibrary,
    originals: Originals,
    doc_id: str,
    page: int,
    *,
    chunk_id: str | None = None,
    sentence: tuple[int, int] | None = None,
    collections: Sequence[str] | None = None,
    scale: float = 2.0,
    access: Access = UNRESTRICTED,
) -> RenderedPage:
    """Page `page` (from 1) of document `doc_id`'s kept original, rendered at `scale` pixels per point, with the
    lines of chunk `chunk_id` on that page highlighted (none when no chunk is given, or it lies on other pages).

    Args:
        sentence: `(start, end)` offsets into the chunk's text (a support check's `passage_span`): only the chunk's
            lines that hold those characters are highlighted (`tools.highlight.sentence_boxes`).
        collections: where the document may be (the caller's; None: every collection).
        access: whose reading this is (`tools.access`): a document it may not read is not found (`PageError`).

    Raises:
        PageError: see its kinds.
        agent.core.errors.InputError: `scale` outside the bounds of `tools.render_page`, or a page too large at it;
            `sentence` without a chunk, or outside the chunk's text.
    """
    if sentence is not None and chunk_id is None:
        raise InputError("span needs chunk: it names characters of the chunk to highlight (`span=<start>,<end>`)")
    boxes: list[Box] = []
    if chunk_id is not None:
        found = await library.chunk_metadata(doc_id, chunk_id, collections=collections, access=access)
        if found is None:
            raise PageError(
                "chunk_not_found",
                f"chunk {chunk_id!r} is not a stored chunk of document {doc_id!r} (chunk ids are "
                "`<doc_id>#<index>` as citations give them)",
            )
        collection, metadata, text = found
        lines = [list(b) for b in location_fields(metadata).get("boxes", [])]
        if sentence is not None:
            start, end = sentence
            if not 0 <= start <= end <= len(text):
                raise InputError(
                    f"span {start},{end} is outside chunk {chunk_id!r} ({len(text)} characters): expected "
                    "`<start>,<end>` with 0 <= start <= end <= its length (a sentence's `passage_span`)"
                )
            lines = sentence_boxes(text, lines, start, end)
        boxes = [(b[1], b[2], b[3], b[4]) for b in lines if b[0] == page]
        candidates: Sequence[str] = [collection]
    else:
        stored = await library.find_documents(doc_id, collections=collections, access=access)
        if not stored:
            raise PageError("document_not_found", f"document {doc_id!r} is not stored")
        candidates = [d.collection for d in stored]
    return await in_render_thread(_render_kept, originals, list(candidates), doc_id, page, boxes, scale)


def _render_kept(
    originals: Originals, candidates: list[str], doc_id: str, page: int, boxes: list[Box], scale: float
) -> RenderedPage:
    """Page `page` of the original of `doc_id` kept in the first of `candidates` (collections) holding one: the file
    looked up, its type sniffed and the page rendered in this (render) thread, off the event loop.

    Raises:
        PageError, agent.core.errors.InputError: see `page_image`.
    """
    kept = [p for c in candidates if (p := originals.find(c, doc_id)) is not None]
    if not kept:
        raise PageError(
            "original_not_kept",
            f"document {doc_id!r} has no original file kept (original not kept): it was ingested before originals "
            "were kept, from JSONL or as text (POST /v1/documents), or with KEEP_ORIGINALS=false, or it is not "
            "stored; ingest or upload the file again to keep it",
        )
    path = kept[0]
    kind = sniff(path)
    if not is_renderable(kind):
        raise PageError(
            "not_a_pdf", f"document {doc_id!r} is not a PDF or an image; only PDF and image pages can be shown"
        )
    try:
        return render_page(path, page, boxes, scale, image=kind == "image")
    except RenderError as exc:
        if exc.reason in ("scale", "too_large"):
            raise InputError(f"document {doc_id!r}: {exc}") from None
        if exc.reason == "no_page":
            raise PageError("page_not_found", f"document {doc_id!r}: {exc}") from None
        log.warning("document %r page %d: its original %s cannot be rendered: %s", doc_id, page, path, exc)
        raise PageError("not_a_pdf", f"document {doc_id!r}, page {page}: its kept original is {exc}") from None
    except ExtractError as exc:  # the render worker died on the file: its message names the server's path
        log.warning("document %r page %d: %s", doc_id, page, exc)
        raise PageError(
            "not_a_pdf",
            f"document {doc_id!r}, page {page}: its kept original cannot be rendered (the renderer crashed on it; "
            "a malformed PDF)",
        ) from None
