"""`create_app`: the FastAPI application of `rag serve`, assembled from the area routers (see `agent.http`)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from agent.config.settings import Settings
from agent.core.app import RagApp
from agent.core.oidc import OidcVerifier
from agent.core.telemetry import configure_tracing, metrics_app
from agent.core.wiring import build_services
from agent.http import access, ask, auth_routes, conversations, documents, feedback, jobs, openai_chat, service, usage
from agent.http.a2a import A2A_PATH, A2aEndpoint
from agent.http.admission_gate import AdmissionGate
from agent.http.deps import STATE, AppState, app_state, opened_rag
from agent.http.errors import install_error_handlers
from agent.http.guards import install_guards
from agent.http.loop_lag import watch_loop_lag
from agent.http.mcp import MCP_PATH, McpEndpoint
from agent.http.metrics import metrics_routes
from agent.http.openai_errors import OpenAIErrorShape, stream_ending
from agent.http.quota_gate import QuotaGate
from agent.http.shutdown import flush_telemetry, install_drain
from agent.http.streams import EventStreamHeaders


def create_app(settings: Settings | None = None, rag: RagApp | None = None) -> FastAPI:
    """The FastAPI application; its lifespan enters one `RagApp` (`rag`, default over
    `build_services(settings, serving=True)`: one store for answers, documents, jobs and API keys, with
    `JOBS_SERVE_WORKERS` job workers) and closes it at shutdown; it holds the app's typed state (`AppState`).

    Args:
        settings: default: environment / `.env`.
        rag: the app to serve (unopened; the lifespan enters it; tests pass one over their own `Services`); default
            built from `settings` at start-up.
    """
    settings = settings or Settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        lag = asyncio.create_task(watch_loop_lag())
        try:
            served = rag or RagApp(settings, build_services(settings, serving=True))
            async with served as opened, mcp.running(), a2a.running():
                state = app_state(app)
                state.rag, state.keys, state.quotas = opened, opened.keys, opened.quotas
                state.grants = opened.services.grants
                yield
        finally:
            lag.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await lag
            flush_telemetry()

    app = FastAPI(
        title="triton-rag",
        summary="Answers questions over your documents with cited sources.",
        lifespan=lifespan,
        openapi_url=None,
        docs_url=None,
        redoc_url=None,
        redirect_slashes=False,  # a redirect would name the address the request reached (a pod's own, behind a proxy)
    )
    mcp = McpEndpoint(lambda: opened_rag(app))
    app.router.routes.extend(mcp.routes)
    a2a = A2aEndpoint(lambda: (opened_rag(app), app_state(app).quotas))
    app.router.routes.extend(a2a.routes)
    configure_tracing(settings.otel_exporter_otlp_endpoint)
    app.router.routes.extend(metrics_routes(metrics_app()))
    install_error_handlers(app)
    app.add_middleware(AdmissionGate)  # inside the guards: refuses an overloaded answer before its body is read
    app.add_middleware(QuotaGate)  # inside the key guard, outside admission: a key over its quota takes no slot
    install_guards(app, settings, settings.allowed_hosts or ("*",))
    drain = install_drain(app, stream_ending, self_ending=(MCP_PATH, A2A_PATH))  # a tool error; a failed task
    setattr(app.state, STATE, AppState(settings, drain, oidc=OidcVerifier.from_settings(settings)))
    app.add_middleware(EventStreamHeaders)  # no-transform on every event stream; nothing is compressed
    app.add_middleware(OpenAIErrorShape)  # outermost: OpenAI's error shape on its routes, whoever answered
    app.include_router(ask.router)
    app.include_router(conversations.router)
    app.include_router(feedback.router)
    app.include_router(documents.router)
    app.include_router(jobs.router)
    app.include_router(service.router)
    app.include_router(openai_chat.router)
    app.include_router(usage.router)
    app.include_router(auth_routes.router)
    app.include_router(access.router)
    return app
