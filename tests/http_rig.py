"""The HTTP app served in-process over scripted models (`serve`, `Served`), its error assertion and event-stream
parser."""

from __future__ import annotations

import json
from typing import Any

import httpx
from fastapi import FastAPI
from pydantic_ai.models.function import FunctionModel

from agent.config.settings import Settings
from agent.core.app import RagApp
from agent.core.wiring import Services
from agent.http import create_app
from agent.http.deps import get_rag
from tests.agent_corpus import DOCUMENTS
from tests.scripted_model import ScriptedModel as Script
from tools.in_memory import InMemoryCollection


class Served:
    """An app, its in-memory RagApp, the model's script and a client over ASGI."""

    def __init__(self, app: FastAPI, rag: RagApp, script: Script, collection: InMemoryCollection) -> None:
        self.app, self.rag, self.script, self.collection = app, rag, script, collection

    def client(self, **headers: str) -> httpx.AsyncClient:
        transport = httpx.ASGITransport(app=self.app, raise_app_exceptions=False)  # a bug: a 500, then re-raised
        return httpx.AsyncClient(transport=transport, base_url="http://rag", headers=headers, timeout=30)


def serve(checks_ok: bool = True, **update: Any) -> Served:
    settings = Settings.model_validate({"refusal_min_score": 0.3, "answer_timeout_s": 5.0} | update)
    script = Script()
    collection = InMemoryCollection(DOCUMENTS)

    async def memory() -> str:
        if not checks_ok:
            raise ConnectionError("memory is down")
        return f"{(await collection.count())[0]} documents"

    services = Services(collection, collection, FunctionModel(stream_function=script.stream), {"memory": memory})
    rag = RagApp(settings, services)
    app = create_app(settings)
    app.dependency_overrides[get_rag] = lambda: rag
    return Served(app, rag, script, collection)


def sse_events(text: str) -> list[tuple[str, Any]]:
    """(event, JSON data) pairs of a `text/event-stream` body; every block must have an event and one data line."""
    events = []
    for block in text.strip().split("\n\n"):
        lines = block.splitlines()
        names = [line.removeprefix("event: ") for line in lines if line.startswith("event: ")]
        data = [line.removeprefix("data: ") for line in lines if line.startswith("data: ")]
        assert len(names) == 1 and len(data) == 1, block
        events.append((names[0], json.loads(data[0])))
    return events


def assert_error(response: httpx.Response, status: int, kind: str, needle: str = "") -> None:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error", "detail"} and body["error"] == kind and needle in body["detail"], body


