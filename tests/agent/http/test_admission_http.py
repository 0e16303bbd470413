"""Admission control through the HTTP API in-process (`agent.http.create_app` over the in-memory collection and a
pydantic-ai FunctionModel held by a gate): 503 `overloaded` with `Retry-After` on both answer routes before any
search or LLM call, the stream's `queued` events, a client that disconnects while queued leaves the queue, and the
Python API's `OverloadedError`. No server, no real time."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, MutableMapping
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo, FunctionModel

from agent.config.settings import Settings
from agent.core.app import RagApp
from agent.core.errors import OverloadedError
from agent.core.events import Queued
from agent.core.wiring import Services
from agent.http import create_app
from agent.http.admission_gate import tenant_of
from agent.http.deps import app_state, get_rag
from agent.http.guards import HOLDER_STATE
from tests.agent_corpus import COVERED, DOCUMENTS
from tests.http_rig import sse_events
from tools.in_memory import InMemoryCollection
from tools.records import ApiKey
from tools.retrieval import RetrievalResult
from tools.scope import SearchScope


class CountingCollection(InMemoryCollection):
    """The in-memory collection, counting searches (the embedding and search work of an answer)."""

    search_calls = 0

    async def search(self, query: str, top_k: int, scope: SearchScope | None = None) -> RetrievalResult:
        self.search_calls += 1
        return await super().search(query, top_k, scope)


class GatedModel:
    """Streams a cited answer once `gate` is set; counts the LLM requests that reached it."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.calls = 0
        self.first_call = asyncio.Event()

    async def stream(self, messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        self.calls += 1
        self.first_call.set()
        await self.gate.wait()
        yield "It does [1]."


class Rig:
    """The app with one slot and one queue place, its RagApp, the gated model and the counting collection."""

    def __init__(self, **update: Any) -> None:
        settings = Settings.model_validate(
            {
                "refusal_min_score": 0.3,
                "answer_max_in_progress": 1,
                "answer_queue_max": 1,
                "answer_queue_deadline_s": 600.0,
            }
            | update
        )
        self.model, self.collection = GatedModel(), CountingCollection(DOCUMENTS)
        services = Services(self.collection, self.collection, FunctionModel(stream_function=self.model.stream), {})
        self.rag = RagApp(settings, services)
        self.app = create_app(settings)

        async def rag() -> RagApp:  # async: a plain function would run in the thread pool, off the event loop
            return self.rag

        self.app.dependency_overrides[get_rag] = rag
        app_state(self.app).rag = self.rag  # what the lifespan sets: the admission gate reads it before any route

    def client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=httpx.ASGITransport(app=self.app), base_url="http://rag", timeout=30)

    def call(self, path: str, *, body_read: bool = True) -> RawCall:
        """Start one raw ASGI request to `path` (a question about the stored documents)."""
        return RawCall(self.app, path, body_read=body_read)


class RawCall:
    """One ASGI request driven by hand: its sent messages are visible as they go, and `disconnect()` makes the
    client go away (what uvicorn reports when a connection closes)."""

    def __init__(self, app: Any, path: str, *, body_read: bool = True) -> None:
        """`body_read=False`: reading the request's body fails the call (a request refused before its body)."""
        self.sent: list[MutableMapping[str, Any]] = []
        self.body_read = False
        self.changed = asyncio.Event()
        self._gone = asyncio.Event()
        delivered = False
        body = json.dumps({"question": COVERED}).encode()

        async def receive() -> dict[str, Any]:
            nonlocal delivered
            assert body_read, "the request's body was read"
            self.body_read = True
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            await self._gone.wait()
            return {"type": "http.disconnect"}

        async def send(message: MutableMapping[str, Any]) -> None:
            self.sent.append(message)
            self.changed.set()

        scope = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "query_string": b"",
            "root_path": "",
            "headers": [(b"host", b"rag"), (b"content-type", b"application/json")],
            "client": ("127.0.0.1", 1),
            "server": ("rag", 80),
        }
        self.task = asyncio.create_task(app(scope, receive, send))

    @property
    def status(self) -> int | None:
        return next((int(m["status"]) for m in self.sent if m["type"] == "http.response.start"), None)

    @property
    def body(self) -> str:
        return b"".join(m.get("body", b"") for m in self.sent if m["type"] == "http.response.body").decode()

    async def until_body_has(self, needle: str) -> None:
        while needle not in self.body:
            self.changed.clear()
            await asyncio.wait_for(self.changed.wait(), 10)

    async def disconnect(self) -> None:
        self._gone.set()
        await asyncio.wait_for(self.task, 10)


