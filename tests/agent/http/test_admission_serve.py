"""Admission control through a real `rag serve` process (real Triton and Postgres, a database of its own holding a few
SciFact abstracts) whose
LLM is the fake OpenAI server held by a gate the test opens: refusals are 503 `overloaded` with `Retry-After` and
cost no LLM request, streams report their queue position, a client that disconnects while queued frees its place;
and `rag bench serve` end to end on small settings."""

from __future__ import annotations

import asyncio
import inspect
import json
import re
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest
from httpx_sse import EventSource
from starlette.types import ASGIApp, Receive, Scope, Send

from agent.config.settings import Settings
from evals.bench_serve import ServeBenchParams, render, run_serve_bench, write_plot
from tests.fake_openai import FakeState, Reply, ThreadedServer, build_app
from tests.http_server import RagServe
from tests.scifact_database import scifact_database

CLAIM = "A deficiency of vitamin B12 increases blood levels of homocysteine."
ANSWER = "Yes, the passage reports higher homocysteine [1]."
DATABASE = "admission_test"


class GatedLLM(ThreadedServer):
    """The fake OpenAI server behind a gate: each chat request is counted when it arrives and answered only once
    `gate` is set."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.arrived = 0
        self.state = FakeState(default=Reply(text=ANSWER))
        inner = build_app(self.state)

        async def gated(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] == "http" and scope["path"].endswith("/chat/completions"):
                self.arrived += 1
                await asyncio.to_thread(self.gate.wait)
            await inner(scope, receive, send)

        app: ASGIApp = gated
        super().__init__(app)
        self.base_url = f"{self.url}/v1"

    def __enter__(self) -> GatedLLM:
        super().__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.gate.set()  # requests still held return, so the server can stop
        super().__exit__(*exc)


@pytest.fixture(scope="module")
async def small_store(postgres_url: str, triton_server: Settings, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A database of its own on the test Postgres holding the first 5 SciFact abstracts; returns its URL."""
    folder = tmp_path_factory.mktemp("admission")
    return await scifact_database(postgres_url, DATABASE, 5, triton_server, folder)


def serve_env(llm: GatedLLM, database_url: str, **admission: str) -> dict[str, str]:
    """`rag serve`'s environment: the small store, the fake LLM answering every question (no refusal threshold)."""
    return {
        "DATABASE_URL": database_url,
        "LLM_BASE_URL": llm.base_url,
        "VLLM_PORT": str(llm.port),
        "LLM_MODEL": "fake",
        "LLM_MAX_RETRIES": "0",
        "REFUSAL_MIN_SCORE": "-1",
    } | admission


@pytest.fixture
def llm() -> Iterator[GatedLLM]:
    with GatedLLM() as server:
        yield server


async def until(condition: Callable[[], bool | Awaitable[bool]], what: str) -> None:
    """Poll `condition()` until true; the bound (60 s) only stops a broken run, no outcome depends on it."""
    for _ in range(1200):
        result = condition()
        if await result if inspect.isawaitable(result) else result:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"never happened: {what}")


def queue_length_is(client: httpx.AsyncClient, expected: float) -> Callable[[], Awaitable[bool]]:
    """A check of the server's `rag_admission_queue_length` metric."""

    async def check() -> bool:
        text = (await client.get("/metrics")).text
        match = re.search(r"^rag_admission_queue_length (\S+)$", text, re.MULTILINE)
        assert match, text[:500]
        return float(match.group(1)) == expected

    return check


async def open_stream(client: httpx.AsyncClient, stack: AsyncExitStack) -> tuple[httpx.Response, AsyncIterator[Any]]:
    """POST a question to the stream endpoint; the response and its SSE events stay open until `stack` closes."""
    response = await stack.enter_async_context(client.stream("POST", "/v1/ask/stream", json={"question": CLAIM}))
    events = EventSource(response).aiter_sse()
    stack.push_async_callback(events.aclose)
    return response, events


def assert_overloaded(response: httpx.Response) -> None:
    assert response.status_code == 503, response.text
    body = response.json()
    assert body["error"] == "overloaded" and "retry in" in body["detail"], body
    assert int(response.headers["retry-after"]) >= 1


@pytest.fixture
async def served(
    settings: Settings, small_store: str, llm: GatedLLM
) -> AsyncIterator[tuple[RagServe, httpx.AsyncClient]]:
    env = serve_env(llm, small_store, ANSWER_MAX_IN_PROGRESS="1", ANSWER_QUEUE_MAX="1", ANSWER_QUEUE_DEADLINE_S="600")
    with RagServe(settings, env) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=120) as client:
            yield server, client


