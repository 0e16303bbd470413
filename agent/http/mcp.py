"""The MCP server over streamable HTTP at `/mcp` of `rag serve` (`agent.mcp_server`'s tools over the app's `RagApp`).

`McpEndpoint.routes` go into the app's router, and `McpEndpoint.running()` belongs in the app's lifespan: it runs the
SDK's session manager (`StreamableHTTPSessionManager.run`), without which the endpoint cannot serve a request.

The app's guards (`agent.http_guards`) come first, as for every route: `Authorization: Bearer <API_KEY>` (401
`unauthorized` without it when `API_KEY` is set), the `Host` check of `ALLOWED_HOSTS` (so the SDK's own DNS-rebinding
check, which would allow only loopback names, is off) and `MAX_BODY_BYTES`. Stateless: every request stands alone,
so replicas behind a load balancer need no session affinity (the tools keep no state between calls).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from starlette.routing import BaseRoute

from agent.mcp_server import RagSource, build_mcp_server

MCP_PATH = "/mcp"
"""Where `rag serve` answers MCP (streamable HTTP)."""


class McpEndpoint:
    """The MCP server of one HTTP app: its routes and its session manager's lifetime.

    Args:
        rag: returns the app's opened `RagApp` (read at each tool call).
    """

    def __init__(self, rag: RagSource) -> None:
        self.server: MCPServer[Any] = build_mcp_server(rag)
        starlette_app = self.server.streamable_http_app(
            streamable_http_path=MCP_PATH,
            stateless_http=True,
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )
        self.routes: list[BaseRoute] = list(starlette_app.routes)

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Run the session manager (once per endpoint) while the block runs."""
        async with self.server.session_manager.run():
            yield
