"""The HTTP API as a real process: `rag serve` in a subprocess against the real stack (Triton, Postgres, vLLM), and
the health checks of the real dependencies. The request contract (validation, error shapes, the API key, SSE
framing, disconnects) is tested in-process without servers in test_http_contract.py."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from agent.config.settings import Settings
from agent.core.app import RagApp
from agent.http import create_app
from tests.fake_openai import FakeOpenAIServer, Reply, ThreadedServer
from tests.http_server import CLAIM, RagServe, sse_events
from tools.store import VectorStore

pytestmark = pytest.mark.stack







@pytest.fixture(scope="module")
def served(llm_settings: Settings, ingested: str) -> Iterator[RagServe]:
    with RagServe(llm_settings) as server:
        yield server


@pytest.mark.llm
def test_health_reports_each_dependency(served: RagServe) -> None:
    response = httpx.get(served.url + "/health", timeout=30)
    body = response.json()
    assert response.status_code == 200, body
    assert body["ok"] is True and set(body["checks"]) == {"triton", "postgres", "llm"}
    # open to every caller: nothing of what the store holds (a count spans every tenant's collections)
    assert body["checks"]["postgres"]["detail"] == f"store of {served.settings.embedder_model} vectors reachable"
    assert served.settings.llm_model in body["checks"]["llm"]["detail"]


@pytest.mark.llm
async def test_ask_returns_the_typed_json_result(served: RagServe, llm_settings: Settings, store: VectorStore) -> None:
    async with httpx.AsyncClient(timeout=300) as client:
        response = await client.post(served.url + "/v1/ask", json={"question": CLAIM, "top_k": 4})
    assert response.status_code == 200, response.text
    body = response.json()
    assert set(body) >= {"answer", "citations", "timings_ms", "refused", "policy", "searches"}
    assert body["answer"].strip() and body["refused"] is False and body["searches"] == [CLAIM]
    assert {"embed", "search", "llm", "llm_ttft", "total"} <= set(body["timings_ms"])
    async with RagApp.from_settings(llm_settings) as app:
        retrieved = {p.chunk_id for p in (await app.search(CLAIM, 4)).passages}
    assert {c["chunk_id"] for c in body["citations"]} <= retrieved


@pytest.mark.llm
def test_stream_sends_tool_activity_text_then_the_result(served: RagServe) -> None:
    response = httpx.post(served.url + "/v1/ask/stream", json={"question": CLAIM, "top_k": 3}, timeout=300)
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
    events = sse_events(response)
    names = [name for name, _ in events]
    assert names[0] == "tool_call" and events[0][1]["args"]["query"] == CLAIM
    assert names[1] == "tool_result" and names[-1] == "result" and "text" in names
    streamed = "".join(data["text"] for name, data in events if name == "text")
    result = events[-1][1]
    assert result["answer"].split()[:5] == streamed.split()[:5]


def test_health_names_the_dependency_that_is_down(settings: Settings, ingested: str) -> None:
    with FakeOpenAIServer() as fake:
        fake.state.default = Reply(status=500)
        down = settings.model_copy(update={"llm_base_url": fake.base_url, "llm_model": "not-served"})
        with ThreadedServer(create_app(down)) as server:
            health = httpx.get(server.url + "/health", timeout=60)
    assert health.status_code == 503 and health.json()["checks"]["llm"]["ok"] is False
    assert health.json()["checks"]["triton"]["ok"] is True and health.json()["checks"]["postgres"]["ok"] is True