async def test_overload_is_refused_at_once_with_retry_after_and_no_llm_work(
    served: tuple[RagServe, httpx.AsyncClient], llm: GatedLLM
) -> None:
    server, client = served
    async with AsyncExitStack() as answered_stream:
        # A holds the one slot (its LLM request waits at the gate); B waits in the one queue place.
        first = asyncio.create_task(client.post("/v1/ask", json={"question": CLAIM}))
        await until(lambda: llm.arrived == 1, "the first answer reached the LLM")
        async with AsyncExitStack() as queued_stream:
            response, events = await open_stream(client, queued_stream)
            event = await anext(events)
            assert response.status_code == 200 and event.event == "queued" and event.json()["position"] == 1

            # Full: both endpoints refuse before any work, with a Retry-After.
            assert_overloaded(await client.post("/v1/ask", json={"question": CLAIM}))
            async with client.stream("POST", "/v1/ask/stream", json={"question": CLAIM}) as refused_stream:
                await refused_stream.aread()
                assert_overloaded(refused_stream)
            assert llm.arrived == 1
        # B disconnected while queued: its place is free again.
        await until(queue_length_is(client, 0.0), "the disconnected stream left the queue")

        # The same for /v1/ask (no stream): a client gone while queued leaves the queue.
        async with httpx.AsyncClient(base_url=server.url, timeout=120) as other:
            plain = asyncio.create_task(other.post("/v1/ask", json={"question": CLAIM}))
            await until(queue_length_is(client, 1.0), "the plain request queued")
            plain.cancel()
            with pytest.raises(asyncio.CancelledError):
                await plain
        await until(queue_length_is(client, 0.0), "the disconnected request left the queue")
        response, events = await open_stream(client, answered_stream)
        event = await anext(events)
        assert event.event == "queued" and event.json()["position"] == 1

        # Open the gate: the slot holder and the queued stream are answered; nothing else reached the LLM.
        llm.gate.set()
        answered = await first
        assert answered.status_code == 200 and answered.json()["answer"].startswith("Yes")
        kinds = [e.event async for e in events]
        assert kinds[-1] == "result" and "text" in kinds and "error" not in kinds, kinds
    assert llm.arrived == 2
    metrics = (await client.get("/metrics")).text
    assert 'rag_admission_rejections_total{reason="queue_full"} 2.0' in metrics
    assert re.search(r"^rag_answers_in_progress 0\.0$", metrics, re.MULTILINE), metrics


async def test_bench_serve_end_to_end_on_small_settings(
    settings: Settings, small_store: str, llm: GatedLLM, tmp_path: Path
) -> None:
    llm.gate.set()
    env = serve_env(llm, small_store, ANSWER_MAX_IN_PROGRESS="2", ANSWER_QUEUE_MAX="2", ANSWER_QUEUE_DEADLINE_S="30")
    with RagServe(settings, env) as server:
        params = ServeBenchParams(
            url=server.url, concurrencies=(1, 4), requests=4, overload=4.0, open_loop_requests=12, timeout_s=120
        )
        report = await run_serve_bench(params)
    assert [level["concurrency"] for level in report["levels"]] == [1, 4]
    for phase in [*report["levels"], report["open_loop"]]:
        assert phase["answered"] + phase["rejections"]["n"] == phase["requests"], phase
        assert phase["errors"] == {} and phase["latency_ms"]["n"] == phase["answered"] > 0
        assert phase["ttft_ms"]["n"] == phase["answered"] and phase["llm_tokens_per_s"] > 0
        assert phase["rejections"]["with_retry_after"] == phase["rejections"]["n"]
    assert report["levels"][0]["requests"] == 4 and report["levels"][1]["requests"] == 8
    assert report["open_loop"]["requests"] == 12
    assert report["capacity"]["goodput_rps"] == max(level["goodput_rps"] for level in report["levels"])
    assert report["open_loop"]["rate_rps"] == pytest.approx(4 * report["capacity"]["goodput_rps"], rel=1e-3)
    assert set(report["targets"]) >= {"goodput_over_capacity", "max_rejection_ms", "lost"}
    assert report["targets"]["lost"]["value"] == 0 and report["targets"]["timeouts"]["value"] == 0
    assert "fake" in report["server"]["llm"] and report["server"]["documents"] == "5 documents"
    assert write_plot(report, tmp_path / "serve.png").stat().st_size > 0
    json.dumps(report)

    from rich.console import Console

    console = Console(record=True, width=200)
    render(report, console)
    assert "open loop against the targets" in console.export_text()