def assert_overloaded(response: httpx.Response) -> None:
    assert response.status_code == 503, response.text
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert set(body) == {"error", "detail"} and body["error"] == "overloaded", body
    assert "ANSWER_QUEUE_MAX=1" in body["detail"] and "retry in 600 s" in body["detail"]
    assert response.headers["retry-after"] == "600"  # no answer completed yet: the deadline


async def until(condition: Callable[[], bool]) -> None:
    """Wait until `condition()` holds (requests pass FastAPI's thread pool for plain dependencies, so a number of
    event-loop turns is not enough); the 10 s bound only stops a broken run."""

    async def poll() -> None:
        while not condition():  # noqa: ASYNC110 - the controller's state, which nothing signals
            await asyncio.sleep(0.001)

    await asyncio.wait_for(poll(), 10)


async def test_when_full_both_answer_routes_refuse_with_503_and_retry_after_before_any_work() -> None:
    rig = Rig()
    holder = rig.call("/v1/ask")  # holds the one slot, its LLM request waits at the gate
    await asyncio.wait_for(rig.model.first_call.wait(), 10)
    queued = rig.call("/v1/ask/stream")  # waits in the one queue place
    await queued.until_body_has("event: queued")
    assert queued.status == 200 and sse_events(queued.body) == [("queued", {"type": "queued", "position": 1})]
    assert rig.collection.search_calls == 1 and rig.model.calls == 1

    async with rig.client() as client:
        assert_overloaded(await client.post("/v1/ask", json={"question": COVERED}))
        assert_overloaded(await client.post("/v1/ask/stream", json={"question": COVERED}))
    assert rig.collection.search_calls == 1 and rig.model.calls == 1  # the refusals searched and asked nothing

    rig.model.gate.set()
    await asyncio.wait_for(holder.task, 10)
    await asyncio.wait_for(queued.task, 10)
    assert holder.status == 200 and json.loads(holder.body)["answer"] == "It does [1]."
    names = [name for name, _ in sse_events(queued.body)]
    assert names[0] == "queued" and names[-1] == "result" and "error" not in names
    assert rig.collection.search_calls == 2 and rig.model.calls == 2
    assert rig.rag.admission.in_progress == 0 and rig.rag.admission.queue_length == 0


@pytest.mark.parametrize("path", ["/v1/ask", "/v1/ask/stream"])
async def test_a_client_that_disconnects_while_queued_leaves_the_queue(path: str) -> None:
    rig = Rig()
    holder = rig.call("/v1/ask")
    await asyncio.wait_for(rig.model.first_call.wait(), 10)
    waiting = rig.call(path)
    await until(lambda: rig.rag.admission.queue_length == 1)
    await waiting.disconnect()
    assert rig.rag.admission.queue_length == 0 and rig.rag.admission.in_progress == 1
    async with rig.client() as client:
        again = rig.call("/v1/ask/stream")  # the freed place takes the next question instead of a refusal
        await again.until_body_has("event: queued")
        rig.model.gate.set()
        await asyncio.wait_for(again.task, 10)
        assert sse_events(again.body)[-1][0] == "result"
        assert (await client.post("/v1/ask", json={"question": COVERED})).status_code == 200
    await asyncio.wait_for(holder.task, 10)
    assert rig.collection.search_calls == 3 and rig.model.calls == 3  # the one that left never searched


async def test_a_client_that_disconnects_while_answered_cancels_its_answer_and_frees_the_slot() -> None:
    rig = Rig()
    holder = rig.call("/v1/ask")
    await asyncio.wait_for(rig.model.first_call.wait(), 10)
    await holder.disconnect()
    assert rig.rag.admission.in_progress == 0
    assert rig.rag.admission.rate.mean_s is None  # a cancelled answer says nothing about service time


