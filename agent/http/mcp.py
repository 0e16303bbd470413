"""The MCP server over streamable HTTP at `/mcp` of `rag serve` (`agent.http.mcp_server`'s tools over the app's
`RagApp`).

`McpEndpoint.routes` go into the app's router, and `McpEndpoint.running()` belongs in the app's lifespan: it runs the
SDK's session manager (`StreamableHTTPSessionManager.run`), without which the endpoint cannot serve a request.

The app's guards (`agent.http.guards`) come first, as for every route: a bearer token (401 `unauthorized` without
one once a key is configured), the `Host` check of `ALLOWED_HOSTS` (so the SDK's own DNS-rebinding check, which would
allow only loopback names, is off) and `MAX_BODY_BYTES`. Then `CallerGate` finds the request's caller
(`agent.http.deps.request_caller`: the admin key, or an API key's holder; a wrong or revoked token is 401 before the
SDK reads the body) and keeps it in the ASGI scope; each tool call narrows its scope to that caller's collections
(`narrow_to_caller`), so a key holder's `search`, `get_document` and `ask` see only its collections, and naming
another collection is a tool error naming it; a key holder's `ask` calls are held to its quotas (`meter_caller`), the
protocol messages are not. A tool call still running when `rag serve`'s shutdown drain ends is stopped by the
tool itself (`drain_cut`) and answered as a retryable tool error `shutting_down: ...`, which the client shows,
rather than a cut stream that makes the client raise. Stateless: every request stands alone, so replicas behind a load
balancer need no session affinity (the tools keep no state between calls).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp
from mcp.server.transport_security import TransportSecuritySettings
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from agent.core.errors import QuotaExceededError
from agent.core.keys import ApiKey
from agent.core.quotas import Quotas
from agent.http.deps import CallerIdentity, caller_or_refused
from agent.http.errors import ApiError, error_json
from agent.http.guards import HOLDER_STATE, origin_allowed
from agent.http.mcp_server import RagSource, build_mcp_server
from agent.http.quota_gate import metered_answer
from agent.http.shutdown import cut_of
from agent.http.state import scope_state
from tools.scope import SearchScope

MCP_PATH = "/mcp"
"""Where `rag serve` answers MCP (streamable HTTP)."""

CALLER_KEY = "triton_rag.caller"
"""The ASGI scope key under which `CallerGate` keeps the request's `CallerIdentity` for the tools."""


def narrow_to_caller(scope: SearchScope, request: Any) -> SearchScope:
    """The `agent.http.mcp_server.Narrow` of `/mcp`: `scope` within the collections of the caller `CallerGate` found for
    `request` (the HTTP request that carries the tool call).

    Raises:
        ToolError: `forbidden_collection: ...` naming a collection outside the caller's key; a request that did not
            pass `CallerGate` (never served: nothing is searched without a caller).
    """
    caller = request.scope.get(CALLER_KEY) if isinstance(request, Request) else None
    if not isinstance(caller, CallerIdentity):
        raise ToolError("internal_error: the tool call came without a caller; nothing was searched")
    try:
        return caller.narrow(scope)
    except ApiError as exc:
        raise ToolError(f"{exc.kind}: {exc.detail}") from None


def drain_cut(request: Any) -> asyncio.Event | None:
    """The `agent.http.mcp_server.Stopping` of `/mcp`: the cut the shutdown drain sets on the HTTP request that
    carries the tool call (`agent.http.shutdown.cut_of`; `/mcp` is one of the drain's `self_ending` paths)."""
    return cut_of(request.scope) if isinstance(request, Request) else None


def _allowed_hosts(scope: Scope) -> Sequence[str]:
    state = scope_state(scope)
    return (None if state is None else state.settings.allowed_hosts) or ()


@asynccontextmanager
async def meter_caller(request: Any) -> AsyncIterator[None]:
    """The `agent.http.mcp_server.Meter` of `/mcp`: an `ask` call of a key holder is admitted by the app's quotas
    (`agent.core.quotas.Quotas.admit`: requests per minute, tokens per day with the answer's reservation), refused
    as a tool error `quota_exceeded: ... (retry after N s)` that the client shows (not an HTTP 429, which would fail
    the client's whole session), and its usage recorded when it ends (`rag_key_*` metrics, `key_usage`). The admin
    key, and an app without quotas, pass unmetered. Only tool calls are metered: `initialize`, notifications and
    `tools/list` are protocol, not answer requests."""
    scope = request.scope if isinstance(request, Request) else {}
    key = scope.get("state", {}).get(HOLDER_STATE)
    state = scope_state(scope)
    quotas: Quotas | None = None if state is None else state.quotas
    if not isinstance(key, ApiKey) or quotas is None:
        yield
        return
    try:
        reservation = await quotas.admit(key)
    except QuotaExceededError as exc:
        said = str(exc).removesuffix("; retry after the Retry-After seconds")  # no Retry-After header here
        raise ToolError(f"quota_exceeded: {said} (retry after {math.ceil(exc.retry_after_s)} s)") from None
    async with metered_answer(quotas, key, reservation):
        yield


class CallerGate:
    """ASGI wrapper of the SDK's endpoint: refuses what a stateless server does not serve (any method but POST: 405
    `method_not_allowed` with `Allow: POST`; the SDK would open an idle event stream for a GET) and pages of other
    sites (an `Origin` that is neither the server's own nor in `ALLOWED_HOSTS`: 403 `forbidden_origin`, as the MCP
    specification asks of servers against DNS rebinding); finds the request's caller (401 `unauthorized` with
    `WWW-Authenticate: Bearer` for a wrong or revoked token, 503 when the keys cannot be read), keeps it in the
    scope under `CALLER_KEY`, then hands the request to the SDK."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve the request as its caller, or refuse it before the SDK reads it."""
        if scope["type"] == "http":
            sent = Headers(scope=scope)
            origin = sent.get("origin")
            if origin is not None and not origin_allowed(origin, sent.get("host"), _allowed_hosts(scope)):
                detail = f"Origin {origin!r} is not this server's, nor in ALLOWED_HOSTS: other sites cannot use /mcp"
                await error_json(403, "forbidden_origin", detail)(scope, receive, send)
                return
            if scope["method"] != "POST":
                detail = f"{scope['method']} /mcp: this MCP server is stateless (no sessions nor event streams); POST"
                await error_json(405, "method_not_allowed", detail, {"Allow": "POST"})(scope, receive, send)
                return
            caller = await caller_or_refused(scope, receive, send)
            if caller is None:
                return
            scope[CALLER_KEY] = caller
        await self.app(scope, receive, send)


class McpEndpoint:
    """The MCP server of one HTTP app: its routes and its session manager's lifetime.

    Args:
        rag: returns the app's opened `RagApp` (read at each tool call).
    """

    def __init__(self, rag: RagSource) -> None:
        self.server: MCPServer[Any] = build_mcp_server(
            rag, narrow=narrow_to_caller, meter=meter_caller, stopping=drain_cut
        )
        # creates the session manager; the SDK's own route is replaced by the same endpoint behind `CallerGate`
        self.server.streamable_http_app(
            streamable_http_path=MCP_PATH,
            stateless_http=True,
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )
        endpoint = CallerGate(StreamableHTTPASGIApp(self.server.session_manager))
        self.routes: list[BaseRoute] = [Route(MCP_PATH, endpoint=endpoint)]

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Run the session manager (once per endpoint) while the block runs."""
        async with self.server.session_manager.run():
            yield
