"""Graceful shutdown of `rag serve`: drain with a bound, report not-ready while draining, flush telemetry, exit 0.

On the first SIGTERM (or SIGINT) the server keeps listening and starts draining (`Drain`):

- new requests, `/health` included, get 503 `shutting_down` with `Retry-After` and `Connection: close` (a load
  balancer's readiness check takes the instance out; a client retries elsewhere), instead of a refused connection;
  `/metrics` still answers;
- requests already running, open answer streams included, go on;
- when none is left, or `SHUTDOWN_GRACE_S` has passed, uvicorn's own shutdown runs: it stops listening, cancels what
  is still running after `CANCEL_AFTER_S`, and runs the lifespan's exit (the app closes its clients; the caller
  flushes telemetry with `flush_telemetry`); the trace exporter is shut down within
  `agent.core.telemetry.SHUTDOWN_TIMEOUT_S`. The process then exits 0.
- what still runs when the grace has passed is ended by the drain itself (`Drain.cut`), so that no client is left
  with a body cut off mid-way: the answer is cancelled (the LLM stops), a response not started yet is 503
  `shutting_down`, and an event stream (`text/event-stream`) gets a last event that says to retry: `event: error`
  with `{"error": "shutting_down", ...}` (`sse_error_ending`), or what the app's `stream_ending` gives for the path
  (the OpenAI-compatible route: an error chunk and `data: [DONE]`). A path that ends a cut request itself
  (`self_ending`: `/mcp`, whose tools answer a retryable tool error, `agent.http.mcp_server`) finds the request's
  cut in the scope (`cut_of`) and gets `SELF_END_S` to answer before it is cancelled like any other.

A second signal while draining stops at once (uvicorn's behaviour: SIGINT forces the exit).

Kubernetes: a pod being deleted is removed from its Service's endpoints while SIGTERM is sent, so a `preStop`
sleep of a few seconds keeps it answering until the endpoints have caught up; `terminationGracePeriodSeconds`
must cover preStop + `SHUTDOWN_GRACE_S` + `CANCEL_AFTER_S` + the lifespan's exit (a few seconds).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
import time
from collections.abc import Callable, Generator, Sequence
from types import FrameType
from typing import Any

import anyio
import uvicorn
from fastapi.sse import format_sse_event
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agent.core.telemetry import shutdown_telemetry
from agent.http.errors import error_json

CANCEL_AFTER_S = 2
"""Seconds uvicorn waits, after the drain ended, for requests still running before it cancels them."""
RETRY_AFTER_S = 1
"""`Retry-After` of the 503 answered while draining: another instance can take the request at once."""
STILL_SERVED = frozenset({"/metrics", "/metrics/"})
"""Paths answered normally while draining (Prometheus keeps scraping until the process ends)."""
CUT_DETAIL = "the server shut down before the answer was finished; retry the request (another instance will take it)"
"""The message of what a request cut by the end of the drain receives."""
SELF_END_S = 1.0
"""Seconds a request on a `self_ending` path has, once cut, to end itself before it is cancelled (below
`CANCEL_AFTER_S`, after which uvicorn cancels everything)."""
CUT_KEY = "triton_rag.drain_cut"
"""The ASGI scope key where `DrainMiddleware` keeps the request's cut (an `asyncio.Event` set by `Drain.cut`)."""

StreamEnding = Callable[[str], bytes]
"""The last bytes of an event stream on a path (its argument) cut by the end of the drain."""

log = logging.getLogger(__name__)


class Drain:
    """Shared state of one server: requests in flight, and whether (and until when) it drains.

    Attributes:
        in_flight: HTTP requests running now (a streamed answer counts until its last byte is sent).
        deadline: `time.monotonic()` at which the drain gives up waiting; None while serving normally.
    """

    def __init__(self) -> None:
        self.in_flight = 0
        self.deadline: float | None = None
        self._running: set[asyncio.Event] = set()

    @property
    def draining(self) -> bool:
        """True once `begin` was called."""
        return self.deadline is not None

    def begin(self, grace_s: float) -> None:
        """Start draining: refuse new requests, wait at most `grace_s` seconds for running ones."""
        if self.deadline is None:
            self.deadline = time.monotonic() + grace_s
            log.warning("draining: %d request(s) in flight, waiting at most %.1f s", self.in_flight, grace_s)

    def done(self) -> bool:
        """True when draining and no request is left, or the grace period is over."""
        return self.deadline is not None and (self.in_flight == 0 or time.monotonic() >= self.deadline)

    def cut(self) -> None:
        """End every request still running (`DrainMiddleware`: cancelled, answered 503 or its stream closed with a
        last event saying to retry); called once the grace period is over."""
        if self._running:
            log.warning("draining: the grace is over; ending %d request(s) still running", len(self._running))
        for running in self._running:
            running.set()

    @contextlib.contextmanager
    def running(self) -> Generator[asyncio.Event, None, None]:
        """Count one request in flight while the block runs; the event is set when `cut` ends it."""
        event = asyncio.Event()
        self.in_flight += 1
        self._running.add(event)
        try:
            yield event
        finally:
            self._running.discard(event)
            self.in_flight -= 1


async def _cancel_when_set(event: asyncio.Event, scope: anyio.CancelScope, delay_s: float = 0.0) -> None:
    await event.wait()
    if delay_s:
        await asyncio.sleep(delay_s)
    scope.cancel()


def cut_of(scope: Scope) -> asyncio.Event | None:
    """The cut of the request whose ASGI scope this is: set when the drain ends it (`Drain.cut`); None outside a
    `DrainMiddleware`."""
    cut = scope.get(CUT_KEY)
    return cut if isinstance(cut, asyncio.Event) else None


