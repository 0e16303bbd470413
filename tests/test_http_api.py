"""The HTTP API as a real process: `rag serve` in a subprocess against the real stack (Triton, Postgres, vLLM), and
the health checks of the real dependencies. The request contract (validation, error shapes, the API key, SSE
framing, disconnects) is tested in-process without servers in test_http_contract.py."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from agent.config.settings import Settings
from agent.core.app import RagApp
from agent.http import create_app
from evals.off_topic import OFF_TOPIC as OFF_TOPIC_QUESTIONS
from infra.processes import free_port
from tests.conftest import cli_env
from tests.fake_openai import FakeOpenAIServer, Reply, ThreadedServer
from tools.store import VectorStore

pytestmark = pytest.mark.stack

CLAIM = "A deficiency of vitamin B12 increases blood levels of homocysteine."
OFF_TOPIC = OFF_TOPIC_QUESTIONS[0]  # "Who won the 2018 FIFA World Cup?"


class RagServe:
    """`rag serve --port <free>` in a subprocess with the test stack's environment; stopped by its PID."""

    def __init__(self, settings: Settings, env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.settings = settings
        self.env = env or {}
        self.process: subprocess.Popen[str] | None = None

    def __enter__(self) -> RagServe:
        command = [sys.executable, "-m", "agent", "serve", "--port", str(self.port)]
        self.process = subprocess.Popen(
            command, env=cli_env(self.settings) | self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"rag serve exited: {self.process.stdout.read() if self.process.stdout else ''}")
            try:
                if httpx.get(self.url + "/", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        self.__exit__()
        raise RuntimeError("rag serve did not answer within 120 s")

    def __exit__(self, *exc: object) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def sse_events(response: httpx.Response) -> list[tuple[str, Any]]:
    """(event, JSON data) pairs of a `text/event-stream` body."""
    events = []
    for block in response.text.split("\n\n"):
        lines = block.strip().splitlines()
        name = next((line[6:].strip() for line in lines if line.startswith("event:")), "message")
        data = [line[5:].strip() for line in lines if line.startswith("data:")]
        if data:
            events.append((name, json.loads("\n".join(data))))
    return events


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
