"""The app's Prometheus endpoint as an exact route: `GET /metrics` answers 200 itself.

Mounted as a sub-application (`app.mount("/metrics", ...)`), Starlette answers `/metrics` with a 307 redirect to
`/metrics/`, which scrapers configured for `/metrics` do not all follow; and a redirect names the address the
request reached (behind a proxy, the pod's own `127.0.0.1:<port>`). So both `/metrics` and `/metrics/` are exact
routes (`metrics_routes`), and the app redirects no path (`redirect_slashes=False`: another trailing slash is a 404).
A `Route` whose endpoint is a class instance
is called as an ASGI application (Starlette treats only functions and methods as request/response endpoints), so
prometheus-client's own exposition app still negotiates the format (text or OpenMetrics) and gzip.
"""

from __future__ import annotations

from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send


class _ASGIEndpoint:
    """Wraps an ASGI callable so that `Route` calls it as an ASGI application."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, send)


def metrics_route(exposition: ASGIApp, path: str = "/metrics") -> Route:
    """`GET path` (and HEAD) served by `exposition` (e.g. `agent.core.telemetry.metrics_app()`), outside the OpenAPI
    schema."""
    return Route(path, _ASGIEndpoint(exposition), methods=["GET"], include_in_schema=False)


def metrics_routes(exposition: ASGIApp, path: str = "/metrics") -> list[Route]:
    """`metrics_route` at `path` and at `path/`: each answers itself, neither redirects."""
    return [metrics_route(exposition, path), metrics_route(exposition, path + "/")]
