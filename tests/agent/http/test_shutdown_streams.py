"""What a request still running when `rag serve`'s drain ends (`SHUTDOWN_GRACE_S`) receives (agent/http/shutdown.py),
in-process over httpx's ASGI transport with the scripted model held at a gate: an answer stream ends with a
retryable `error` event (`shutting_down`), the OpenAI-compatible stream with an error chunk and `data: [DONE]`, and
an answer whose response has not started gets 503 `shutting_down`; a trace collector that never answers does not
hold the exit. No clock: the test ends the drain itself, as the
server's tick does once the grace is over. The same on a real `rag serve`: test_serve_shutdown.py."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Sequence
from typing import Any

import httpx
import uvicorn
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from agent.core.telemetry import shutdown_telemetry
from agent.http.deps import app_state
from agent.http.shutdown import Drain, DrainingServer
from tests.agent_corpus import COVERED
from tests.http_rig import Served, serve, sse_events


async def cut_while_answering(served: Served, path: str, body: dict[str, Any]) -> httpx.Response:
    """POST `body` to `path`, end the drain once the model is writing the answer, and return the response."""
    served.script.gate = asyncio.Event()  # the model never writes: only the drain's end stops the answer
    async with served.client() as client:
        call = asyncio.create_task(client.post(path, json=body))
        await asyncio.wait_for(served.script.started.wait(), 30)
        drain = app_state(served.app).drain
        drain.begin(0.0)
        assert drain.done()
        drain.cut()
        response = await asyncio.wait_for(call, 30)
    assert served.script.cancelled  # the answer stopped: no LLM left working for nobody
    return response


async def test_an_answer_stream_cut_by_shutdown_ends_with_a_retryable_error_event() -> None:
    response = await cut_while_answering(serve(), "/v1/ask/stream", {"question": COVERED})
    assert response.status_code == 200
    events = sse_events(response.text)
    assert events[0][0] == "tool_call" and "result" not in [name for name, _ in events]
    name, data = events[-1]
    assert name == "error" and data["error"] == "shutting_down" and "retry" in data["detail"], events


async def test_an_openai_stream_cut_by_shutdown_ends_with_an_error_chunk_and_done() -> None:
    body = {"model": "triton-rag", "messages": [{"role": "user", "content": COVERED}], "stream": True}
    response = await cut_while_answering(serve(), "/v1/chat/completions", body)
    assert response.status_code == 200
    data = [line.removeprefix("data: ") for line in response.text.splitlines() if line.startswith("data: ")]
    assert data[-1] == "[DONE]", response.text
    error = json.loads(data[-2])["error"]
    assert error["code"] == "shutting_down" and error["type"] == "server_error", error
    assert json.loads(data[0])["choices"][0]["delta"]["role"] == "assistant"


async def test_an_answer_not_yet_started_when_the_drain_ends_is_a_503_to_retry() -> None:
    response = await cut_while_answering(serve(), "/v1/ask", {"question": COVERED})
    assert response.status_code == 503 and response.headers["retry-after"] == "1"
    assert response.json()["error"] == "shutting_down"
    openai = await cut_while_answering(
        serve(), "/v1/chat/completions", {"model": "triton-rag", "messages": [{"role": "user", "content": COVERED}]}
    )
    assert openai.status_code == 503 and openai.json()["error"]["code"] == "shutting_down"


async def test_the_server_tick_ends_the_drain_by_cutting_what_still_runs() -> None:
    drain = Drain()
    cut: list[bool] = []
    drain.cut = lambda: cut.append(True)  # type: ignore[method-assign]
    server = DrainingServer(uvicorn.Config(app=lambda *_: None), drain, grace_s=0.0)
    assert not await server.on_tick(0) and not cut  # serving: nothing to end
    drain.begin(0.0)
    await server.on_tick(0)
    assert cut == [True] and server.should_exit


def test_a_trace_collector_that_never_answers_does_not_hold_the_exit() -> None:
    release = threading.Event()  # the collector "answers" only when the test ends

    class Unreachable(SpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            release.wait()
            return SpanExportResult.FAILURE

        def shutdown(self) -> None:
            release.wait()

    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(BatchSpanProcessor(Unreachable()))
    provider.get_tracer("test").start_span("rag.answer").end()
    try:
        assert not shutdown_telemetry(provider, timeout_s=0.2)  # gave up on the collector, and said so
    finally:
        release.set()
    assert shutdown_telemetry(None)  # nothing set up: nothing to wait for
