"""The MCP server over streamable HTTP at `/mcp` of `rag serve` (`agent.mcp_server`'s tools over the app's `RagApp`).

`McpEndpoint.routes` go into the app's router, and `McpEndpoint.running()` belongs in the app's lifespan: it runs the
SDK's session manager (`StreamableHTTPSessionManager.run`), without which the endpoint cannot serve a request.

The app's guards (`agent.http_guards`) come first, as for every route: a bearer token (401 `unauthorized` without
one once a key is configured), the `Host` check of `ALLOWED_HOSTS` (so the SDK's own DNS-rebinding check, which would
allow only loopback names, is off) and `MAX_BODY_BYTES`. Then `CallerGate` finds the request's caller
(`agent.http.deps.request_caller`: the admin key, or an API key's holder; a wrong or revoked token is 401 before the
SDK reads the body) and keeps it in the ASGI scope; each tool call narrows its scope to that caller's collections
(`narrow_to_caller`), so a key holder's `search`, `get_document` and `ask` see only its collections, and naming
another collection is a tool error naming it. Stateless: every request stands alone, so replicas behind a load
balancer need no session affinity (the tools keep no state between calls).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp
from mcp.server.transport_security import TransportSecuritySettings
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from agent.http.deps import CallerIdentity, request_caller
from agent.http.errors import ApiError, error_response, failure_of
from agent.http_guards import error_json
from agent.mcp_server import RagSource, build_mcp_server
from tools.scope import SearchScope

MCP_PATH = "/mcp"
"""Where `rag serve` answers MCP (streamable HTTP)."""

CALLER_KEY = "triton_rag.caller"
"""The ASGI scope key under which `CallerGate` keeps the request's `CallerIdentity` for the tools."""


def narrow_to_caller(scope: SearchScope, request: Any) -> SearchScope:
    """The `agent.mcp_server.Narrow` of `/mcp`: `scope` within the collections of the caller `CallerGate` found for
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


class CallerGate:
    """ASGI wrapper of the SDK's endpoint: finds the request's caller (401 `unauthorized` with `WWW-Authenticate:
    Bearer` for a wrong or revoked token, 503 when the keys cannot be read), keeps it in the scope under
    `CALLER_KEY`, then hands the request to the SDK."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve the request as its caller, or refuse it before the SDK reads it."""
        if scope["type"] == "http":
            try:
                caller = await request_caller(Request(scope))
            except HTTPException as exc:
                headers = dict(exc.headers or {})
                await error_json(exc.status_code, "unauthorized", str(exc.detail), headers)(scope, receive, send)
                return
            except Exception as exc:  # noqa: BLE001 - the keys cannot be read: the app's error answer (503)
                await error_response(failure_of(exc))(scope, receive, send)
                return
            scope[CALLER_KEY] = caller
        await self.app(scope, receive, send)


class McpEndpoint:
    """The MCP server of one HTTP app: its routes and its session manager's lifetime.

    Args:
        rag: returns the app's opened `RagApp` (read at each tool call).
    """

    def __init__(self, rag: RagSource) -> None:
        self.server: MCPServer[Any] = build_mcp_server(rag, narrow=narrow_to_caller)
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
