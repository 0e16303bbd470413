"""The OpenAI-compatible route served in-process (`Rig`), a request helper, its error assertion and stream chunks."""

from __future__ import annotations

import json
from typing import Any

import httpx
import httpx2
import openai
from pydantic_ai.models.function import FunctionModel

from agent.config.settings import Settings
from agent.core.app import RagApp
from agent.core.wiring import Services
from agent.http import create_app
from agent.http.deps import get_rag
from tests.agent_corpus import COVERED, DOCUMENTS
from tests.scripted_model import ScriptedModel as Model
from tools.in_memory import InMemoryCollection
from tools.retrieval import RetrievalResult
from tools.scope import SearchScope


class ScopedCollection(InMemoryCollection):
    """The in-memory collection, recording each search's query and scope (and searching everything)."""

    scopes: list[SearchScope | None]

    async def search(self, query: str, top_k: int, scope: SearchScope | None = None) -> RetrievalResult:
        self.scopes = [*getattr(self, "scopes", []), scope]
        return await super().search(query, top_k)


class Rig:
    """The app over the in-memory RagApp; `http()` raw and `sdk()` official-SDK clients over ASGI."""

    def __init__(self, **update: Any) -> None:
        self.settings = Settings.model_validate(
            {"refusal_min_score": 0.3, "answer_timeout_s": 30.0, "llm_max_tokens": 64} | update
        )
        self.model, self.collection = Model(), ScopedCollection(DOCUMENTS)
        services = Services(self.collection, self.collection, FunctionModel(stream_function=self.model.stream), {})
        self.rag = RagApp(self.settings, services)
        self.app = create_app(self.settings)

        async def rag() -> RagApp:
            return self.rag

        self.app.dependency_overrides[get_rag] = rag

    def http(self, **headers: str) -> httpx.AsyncClient:
        transport = httpx.ASGITransport(app=self.app, raise_app_exceptions=False)
        return httpx.AsyncClient(transport=transport, base_url="http://rag", headers=headers, timeout=30)

    def sdk(self, api_key: str = "unused") -> openai.AsyncOpenAI:
        """The SDK over ASGI (its HTTP client is `httpx2`, the SDK's own dependency); no retries."""
        client = httpx2.AsyncClient(transport=httpx2.ASGITransport(app=self.app, raise_app_exceptions=False))
        return openai.AsyncOpenAI(base_url="http://rag/v1", api_key=api_key, max_retries=0, http_client=client)


def chunks(text: str) -> list[Any]:
    """The `data:` payloads of an SSE body, JSON-decoded (`[DONE]` kept as the string); keep-alive comments
    skipped."""
    events = []
    for block in text.strip().split("\n\n"):
        if block == ": ping":
            continue
        data = [line.removeprefix("data: ") for line in block.splitlines() if line.startswith("data: ")]
        assert len(data) == 1 and not any(line.startswith("event:") for line in block.splitlines()), block
        events.append(data[0] if data[0] == "[DONE]" else json.loads(data[0]))
    return events


def assert_openai_error(response: httpx.Response, status: int, code: str, param: str | None = None) -> str:
    """Check OpenAI's error shape; returns the message."""
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}, body
    assert body["error"]["code"] == code and body["error"]["param"] == param, body
    expected_type = {401: "authentication_error", 422: "invalid_request_error", 404: "invalid_request_error"}
    assert body["error"]["type"] == expected_type.get(status, "server_error"), body
    message: str = body["error"]["message"]
    assert message
    return message


def ask(content: str = COVERED, **extra: Any) -> dict[str, Any]:
    return {"model": "triton-rag", "messages": [{"role": "user", "content": content}]} | extra


