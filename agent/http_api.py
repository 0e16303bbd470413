"""The HTTP API (FastAPI), served by `rag serve`:

- `POST /v1/ask` `{"question": ..., "top_k": 5, "policy": "always"}` → the `AskResult` JSON of `rag ask --json`.
- `POST /v1/ask/stream` (same body) → Server-Sent Events: `text`, `restart`, `tool_call`, `tool_result` events
  (the `agent.events` models as JSON), then one `result` (the `AskResult`) or one `error`
  (`{"error": kind, "detail": message}`).
- `GET /health` → `{"ok": bool, "checks": {"triton" | "postgres" | "llm": {"ok", "detail", "ms"}}}`, 503 unless all
  pass.
- `GET /` → a small web chat page (`agent/web/index.html`) that uses the streaming endpoint.

Errors are JSON `{"error": kind, "detail": message}`: 422 for bad input or a hit limit (`limit_exceeded`), 502 for
an unusable LLM answer, 503 when the LLM, Triton or Postgres is unavailable. One `RagApp` serves all requests.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated

from fastapi import FastAPI, Request
from fastapi.responses import FileResponse, JSONResponse
from fastapi.sse import EventSourceResponse, ServerSentEvent
from pydantic import BaseModel, Field

from agent.app import RagApp
from agent.errors import AgentError, AnswerLimitError, LLMConfigError, LLMResponseError, LLMUnavailableError
from agent.results import AskResult
from agent.settings import Policy, Settings
from agent.telemetry import configure_tracing, metrics_app
from tools.embedder import EmbedderError
from tools.store import StoreError

WEB_DIR = Path(__file__).resolve().parent / "web"


class AskRequest(BaseModel):
    """Body of `POST /v1/ask` and `POST /v1/ask/stream`."""

    question: Annotated[str, Field(min_length=1, max_length=4000, description="The question, non-blank.")]
    top_k: Annotated[int | None, Field(ge=1, le=100, description="Passages retrieved up front (`always`).")] = None
    policy: Policy | None = Field(default=None, description="Default: AGENT_POLICY.")


HTTP_STATUS: dict[type[AgentError], int] = {
    AnswerLimitError: 422,
    LLMResponseError: 502,
    LLMUnavailableError: 503,
    LLMConfigError: 503,
}
"""HTTP status of each agent error type (RFC 9110: 422 unprocessable request, 502 bad upstream answer, 503 upstream
unavailable); any other `AgentError` is 500."""


def error_body(exc: Exception) -> tuple[int, dict[str, str]]:
    """(HTTP status, `{"error": kind, "detail": message}`) for an exception an answer can raise.

    Raises:
        Exception: `exc` itself when it is none of the expected kinds (FastAPI turns it into a 500).
    """
    if isinstance(exc, AgentError):
        status = next((code for kind, code in HTTP_STATUS.items() if isinstance(exc, kind)), 500)
        return status, {"error": exc.kind, "detail": str(exc)}
    if isinstance(exc, ValueError):
        return 422, {"error": "bad_request", "detail": str(exc)}
    if isinstance(exc, EmbedderError | StoreError):
        return 503, {"error": "retrieval_unavailable", "detail": str(exc)}
    raise exc


def create_app(settings: Settings | None = None) -> FastAPI:
    """The FastAPI application; its lifespan opens one `RagApp` from `settings` (default: environment)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with RagApp.from_settings(settings) as rag:
            app.state.rag = rag
            yield

    app = FastAPI(
        title="triton-rag", summary="Answers questions over your documents with cited sources.", lifespan=lifespan
    )
    configure_tracing((settings or Settings()).otel_exporter_otlp_endpoint)
    app.mount("/metrics", metrics_app())

    def rag_of(request: Request) -> RagApp:
        rag: RagApp = request.app.state.rag
        return rag

    @app.post("/v1/ask", response_model=AskResult, responses={422: {}, 502: {}, 503: {}})
    async def ask(body: AskRequest, request: Request) -> AskResult | JSONResponse:
        """Answer one question; the JSON `AskResult` (answer, citations, timings_ms, refused, policy, searches)."""
        if not body.question.strip():
            return JSONResponse({"error": "bad_request", "detail": "question is blank"}, status_code=422)
        try:
            return await rag_of(request).ask(body.question, body.top_k, policy=body.policy)
        except (AgentError, ValueError, EmbedderError, StoreError) as exc:
            status, payload = error_body(exc)
            return JSONResponse(payload, status_code=status)

    @app.post("/v1/ask/stream", response_class=EventSourceResponse)
    async def ask_stream(body: AskRequest, request: Request) -> AsyncIterator[ServerSentEvent]:
        """Stream one answer as Server-Sent Events (see the module docstring); closing the stream cancels it."""
        if not body.question.strip():
            yield ServerSentEvent(event="error", data={"error": "bad_request", "detail": "question is blank"})
            return
        try:
            async for item in rag_of(request).ask_stream(body.question, body.top_k, policy=body.policy):
                if isinstance(item, AskResult):
                    yield ServerSentEvent(event="result", data=item.model_dump())
                else:
                    yield ServerSentEvent(event=item.type, data=item.model_dump())
        except (AgentError, ValueError, EmbedderError, StoreError) as exc:
            yield ServerSentEvent(event="error", data=error_body(exc)[1])

    @app.get("/health")
    async def health(request: Request) -> JSONResponse:
        """Each dependency's check; HTTP 200 when all pass, else 503."""
        checks = await rag_of(request).health()
        ok = all(bool(c["ok"]) for c in checks.values())
        return JSONResponse({"ok": ok, "checks": checks}, status_code=200 if ok else 503)

    @app.get("/", include_in_schema=False)
    async def index() -> FileResponse:
        """The web chat page."""
        return FileResponse(WEB_DIR / "index.html", media_type="text/html")

    return app
