"""The HTTP API (FastAPI), served by `rag serve`:

- `POST /v1/ask` `{"question": ..., "top_k": 5, "policy": "always"}` → the `AskResult` JSON of `rag ask --json`.
- `POST /v1/ask/stream` (same body) → Server-Sent Events: `text`, `restart`, `tool_call`, `tool_result` events
  (the `agent.events` models as JSON), then one `result` (the `AskResult`) or one `error` (an `ErrorBody`).
- `GET /v1/documents?limit=&offset=` → `{"documents": [{doc_id, title, source, chunks, content_hash,
  ingested_at}]}`; `DELETE /v1/documents/{doc_id}` → `{"deleted": [doc_id]}` (404 when not stored);
  `POST /v1/documents` `{"documents": [{doc_id, title, text, metadata, source}]}` → `{"added", "skipped", "chunks"}`.
- `GET /health` → `{"ok": bool, "checks": {"triton" | "postgres" | "llm": {"ok", "detail", "ms"}}}`, 503 unless all
  pass.
- `GET /` → a small web chat page (`agent/web/index.html`) that uses the streaming endpoint.

Errors: every error body is an `ErrorBody` `{"error": kind, "detail": message}` — request validation included —
with the status from `STATUS_OF_KIND` (the kinds of `agent.failures.describe`); a dependency that is down or
overloaded (Triton, Postgres, the LLM) answers 503 with `Retry-After`, a timeout 504. With `API_KEY` set, every route
except `/health` and the page needs `Authorization: Bearer <key>` (401 with `WWW-Authenticate: Bearer` otherwise).
One `RagApp` serves all requests; its clients reconnect by themselves after a dependency restarts.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.sse import EventSourceResponse, ServerSentEvent
from pydantic import BaseModel, Field, field_validator
from starlette.exceptions import HTTPException

from agent.app import RagApp
from agent.failures import KNOWN_ERRORS, Failure, describe
from agent.results import AskResult
from agent.settings import Policy, Settings
from agent.telemetry import configure_tracing, metrics_app
from tools.ingest import SourceDocument

WEB_DIR = Path(__file__).resolve().parent / "web"
RETRY_AFTER_S = 5
"""`Retry-After` seconds sent with a 503: about the time the local Postgres or Triton takes to come back after a
restart (~1 s and ~3 s on the project machine)."""

STATUS_OF_KIND: dict[str, int] = {
    "bad_request": 422,
    "limit_exceeded": 422,
    "not_found": 404,
    "unauthorized": 401,
    "method_not_allowed": 405,
    "timeout": 504,
    "llm_bad_response": 502,
    "llm_unavailable": 503,
    "llm_misconfigured": 503,
    "retrieval_unavailable": 503,
    "embedder_overloaded": 503,
    "store_error": 503,
    "postgres_unavailable": 503,
    "postgres_error": 500,
    "invalid_settings": 500,
    "config_error": 500,
    "os_error": 500,
    "internal_error": 500,
}
"""HTTP status of each failure kind (`agent.failures.Failure.kind`); a kind not listed is 500."""

_KIND_OF_STATUS = {401: "unauthorized", 404: "not_found", 405: "method_not_allowed", 422: "bad_request"}

log = logging.getLogger(__name__)


class ErrorBody(BaseModel):
    """The body of every error response and of the stream's `error` event."""

    error: str = Field(description="Stable kind, e.g. `bad_request`, `llm_unavailable`, `postgres_unavailable`.")
    detail: str = Field(description="Readable message.")


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody, "description": description}
    for status, description in (
        (401, "Missing or wrong API key (`API_KEY` is set)."),
        (422, "Bad input or a hit answer limit."),
        (502, "The LLM answered with something unusable."),
        (503, "A dependency (Triton, Postgres, the LLM) is down or overloaded; see `Retry-After`."),
        (504, "The answer timed out."),
    )
}


def _no_nul(value: str, name: str) -> str:
    if "\x00" in value:
        raise ValueError(f"{name} holds a NUL character (\\u0000); expected text without NUL")
    return value


