"""The MCP tools in-process, without servers, through the SDK's own client: the server of `agent.http.mcp_server` over a
`RagApp` of the in-memory collection and a pydantic-ai FunctionModel, connected directly (`mcp.Client(server)`) and
over streamable HTTP through the `rag serve` app (`agent.http.create_app`, ASGI transport, its lifespan run).
Tool listing, results (text and structured content), argument errors, overload and LLM failures, the API key.
Over the real transports and the real stack: test_mcp_stack.py."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from pydantic import SecretStr
from pydantic_ai.exceptions import ModelHTTPError

from agent.core.app import RagApp
from agent.http import create_app
from agent.http.deps import app_state
from agent.http.shutdown import Drain
from tests.agent_corpus import COVERED
from tests.mcp_rig import connected, rag_app, text_of
from tests.scripted_model import ScriptedModel as Model

TOOLS = {"search", "get_document", "ask"}


@pytest.fixture
def model() -> Iterator[Model]:
    yield Model()


async def test_the_tools_are_listed_with_descriptions_and_schemas(model: Model) -> None:
    async with connected(rag_app(model)) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert set(tools) == TOOLS
    for tool in tools.values():
        assert tool.description and len(tool.description) > 100 and tool.output_schema is not None
        assert tool.annotations is not None and tool.annotations.read_only_hint is True
    search = tools["search"].input_schema["properties"]
    assert set(search) == {"query", "top_k", "filter", "collection"}
    assert all(field.get("description") for field in search.values())
    assert tools["search"].input_schema["required"] == ["query"]
    assert set(tools["ask"].input_schema["properties"]) == {"question", "top_k", "filter", "collection"}
    assert tools["get_document"].input_schema["required"] == ["doc_id"]
    assert set(tools["search"].output_schema["properties"]) == {"query", "passages"}  # type: ignore[index]


async def test_search_returns_numbered_passages_as_text_and_structured_content(model: Model) -> None:
    async with connected(rag_app(model)) as client:
        result = await client.call_tool("search", {"query": COVERED, "top_k": 2})
    assert result.is_error is False
    structured = result.structured_content
    assert structured is not None and structured["query"] == COVERED
    passages = structured["passages"]
    assert [p["number"] for p in passages] == [1, 2] and passages[0]["doc_id"] == "b12"
    assert set(passages[0]) == {"number", "doc_id", "chunk_id", "title", "text", "score", "source"}
    assert "homocysteine" in passages[0]["text"] and passages[0]["score"] >= passages[1]["score"]
    text = text_of(result)
    assert text.startswith("[1] Vitamin B12 (doc_id b12, score ") and "\n\n[2] " in text
    assert passages[0]["text"] in text and passages[1]["text"] in text


async def test_get_document_returns_the_title_and_whole_text(model: Model) -> None:
    async with connected(rag_app(model)) as client:
        result = await client.call_tool("get_document", {"doc_id": "folate"})
    assert result.is_error is False
    assert result.structured_content == {
        "doc_id": "folate",
        "title": "Folate",
        "text": "Folate intake lowers homocysteine levels in adults.",
    }
    assert text_of(result) == "# Folate\n\nFolate intake lowers homocysteine levels in adults."


async def test_ask_returns_the_answer_with_markers_and_citations(model: Model) -> None:
    async with connected(rag_app(model)) as client:
        result = await client.call_tool("ask", {"question": COVERED, "top_k": 2})
    assert result.is_error is False
    structured = result.structured_content
    assert structured is not None and structured["answer"] == "It does [1]."
    assert structured["refused"] is False and structured["truncated"] is False
    assert [(c["passage"], c["doc_id"]) for c in structured["citations"]] == [(1, "b12")]
    assert text_of(result) == "It does [1].\n\nSources:\n[1] Vitamin B12 (doc_id b12)"


@pytest.mark.parametrize(
    ("tool", "arguments", "named"),
    [
        ("search", {"query": COVERED, "top_k": 0}, "top_k"),
        ("search", {"query": COVERED, "top_k": "many"}, "top_k"),
        ("search", {}, "query"),
        ("search", {"query": "   "}, "query"),
        ("search", {"query": COVERED, "collection": "Not A Name"}, "collection"),
        ("search", {"query": COVERED, "filter": "team=bio"}, "filter"),
        ("search", {"query": COVERED, "filter": {"ingested_after": "yesterday"}}, "ingested_after"),
        ("ask", {"question": COVERED, "filter": {"source": ["a", {"b": 1}]}}, "source"),
        ("ask", {"question": ""}, "question"),
        ("get_document", {"doc_id": "no-such-doc"}, "doc_id"),
        ("get_document", {"doc_id": "  "}, "doc_id"),
    ],
)
async def test_bad_arguments_are_tool_errors_naming_the_argument(
    model: Model, tool: str, arguments: dict[str, Any], named: str
) -> None:
    async with connected(rag_app(model)) as client:
        result = await client.call_tool(tool, arguments)
        assert (await client.call_tool("search", {"query": COVERED})).is_error is False  # the server carries on
    assert result.is_error is True and result.structured_content is None
    assert text_of(result).startswith(f"Error executing tool {tool}: ") and named in text_of(result)


async def test_an_overloaded_service_refuses_ask_as_a_tool_error_with_the_message(model: Model) -> None:
    model.gate = asyncio.Event()
    async with connected(rag_app(model, answer_max_in_progress=1, answer_queue_max=0)) as client:
        holder = asyncio.create_task(client.call_tool("ask", {"question": COVERED}))
        await asyncio.wait_for(model.started.wait(), 30)
        refused = await client.call_tool("ask", {"question": COVERED})
        model.gate.set()
        held = await holder
    assert refused.is_error is True and held.is_error is False
    text = text_of(refused)
    assert "overloaded" in text and "ANSWER_MAX_IN_PROGRESS=1" in text and "retry in" in text and "retryable" in text


@pytest.mark.parametrize(
    ("error", "kind"),
    [(ModelHTTPError(500, "fake", "boom"), "llm_unavailable"), (ModelHTTPError(400, "fake", "bad"), "llm_bad")],
)
async def test_an_llm_failure_is_a_tool_error_with_the_message(model: Model, error: Exception, kind: str) -> None:
    model.error = error
    async with connected(rag_app(model, llm_max_retries=0)) as client:
        result = await client.call_tool("ask", {"question": COVERED})
        searched = await client.call_tool("search", {"query": COVERED})
    assert result.is_error is True and f"Error executing tool ask: {kind}" in text_of(result)
    assert searched.is_error is False  # retrieval does not need the LLM


@asynccontextmanager
async def over_http(rag: RagApp, key: str, mode: str, drains: list[Drain] | None = None) -> AsyncIterator[Client]:
    """The SDK's client (connecting in `mode`) over streamable HTTP to `/mcp` of the `rag serve` app with `API_KEY`
    `key` (its lifespan run, `rag` its app), sending `Authorization: Bearer <key>`; the app's drain is appended to
    `drains`."""
    app = create_app(rag.settings.model_copy(update={"api_key": SecretStr(key)}), rag)
    if drains is not None:
        drains.append(app_state(app).drain)
    headers = {"Authorization": f"Bearer {key}"}
    transport = httpx2.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx2.AsyncClient(transport=transport, base_url="http://localhost", headers=headers) as http,
        Client(streamable_http_client("http://localhost/mcp", http_client=http), mode=mode) as client,
    ):
        yield client


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_the_http_app_serves_the_tools_at_mcp_behind_its_api_key(model: Model, mode: str) -> None:
    async with over_http(rag_app(model), "s3cret", mode) as client:
        assert {tool.name for tool in (await client.list_tools()).tools} == TOOLS
        found = await client.call_tool("search", {"query": COVERED, "top_k": 1})
        answered = await client.call_tool("ask", {"question": COVERED})
    assert found.structured_content is not None and found.structured_content["passages"][0]["doc_id"] == "b12"
    assert answered.structured_content is not None and answered.structured_content["answer"] == "It does [1]."


@pytest.mark.parametrize("sent", [None, "wrong"])
async def test_the_http_app_refuses_mcp_without_the_api_key(model: Model, sent: str | None) -> None:
    rag = rag_app(model)
    app = create_app(rag.settings.model_copy(update={"api_key": SecretStr("s3cret")}), rag)
    headers = {"Authorization": f"Bearer {sent}"} if sent else {}
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    async with app.router.lifespan_context(app):
        transport = httpx2.ASGITransport(app=app)
        async with httpx2.AsyncClient(transport=transport, base_url="http://localhost") as http:
            response = await http.post("/mcp", json=body, headers=headers)
    assert response.status_code == 401 and response.headers["www-authenticate"] == "Bearer"
    assert response.json() == {"error": "unauthorized", "detail": "missing, wrong or revoked API key"}


async def test_mcp_refuses_a_cross_site_origin_and_answers_get_with_405(model: Model) -> None:
    rag = rag_app(model)
    app = create_app(rag.settings.model_copy(update={"allowed_hosts": ("rag.example.com",)}), rag)
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    accept = {"Accept": "application/json, text/event-stream", "Host": "rag.example.com"}
    async with app.router.lifespan_context(app):
        transport = httpx2.ASGITransport(app=app)
        async with httpx2.AsyncClient(transport=transport, base_url="http://rag.example.com") as http:
            foreign = await http.post("/mcp", json=body, headers=accept | {"Origin": "https://evil.example.net"})
            same = await http.post("/mcp", json=body, headers=accept | {"Origin": "http://rag.example.com"})
            none = await http.post("/mcp", json=body, headers=accept)  # not a browser: no Origin
            # failure guards only: an SDK event stream left open would never end
            get = await asyncio.wait_for(http.get("/mcp", headers=accept), 60)
            delete = await asyncio.wait_for(http.delete("/mcp", headers=accept), 60)
    assert foreign.status_code == 403 and foreign.json()["error"] == "forbidden_origin", foreign.text
    assert "evil.example.net" in foreign.json()["detail"]
    assert same.status_code == 200 and none.status_code == 200, (same.text, none.text)
    for refused in (get, delete):
        assert refused.status_code == 405 and refused.headers["allow"] == "POST", refused.headers
        assert refused.json()["error"] == "method_not_allowed"


async def test_an_ask_cut_by_the_shutdown_drain_is_a_retryable_tool_error(model: Model) -> None:
    model.gate = asyncio.Event()  # the model never writes: only the drain's end stops the answer
    drains: list[Drain] = []
    async with over_http(rag_app(model), "s3cret", "auto", drains) as client:
        call = asyncio.create_task(client.call_tool("ask", {"question": COVERED}))
        await asyncio.wait_for(model.started.wait(), 30)
        (drain,) = drains
        drain.begin(0.0)
        drain.cut()
        result = await asyncio.wait_for(call, 30)
    assert model.cancelled  # the answer stopped: no LLM left working for nobody
    assert result.is_error is True and result.structured_content is None
    text = text_of(result)
    assert "shutting_down" in text and "retry" in text and text.endswith("(retryable)"), text
