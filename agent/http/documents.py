"""The document routes: list, add (chunk, embed, store) and delete stored documents, and show a page of one with a
cited chunk highlighted, each within the caller's
collections (`agent.http.deps.Caller`): a document of another collection is never listed, counted or deleted, and
naming it reads exactly like naming a missing one (404 `document_not_found`)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, Field, field_validator

from agent.core.errors import InputError
from agent.core.failures import Failure
from agent.core.pages import PageError
from agent.http.access import given_groups
from agent.http.ask import no_nul
from agent.http.deps import CALLER, AppSettings, Caller, Rag
from agent.http.errors import ERROR_RESPONSES, ApiError, ErrorBody, error_response
from tools.ingest import SourceDocument
from tools.ingest.groups import GROUPS_KEY, with_groups
from tools.render_page import MAX_SCALE, MIN_SCALE

router = APIRouter(dependencies=[CALLER], responses=ERROR_RESPONSES)

CollectionQuery = Annotated[
    str | None,
    Query(description="Only this collection (one of the API key's); default: every collection of the key."),
]


class DocumentIn(BaseModel):
    """One document to ingest through `POST /v1/documents`."""

    doc_id: Annotated[str, Field(min_length=1, max_length=512, description="Document id; a stored id is replaced.")]
    title: Annotated[str, Field(max_length=4000)] = ""
    text: Annotated[str, Field(min_length=1, max_length=2_000_000, description="The document text.")]
    metadata: dict[str, Any] = Field(default_factory=dict, description="Stored with the document (JSON object).")
    source: Annotated[str, Field(max_length=4000, description="Where it came from; deletable by source.")] = "http"
    groups: list[str] | None = Field(
        default=None,
        description="The groups allowed to read it (default: `metadata.groups`, else everyone); only groups you are "
        "in, unless you are an admin of the collection (403 `forbidden_group`).",
    )

    @field_validator("doc_id", "title", "text", "source")
    @classmethod
    def _text(cls, value: str, info: Any) -> str:
        return no_nul(value, str(info.field_name))


class IngestRequest(BaseModel):
    """Body of `POST /v1/documents`."""

    documents: Annotated[list[DocumentIn], Field(min_length=1, max_length=1000)]
    collection: str | None = Field(
        default=None, description="The collection the documents go into (one of the API key's); default `default`."
    )


class IngestResponse(BaseModel):
    """What `POST /v1/documents` did: documents added, skipped (same content already stored), chunks written."""

    added: int
    skipped: int
    chunks: int


class DocumentOut(BaseModel):
    """A stored document."""

    doc_id: str
    title: str
    source: str
    chunks: int
    content_hash: str = Field(description="sha256 hex of title + text.")
    ingested_at: datetime
    collection: str = Field(description="The document's collection; (collection, doc_id) is its identity.")


class DocumentList(BaseModel):
    """`GET /v1/documents`: one page of stored documents ordered by doc id."""

    documents: list[DocumentOut]
    total: int = Field(description="Documents stored in the collections listed (when the page was read).")
    next_cursor: str | None = Field(description="Pass as `cursor` for the next page; null on the last page.")


class CollectionOut(BaseModel):
    """A collection the caller may use."""

    name: str
    documents: int = Field(description="Documents stored in it.")


class CollectionList(BaseModel):
    """`GET /v1/collections`: the collections the caller may search, by name."""

    collections: list[CollectionOut]
    scoped: bool = Field(
        description="True for an API key's holder (exactly its collections, empty ones included); false for the admin "
        "(every collection that holds a document)."
    )


class Deleted(BaseModel):
    """`DELETE /v1/documents/{doc_id}`: the deleted ids."""

    deleted: list[str]


@router.get("/v1/documents", response_model=DocumentList)
async def list_documents(
    rag: Rag,
    caller: Caller,
    collection: CollectionQuery = None,
    limit: Annotated[int, Query(ge=1, le=10_000, description="Documents per page.")] = 100,
    cursor: Annotated[str | None, Query(description="`next_cursor` of the previous page.")] = None,
    offset: Annotated[int, Query(ge=0, description="Documents to skip first (prefer `cursor`).")] = 0,
    q: Annotated[
        str | None,
        Query(
            max_length=512,
            description="Only documents whose doc id or title contains this text (case-insensitive); `total` counts "
            "them. Empty: every document.",
        ),
    ] = None,
) -> DocumentList:
    """One page of the caller's stored documents ordered by doc id (only those whose id or title contains `q`, when
    given), their total, and the cursor of the next page."""
    if q is not None and "\x00" in q:
        raise InputError("q holds a NUL character (\\u0000); expected text without NUL")
    matching = q.strip() if q else None
    page = await rag.document_page(
        limit, cursor, offset, collections=caller.visible(collection), matching=matching or None, access=caller.access
    )
    documents = [DocumentOut(**vars(d)) for d in page.documents]
    return DocumentList(documents=documents, total=page.total, next_cursor=page.next_cursor)


@router.get("/v1/collections", response_model=CollectionList)
async def list_collections(rag: Rag, caller: Caller) -> CollectionList:
    """The collections the caller may search and list (an API key's own; the admin's: every collection holding a
    document), with their document counts; pass them as `collection` / `collections` to narrow a request."""
    counts = await rag.collection_counts(collections=caller.collections, access=caller.access)
    return CollectionList(
        collections=[CollectionOut(name=n, documents=c) for n, c in counts.items()],
        scoped=caller.collections is not None,
    )


def check_size(body: IngestRequest, max_chars: int) -> None:
    """Refuse documents too large to index while the client waits.

    Raises:
        ApiError: 413 `payload_too_large` when their titles and texts hold more than `max_chars` characters
            (`DOCUMENTS_MAX_TEXT_CHARS`), naming the upload route that indexes them in a job.
    """
    total = sum(len(d.title) + len(d.text) for d in body.documents)
    if total > max_chars:
        raise ApiError(
            413,
            "payload_too_large",
            f"the documents hold {total} characters, over DOCUMENTS_MAX_TEXT_CHARS={max_chars}: indexing them would "
            f"outlast the request; upload them as files with POST /v1/documents/files (a job: 202 at once, progress "
            f"at GET /v1/jobs/{{job_id}}), or send fewer per request",
        )


@router.post("/v1/documents", response_model=IngestResponse, status_code=201)
async def add_documents(body: IngestRequest, rag: Rag, caller: Caller, settings: AppSettings) -> IngestResponse:
    """Chunk, embed and store documents in one collection (`default` unless given; 403 `forbidden_collection`
    outside the API key's); the same content again adds nothing, changed content replaces. More than
    `DOCUMENTS_MAX_TEXT_CHARS` characters is 413 `payload_too_large`: upload them with `POST /v1/documents/files`."""
    check_size(body, settings.documents_max_text_chars)
    collection = caller.target(body.collection)
    documents = [
        with_groups(
            SourceDocument(d.doc_id, d.title, d.text, d.source, d.metadata),
            given_groups(caller, collection, d.groups if d.groups is not None else d.metadata.get(GROUPS_KEY)),
        )
        for d in body.documents
    ]
    counts = await rag.add_documents(documents, collection=collection)
    return IngestResponse(added=counts.added, skipped=counts.skipped, chunks=counts.chunks)


@router.delete(
    "/v1/documents/{doc_id:path}",
    response_model=Deleted,
    responses={404: {"model": ErrorBody, "description": "`document_not_found`."}},
)
async def delete_document(
    doc_id: str, rag: Rag, caller: Caller, collection: CollectionQuery = None
) -> Deleted | JSONResponse:
    """Delete one document and its chunks (ids may hold `/`, e.g. `a/handbook.md`) from the collection named, else
    from every collection of the API key; search and answers never return it afterwards. 404 `document_not_found`
    when none of those collections holds it (a document of another key's collection included)."""
    visible = caller.visible(collection)
    readable = caller.access.unrestricted or await rag.get_document(doc_id, caller.scope(None, visible)) is not None
    deleted = await rag.delete_documents([doc_id], collections=visible) if readable else []
    if doc_id not in deleted:
        return error_response(Failure("document_not_found", f"document {doc_id!r} is not stored"))
    return Deleted(deleted=deleted)


PAGE_CACHE = "private, max-age=300"
"""`Cache-Control` of a rendered page: the caller's own (its key chose the collections), for five minutes (a re-ingest
may change the page)."""


@router.get(
    "/v1/documents/{doc_id:path}/pages/{n}",
    response_class=Response,
    responses={
        200: {"content": {"image/png": {}}, "description": "The page as a PNG image, the chunk's lines highlighted."},
        404: {
            "model": ErrorBody,
            "description": "`chunk_not_found` (not a chunk of this document in the key's collections), "
            "`document_not_found` (no chunk asked for, and the document is not stored in them), "
            "`original_not_kept` (no original file kept for the document) or `page_not_found` (names the page "
            "count).",
        },
        422: {
            "model": ErrorBody,
            "description": "`not_a_pdf` (neither a PDF nor an image, or unreadable), or `bad_request` (a scale out of "
            "bounds, a malformed `span`, a `span` without `chunk` or outside the chunk's text).",
        },
    },
)
async def document_page_image(
    doc_id: str,
    rag: Rag,
    caller: Caller,
    n: Annotated[int, Path(ge=1, le=100_000, description="The page, from 1 (a citation's `page`).")],
    chunk: Annotated[
        str | None,
        Query(
            max_length=2000,
            description="The chunk to highlight (a citation's `chunk_id`); it must be a chunk of this document. "
            "Default: the page without highlights.",
        ),
    ] = None,
    span: Annotated[
        str | None,
        Query(
            max_length=40,
            pattern=r"^[0-9]{1,9},[0-9]{1,9}$",
            description="`<start>,<end>`: characters of the chunk's text (a support sentence's `passage_span`) whose "
            "lines alone are highlighted. Needs `chunk`. Default: every line of the chunk.",
        ),
    ] = None,
    collection: CollectionQuery = None,
    scale: Annotated[
        float,
        Query(
            ge=MIN_SCALE,
            le=MAX_SCALE,
            description="Pixels per point (PDF points; an image's at its own dpi): 1 = 72 dpi, 2 = 144 dpi.",
        ),
    ] = 2.0,
) -> Response:
    """Page `n` of a stored PDF, or frame `n` of a stored image (PNG, JPEG, TIFF; ids may hold `/`), as a PNG image
    rendered from its kept original file, with the
    lines of the chunk `chunk` on that page drawn as translucent highlights (the chunk's `boxes`, as citations carry
    them). A document outside the key's collections reads like a missing one."""
    if chunk is not None and "\x00" in chunk:
        raise InputError("chunk holds a NUL character (\\u0000); expected a chunk id")
    sentence = None
    if span is not None:
        start, end = (int(part) for part in span.split(","))
        sentence = (start, end)
    try:
        rendered = await rag.page_image(
            doc_id,
            n,
            chunk_id=chunk,
            sentence=sentence,
            collections=caller.visible(collection),
            scale=scale,
            access=caller.access,
        )
    except PageError as exc:
        return error_response(Failure(exc.kind, str(exc)))
    return Response(rendered.png, media_type="image/png", headers={"Cache-Control": PAGE_CACHE})