class AskRequest(BaseModel):
    """Body of `POST /v1/ask` and `POST /v1/ask/stream`."""

    question: Annotated[str, Field(min_length=1, max_length=4000, description="The question, non-blank, no NUL.")]
    top_k: Annotated[int | None, Field(ge=1, le=100, description="Passages retrieved up front (`always`).")] = None
    policy: Policy | None = Field(default=None, description="Default: AGENT_POLICY.")

    @field_validator("question")
    @classmethod
    def _question(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("question is blank; expected a non-blank question")
        return _no_nul(value, "question")


class DocumentIn(BaseModel):
    """One document to ingest through `POST /v1/documents`."""

    doc_id: Annotated[str, Field(min_length=1, max_length=512, description="Document id; a stored id is replaced.")]
    title: Annotated[str, Field(max_length=4000)] = ""
    text: Annotated[str, Field(min_length=1, max_length=2_000_000, description="The document text.")]
    metadata: dict[str, Any] = Field(default_factory=dict, description="Stored with the document (JSON object).")
    source: Annotated[str, Field(max_length=4000, description="Where it came from; deletable by source.")] = "http"

    @field_validator("doc_id", "title", "text", "source")
    @classmethod
    def _text(cls, value: str, info: Any) -> str:
        return _no_nul(value, str(info.field_name))


class IngestRequest(BaseModel):
    """Body of `POST /v1/documents`."""

    documents: Annotated[list[DocumentIn], Field(min_length=1, max_length=1000)]


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


class DocumentList(BaseModel):
    """`GET /v1/documents`: stored documents ordered by doc id."""

    documents: list[DocumentOut]


class Deleted(BaseModel):
    """`DELETE /v1/documents/{doc_id}`: the deleted ids."""

    deleted: list[str]


def error_response(failure: Failure) -> JSONResponse:
    """The JSON response of `failure`: status from `STATUS_OF_KIND`, `Retry-After` when it is retryable and 503."""
    status = STATUS_OF_KIND.get(failure.kind, 500)
    headers = {"Retry-After": str(RETRY_AFTER_S)} if status == 503 and failure.retryable else None
    body = ErrorBody(error=failure.kind, detail=failure.message)
    return JSONResponse(body.model_dump(), status_code=status, headers=headers)


def failure_of(exc: Exception) -> Failure:
    """`agent.failures.describe(exc)`, or `internal_error` (logged with its traceback) for an unknown exception."""
    failure = describe(exc)
    if failure is None:
        log.exception("unexpected error", exc_info=exc)
        return Failure("internal_error", f"unexpected {type(exc).__name__}; see the server log")
    return failure


def _validation_detail(exc: RequestValidationError) -> str:
    parts = []
    for error in exc.errors():
        where = ".".join(str(part) for part in error.get("loc", ()))
        message = str(error.get("msg", "invalid")).removeprefix("Value error, ")
        parts.append(f"{where}: {message}" if where else message)
    return "; ".join(parts)


def install_error_handlers(app: FastAPI) -> None:
    """Give every error of `app` the `ErrorBody` shape: product errors, validation errors, HTTP errors, bugs."""

    async def on_validation(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        return error_response(Failure("bad_request", _validation_detail(exc)))

    async def on_http(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, HTTPException)
        kind = _KIND_OF_STATUS.get(exc.status_code, f"http_{exc.status_code}")
        body = ErrorBody(error=kind, detail=str(exc.detail))
        return JSONResponse(body.model_dump(), status_code=exc.status_code, headers=exc.headers)

    async def on_error(request: Request, exc: Exception) -> JSONResponse:
        return error_response(failure_of(exc))

    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(HTTPException, on_http)
    for known in KNOWN_ERRORS:  # answered by Starlette's ExceptionMiddleware, like any handled error
        app.add_exception_handler(known, on_error)
    app.add_exception_handler(Exception, on_error)  # a bug: answered, then re-raised to the server log


def bearer_auth(settings: Settings) -> Any:
    """The `API_KEY` check as a FastAPI dependency (`HTTPBearer`): no key configured lets everything through;
    otherwise the bearer token must equal the key (`secrets.compare_digest`, constant time), else 401."""
    scheme = HTTPBearer(auto_error=False, description="`Authorization: Bearer <API_KEY>` when API_KEY is set.")

    # A default, not `Annotated[..., Depends(scheme)]`: string annotations resolve in module globals, not here.
    async def check(credentials: HTTPAuthorizationCredentials | None = Depends(scheme)) -> None:  # noqa: B008
        if settings.api_key is None:
            return
        expected = settings.api_key.get_secret_value().encode()
        given = credentials.credentials.encode() if credentials is not None else b""
        if not secrets.compare_digest(given, expected):
            raise HTTPException(401, "missing or wrong API key", headers={"WWW-Authenticate": "Bearer"})

    return Depends(check)


def create_app(settings: Settings | None = None) -> FastAPI:
    """The FastAPI application; its lifespan opens one `RagApp` from `settings` (default: environment)."""
    settings = settings or Settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with RagApp.from_settings(settings) as rag:
            app.state.rag = rag
            yield

    app = FastAPI(
        title="triton-rag",
        summary="Answers questions over your documents with cited sources.",
        lifespan=lifespan,
        openapi_url=None,
        docs_url=None,
        redoc_url=None,
    )
    configure_tracing(settings.otel_exporter_otlp_endpoint)
    app.mount("/metrics", metrics_app())
    install_error_handlers(app)
    auth = bearer_auth(settings)

    def rag_of(request: Request) -> RagApp:
        rag: RagApp = request.app.state.rag
        return rag

    @app.post("/v1/ask", response_model=AskResult, responses=ERROR_RESPONSES, dependencies=[auth])
    async def ask(body: AskRequest, request: Request) -> AskResult:
        """Answer one question; the JSON `AskResult` (answer, citations, timings_ms, refused, policy, searches)."""
        return await rag_of(request).ask(body.question, body.top_k, policy=body.policy)

    @app.post("/v1/ask/stream", response_class=EventSourceResponse, responses=ERROR_RESPONSES, dependencies=[auth])
    async def ask_stream(body: AskRequest, request: Request) -> AsyncIterator[ServerSentEvent]:
        """Stream one answer as Server-Sent Events (see the module docstring); closing the stream cancels it."""
        try:
            async for item in rag_of(request).ask_stream(body.question, body.top_k, policy=body.policy):
                if isinstance(item, AskResult):
                    yield ServerSentEvent(event="result", data=item.model_dump())
                else:
                    yield ServerSentEvent(event=item.type, data=item.model_dump())
        except Exception as exc:  # noqa: BLE001 - the stream has started: report every failure as an error event
            failure = failure_of(exc)
            yield ServerSentEvent(
                event="error", data=ErrorBody(error=failure.kind, detail=failure.message).model_dump()
            )

    @app.get("/v1/documents", response_model=DocumentList, responses=ERROR_RESPONSES, dependencies=[auth])
    async def list_documents(
        request: Request,
        limit: Annotated[int | None, Query(ge=0, le=10_000)] = None,
        offset: Annotated[int, Query(ge=0)] = 0,
    ) -> DocumentList:
        """Stored documents ordered by doc id."""
        stored = await rag_of(request).list_documents(limit=limit, offset=offset)
        return DocumentList(documents=[DocumentOut(**vars(d)) for d in stored])

    @app.post(
        "/v1/documents", response_model=IngestResponse, status_code=201, responses=ERROR_RESPONSES, dependencies=[auth]
    )
    async def add_documents(body: IngestRequest, request: Request) -> IngestResponse:
        """Chunk, embed and store documents; the same content again adds nothing, changed content replaces."""
        documents = [SourceDocument(d.doc_id, d.title, d.text, d.source, d.metadata) for d in body.documents]
        counts = await rag_of(request).add_documents(documents)
        return IngestResponse(added=counts.added, skipped=counts.skipped, chunks=counts.chunks)

    @app.delete(
        "/v1/documents/{doc_id}",
        response_model=Deleted,
        responses=ERROR_RESPONSES | {404: {"model": ErrorBody, "description": "No such document."}},
        dependencies=[auth],
    )
    async def delete_document(doc_id: str, request: Request) -> Deleted:
        """Delete one document and its chunks; search and answers never return it afterwards."""
        deleted = await rag_of(request).delete_documents([doc_id])
        if doc_id not in deleted:
            raise HTTPException(404, f"document {doc_id!r} is not stored")
        return Deleted(deleted=deleted)

    @app.get("/health")
    async def health(request: Request) -> JSONResponse:
        """Each dependency's check; HTTP 200 when all pass, else 503. Open without the API key."""
        checks = await rag_of(request).health()
        ok = all(bool(c["ok"]) for c in checks.values())
        return JSONResponse({"ok": ok, "checks": checks}, status_code=200 if ok else 503)

    @app.get("/openapi.json", include_in_schema=False, dependencies=[auth])
    async def openapi() -> JSONResponse:
        """The OpenAPI schema."""
        return JSONResponse(app.openapi())

    @app.get("/docs", include_in_schema=False, dependencies=[auth])
    async def docs() -> HTMLResponse:
        """Swagger UI over `/openapi.json`."""
        return get_swagger_ui_html(openapi_url="/openapi.json", title="triton-rag API")

    @app.get("/", include_in_schema=False)
    async def index() -> FileResponse:
        """The web chat page (asks for the API key once when the server wants one)."""
        return FileResponse(WEB_DIR / "index.html", media_type="text/html")

    return app