async def test_the_python_api_raises_overloaded_and_streams_queue_positions() -> None:
    rig = Rig()
    first = asyncio.create_task(rig.rag.ask(COVERED))
    await asyncio.wait_for(rig.model.first_call.wait(), 10)
    stream = rig.rag.ask_stream(COVERED)
    assert await anext(stream) == Queued(position=1)
    with pytest.raises(OverloadedError) as refused:
        await rig.rag.ask(COVERED)
    assert refused.value.reason == "queue_full" and refused.value.retry_after_s == 600.0
    rig.model.gate.set()
    items = [item async for item in stream]
    assert (await first).answer == "It does [1]." and items[-1].answer == "It does [1]."  # type: ignore[union-attr]
    assert rig.rag.admission.rate.mean_s is not None  # completed answers measure the service rate


async def test_the_api_key_is_checked_before_a_place_is_taken() -> None:
    rig = Rig(api_key="s3cret")
    key = {"Authorization": "Bearer s3cret"}
    async with rig.client() as client:
        holder = asyncio.create_task(client.post("/v1/ask", json={"question": COVERED}, headers=key))
        await asyncio.wait_for(rig.model.first_call.wait(), 10)
        queued = asyncio.create_task(client.post("/v1/ask", json={"question": COVERED}, headers=key))
        await until(lambda: rig.rag.admission.queue_length == 1)  # full: one more with the key would be a 503
        assert (await client.post("/v1/ask", json={"question": COVERED})).status_code == 401
        assert (await client.post("/v1/ask", json={"question": COVERED}, headers=key)).status_code == 503
        rig.model.gate.set()
        assert (await holder).status_code == 200 and (await queued).status_code == 200


@pytest.mark.parametrize("path", ["/v1/ask", "/v1/ask/stream", "/v1/chat/completions"])
async def test_an_overloaded_answer_is_refused_before_its_body_is_read(path: str) -> None:
    rig = Rig()
    holder = rig.call("/v1/ask")
    await asyncio.wait_for(rig.model.first_call.wait(), 10)
    queued = rig.call("/v1/ask")
    await until(lambda: rig.rag.admission.queue_length == 1)
    refused = rig.call(path, body_read=False)  # its receive() fails the request if the app reads the body
    await asyncio.wait_for(refused.task, 10)
    assert refused.status == 503, refused.body
    body = json.loads(refused.body)
    if path == "/v1/chat/completions":  # OpenAI's error shape, as from the route
        assert body["error"]["code"] == "overloaded" and "ANSWER_QUEUE_MAX=1" in body["error"]["message"]
    else:
        assert body["error"] == "overloaded" and "ANSWER_QUEUE_MAX=1" in body["detail"]
    start = next(m for m in refused.sent if m["type"] == "http.response.start")
    assert (b"retry-after", b"600") in start["headers"]
    async with rig.client() as client:  # with room again, a malformed body is the route's 422 as before
        rig.model.gate.set()
        await asyncio.wait_for(holder.task, 10)
        await asyncio.wait_for(queued.task, 10)
        assert (await client.post(path, json={"question": 5})).status_code == 422
    assert rig.collection.search_calls == 2 and rig.model.calls == 2


def test_the_admission_tenant_is_the_api_key_the_guard_found() -> None:
    key = ApiKey(id=7, name="team", collections=("default",), created_at=datetime.now(UTC))
    assert tenant_of({"type": "http", "state": {HOLDER_STATE: key}}) == 7
    assert tenant_of({"type": "http", "state": {}}) is None  # the admin key, a keyless server
    assert tenant_of({"type": "http"}) is None


async def test_requests_arriving_at_once_are_decided_at_the_gate_before_any_body_is_read() -> None:
    """A burst: 8 answer requests start in the same event-loop turn, with 1 slot and 1 queue place. The gate takes
    each one's place as it arrives, so 6 are refused before any reads its body, while the 2 admitted are still at
    their route (a gate that only asked whether the queue would refuse let all 8 through: none had entered yet)."""
    rig = Rig()
    calls = [rig.call("/v1/ask") for _ in range(8)]
    refused = calls[2:]
    await asyncio.wait_for(asyncio.gather(*(c.task for c in refused)), 10)
    assert [c.status for c in refused] == [503] * 6
    assert not any(c.body_read for c in refused)
    assert rig.rag.admission.in_progress == 1 and rig.rag.admission.queue_length == 1
    rig.model.gate.set()
    await asyncio.wait_for(asyncio.gather(*(c.task for c in calls[:2])), 10)
    assert [c.status for c in calls[:2]] == [200, 200]
    assert rig.rag.admission.in_progress == 0 and rig.rag.admission.queue_length == 0  # the gate gave both back
    assert rig.collection.search_calls == 2 and rig.model.calls == 2
