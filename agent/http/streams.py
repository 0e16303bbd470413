"""What every answer stream (Server-Sent Events: `/v1/ask/stream`, `/v1/chat/completions` with `stream: true`)
needs whatever route sends it:

- `until_disconnected`: the route itself watches for the client going away and stops its events at once, so that
  the answer (its LLM request) is cancelled and its admission slot given back then, not at the next write. Starlette
  watches only under ASGI spec versions below 2.4; from 2.4 on it relies on a failing write, and a stream waiting
  for its answer writes only a keep-alive comment every 15 s.
- `EventStreamHeaders`: `Cache-Control: no-cache, no-transform` on every `text/event-stream` response, so that a
  proxy or CDN in front neither caches nor transforms (compresses, and so buffers) the stream; with FastAPI's own
  `X-Accel-Buffering: no` for nginx. The app compresses nothing itself (no gzip middleware).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import TypeVar

import anyio
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

T = TypeVar("T")

EVENT_STREAM_CACHE_CONTROL = b"no-cache, no-transform"
"""`Cache-Control` of every event stream."""


async def _disconnected(request: Request) -> None:
    """Return once the client of `request` has gone away (its body already read)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _next(events: AsyncIterator[T]) -> T:
    return await anext(events)


async def until_disconnected(request: Request, events: AsyncIterator[T]) -> AsyncIterator[T]:
    """The items of `events` until it ends or the client of `request` goes away; then, or when this generator is
    closed or cancelled, `events` is closed (its `finally` blocks run: the answer is cancelled and waited for)
    before this generator ends, shielded from the cancellation of the response that runs it."""
    watcher = asyncio.ensure_future(_disconnected(request))
    step: asyncio.Future[T] | None = None
    try:
        while True:
            step = asyncio.ensure_future(_next(events))
            await asyncio.wait({step, watcher}, return_when=asyncio.FIRST_COMPLETED)
            if not step.done():  # the client went away: stop the events where they wait
                return
            try:
                item = step.result()
            except StopAsyncIteration:
                return
            step = None
            yield item
    finally:
        watcher.cancel()
        with anyio.CancelScope(shield=True):
            if step is not None and not step.done():
                step.cancel()
                with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                    await step
            aclose = getattr(events, "aclose", None)
            if aclose is not None:
                await aclose()


class EventStreamHeaders:
    """ASGI middleware: a `text/event-stream` response gets `Cache-Control: no-cache, no-transform` (replacing the
    route's own) and `X-Accel-Buffering: no`; every other response passes untouched."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve the request, rewriting an event stream's headers."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                content_type = next((v for k, v in headers if k.lower() == b"content-type"), b"")
                if content_type.startswith(b"text/event-stream"):
                    kept = [(k, v) for k, v in headers if k.lower() not in (b"cache-control", b"x-accel-buffering")]
                    kept += [(b"cache-control", EVENT_STREAM_CACHE_CONTROL), (b"x-accel-buffering", b"no")]
                    message = {**message, "headers": kept}
            await send(message)

        await self.app(scope, receive, send_with_headers)