def sse_error_ending(path: str) -> bytes:
    """The last event of a stream cut by the end of the drain: `event: error` with the API's error body
    (`shutting_down`, a 503 kind: retryable)."""
    body = json.dumps({"error": "shutting_down", "detail": CUT_DETAIL})
    return format_sse_event(event="error", data_str=body)


class DrainMiddleware:
    """Counts requests in flight; while the server drains, answers new ones (but `STILL_SERVED`) 503; ends the ones
    still running when `Drain.cut` is called (module docstring).

    Args:
        stream_ending: the last bytes of a cut event stream by path; default `sse_error_ending`.
        self_ending: paths whose application ends a cut request itself (watching `cut_of`), with an answer the
            client understands; cancelled only if still running `SELF_END_S` later.
    """

    def __init__(
        self,
        app: ASGIApp,
        drain: Drain,
        stream_ending: StreamEnding = sse_error_ending,
        self_ending: Sequence[str] = (),
    ) -> None:
        self.app = app
        self.drain = drain
        self.stream_ending = stream_ending
        self.self_ending = frozenset(self_ending)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Run the request counted, or refuse it while draining."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.drain.draining and scope["path"] not in STILL_SERVED:
            headers = {"Retry-After": str(RETRY_AFTER_S), "Connection": "close"}
            detail = "the server is shutting down; retry the request (another instance will take it)"
            await error_json(503, "shutting_down", detail, headers)(scope, receive, send)
            return
        with self.drain.running() as cut:
            scope[CUT_KEY] = cut
            await self._run(scope, receive, send, cut)

    async def _run(self, scope: Scope, receive: Receive, send: Send, cut: asyncio.Event) -> None:
        """Run the request until it ends or `cut` is set; then finish its response as the module docstring says."""
        started = finished = event_stream = False

        async def watched(message: Message) -> None:
            nonlocal started, finished, event_stream
            if message["type"] == "http.response.start":
                started = True
                content_type = dict(message.get("headers", [])).get(b"content-type", b"")
                event_stream = content_type.startswith(b"text/event-stream")
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                finished = True
            await send(message)

        with anyio.CancelScope() as running:  # cancels only the request; a cancellation from outside goes on
            delay_s = SELF_END_S if scope["path"] in self.self_ending else 0.0
            watcher = asyncio.ensure_future(_cancel_when_set(cut, running, delay_s))
            try:
                await self.app(scope, receive, watched)
            finally:
                watcher.cancel()
        if not cut.is_set() or finished:
            return
        if not started:
            headers = {"Retry-After": str(RETRY_AFTER_S), "Connection": "close"}
            await error_json(503, "shutting_down", CUT_DETAIL, headers)(scope, receive, send)
        elif event_stream:
            await send({"type": "http.response.body", "body": self.stream_ending(scope["path"]), "more_body": False})


class DrainingServer(uvicorn.Server):
    """uvicorn's server with a drain before its shutdown, and exit status 0 after a handled signal.

    uvicorn itself stops listening at the first signal, waits for open connections with no bound (unless told
    otherwise) and re-raises the signal at the end, so the process dies with -15.
    """

    def __init__(self, config: uvicorn.Config, drain: Drain, grace_s: float) -> None:
        super().__init__(config)
        self.drain = drain
        self.grace_s = grace_s

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        """First signal: start draining. A second one: uvicorn's own handling (stop now; SIGINT forces it)."""
        if self.drain.draining:
            super().handle_exit(sig, frame)
        else:
            self.drain.begin(self.grace_s)

    async def on_tick(self, counter: int) -> bool:
        """uvicorn's tick (every 0.1 s); exits once the drain is done."""
        if self.drain.done():
            self.drain.cut()  # the grace is over: what still runs ends now, each client told to retry
            self.should_exit = True
        return await super().on_tick(counter)

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        """Route SIGINT/SIGTERM to `handle_exit` while serving, and restore the previous handlers after, without
        re-raising the signal: a drained shutdown is a clean exit."""
        handled = (signal.SIGINT, signal.SIGTERM)
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in handled}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def flush_telemetry(timeout_s: float = 2.0) -> None:
    """Export the spans still buffered by the OpenTelemetry SDK's batch processor, waiting at most `timeout_s`
    seconds; nothing to do when tracing is not set up. The provider stays usable (spans ended later are exported
    by its processor as usual)."""
    provider = trace.get_tracer_provider()
    if isinstance(provider, TracerProvider) and not provider.force_flush(timeout_millis=int(timeout_s * 1000)):
        log.warning("telemetry: spans were still unexported after %.1f s", timeout_s)


def install_drain(app: Any, stream_ending: StreamEnding = sse_error_ending, self_ending: Sequence[str] = ()) -> Drain:
    """Add a `DrainMiddleware` outside the middleware already added to a Starlette/FastAPI `app`; returns its
    `Drain`, for `serve`.

    Args:
        stream_ending: the last bytes of an event stream cut by the end of the drain, by path.
        self_ending: paths that end a cut request themselves (`DrainMiddleware`).
    """
    drain = Drain()
    app.add_middleware(DrainMiddleware, drain=drain, stream_ending=stream_ending, self_ending=self_ending)
    return drain


def serve(app: ASGIApp, drain: Drain, host: str, port: int, grace_s: float) -> None:
    """Serve `app` (whose requests pass through a `DrainMiddleware` on `drain`) on `host:port` until a signal, then
    drain for at most `grace_s` seconds and return (exit status 0)."""
    config = uvicorn.Config(app, host=host, port=port, log_level="info", timeout_graceful_shutdown=CANCEL_AFTER_S)
    DrainingServer(config, drain, grace_s).run()
    shutdown_telemetry()  # bounded: an unreachable trace collector does not hold the exit
