"""The MCP tools over the real transports and the real stack (Triton, Postgres holding a few SciFact abstracts in a
database of its own), through the SDK's own client: `rag mcp` spawned over stdio, and `/mcp` of a real `rag serve`
process, with and without its API key. The LLM is the fake OpenAI server. The tools' contract in detail (argument
errors, overload, LLM failures) is tested in-process in test_mcp_tools.py."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import httpx2
import psutil
import pytest
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.session import IncomingMessage
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult, TextContent

from agent.config.settings import Settings
from tests.conftest import REPO_ROOT, cli_env
from tests.fake_openai import FakeOpenAIServer, Reply
from tests.http_server import RagServe
from tests.scifact_database import scifact_database

CLAIM = "A deficiency of vitamin B12 increases blood levels of homocysteine."
ANSWER = "The passage reports it [1]."
DATABASE = "mcp_test"
DOCUMENTS = 5
KEY = "mcp-s3cret"


@pytest.fixture(scope="module")
async def mcp_store(postgres_url: str, triton_server: Settings, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A database of its own on the test Postgres holding the first `DOCUMENTS` SciFact abstracts; its URL."""
    folder = tmp_path_factory.mktemp("mcp")
    return await scifact_database(postgres_url, DATABASE, DOCUMENTS, triton_server, folder)


@pytest.fixture(scope="module")
def llm() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as server:
        server.state.default = Reply(text=ANSWER)
        yield server


@pytest.fixture(scope="module")
def env(triton_server: Settings, mcp_store: str, llm: FakeOpenAIServer) -> dict[str, str]:
    """The environment of `rag mcp` / `rag serve`: the test stack, the small store, the fake LLM answering every
    question (no refusal threshold)."""
    return cli_env(triton_server) | {
        "DATABASE_URL": mcp_store,
        "LLM_BASE_URL": llm.base_url,
        "VLLM_PORT": str(llm.port),
        "LLM_MODEL": "fake",
        "LLM_MAX_RETRIES": "0",
        "REFUSAL_MIN_SCORE": "-1",
    }


def text_of(result: CallToolResult) -> str:
    """The text of a result's single text block."""
    assert len(result.content) == 1 and isinstance(result.content[0], TextContent), result.content
    return result.content[0].text


async def check_every_tool(client: Client, llm: FakeOpenAIServer) -> None:
    """List the tools and call each one against the small store: results as text and structured content."""
    assert {tool.name for tool in (await client.list_tools()).tools} == {"search", "get_document", "ask"}

    found = await client.call_tool("search", {"query": CLAIM, "top_k": 3})
    assert found.is_error is False and found.structured_content is not None
    passages = found.structured_content["passages"]
    assert [p["number"] for p in passages] == [1, 2, 3]
    assert all(p["doc_id"] and p["text"] and p["chunk_id"].startswith(p["doc_id"] + "#") for p in passages)
    assert [p["score"] for p in passages] == sorted((p["score"] for p in passages), reverse=True)
    assert all(f"(doc_id {p['doc_id']}, score " in text_of(found) and p["text"] in text_of(found) for p in passages)

    first = passages[0]
    document = await client.call_tool("get_document", {"doc_id": first["doc_id"]})
    assert document.is_error is False and document.structured_content is not None
    assert document.structured_content["doc_id"] == first["doc_id"]
    assert document.structured_content["title"] == first["title"]
    tail = " ".join(first["text"].split()[-8:])
    assert tail in " ".join(document.structured_content["text"].split())  # the passage is part of its document
    missing = await client.call_tool("get_document", {"doc_id": "no-such-doc"})
    assert missing.is_error is True and "doc_id 'no-such-doc' is not stored" in text_of(missing)

    requests = llm.reset()
    answered = await client.call_tool("ask", {"question": CLAIM, "top_k": 3})
    assert answered.is_error is False and answered.structured_content is not None
    assert answered.structured_content["answer"] == ANSWER
    [citation] = answered.structured_content["citations"]
    assert (citation["passage"], citation["doc_id"]) == (1, first["doc_id"])
    assert text_of(answered).startswith(ANSWER + "\n\nSources:\n[1] ")
    assert len(requests) == 1 and first["text"].split()[-1] in str(requests[0]["messages"])  # the passages went in

    bad = await client.call_tool("search", {"query": CLAIM, "top_k": 0})
    assert bad.is_error is True and "top_k" in text_of(bad)


async def test_rag_mcp_serves_the_tools_over_stdio_and_stops(
    env: dict[str, str], llm: FakeOpenAIServer, tmp_path: Path
) -> None:
    problems: list[Exception] = []

    async def on_message(message: IncomingMessage) -> None:
        if isinstance(message, Exception):  # e.g. a stdout line that is not an MCP message
            problems.append(message)

    params = StdioServerParameters(command=sys.executable, args=["-m", "agent", "mcp"], env=env, cwd=REPO_ROOT)
    me = psutil.Process()
    before = {child.pid for child in me.children(recursive=True)}
    with (tmp_path / "stderr.log").open("w+") as errlog:
        try:
            async with Client(stdio_client(params, errlog=errlog), message_handler=on_message) as client:
                [server] = [child for child in me.children() if child.pid not in before]
                assert server.cmdline()[-2:] == ["agent", "mcp"]
                await check_every_tool(client, llm)
        finally:
            errlog.seek(0)
            log = errlog.read()
    assert not problems and "Traceback" not in log, (problems, log)
    assert not server.is_running() or server.status() == psutil.STATUS_ZOMBIE, log


@pytest.fixture(scope="module")
def served(triton_server: Settings, env: dict[str, str]) -> Iterator[RagServe]:
    with RagServe(triton_server, env | {"API_KEY": KEY}) as server:
        yield server


@asynccontextmanager
async def over_http(url: str, headers: dict[str, str], statuses: list[int] | None = None) -> AsyncIterator[Client]:
    """The SDK's client over streamable HTTP to `url`, sending `headers`; the status of every HTTP response it gets
    is appended to `statuses`."""

    async def record(response: httpx2.Response) -> None:
        if statuses is not None:
            statuses.append(response.status_code)

    async with (
        httpx2.AsyncClient(headers=headers, timeout=120, event_hooks={"response": [record]}) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        yield client


async def test_rag_serve_serves_the_tools_at_mcp_with_the_api_key(served: RagServe, llm: FakeOpenAIServer) -> None:
    async with over_http(served.url + "/mcp", {"Authorization": f"Bearer {KEY}"}) as client:
        await check_every_tool(client, llm)


def test_rag_serve_refuses_mcp_without_the_api_key(served: RagServe) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    accept = {"Accept": "application/json, text/event-stream"}
    for headers in (accept, accept | {"Authorization": "Bearer wrong"}):
        response = httpx.post(served.url + "/mcp", json=body, headers=headers, timeout=30)
        assert response.status_code == 401 and response.headers["www-authenticate"] == "Bearer"
        assert response.json() == {"error": "unauthorized", "detail": "missing, wrong or revoked API key"}


async def test_the_sdk_client_without_the_key_gets_401_and_fails(served: RagServe) -> None:
    statuses: list[int] = []
    with pytest.raises(ExceptionGroup) as refused:
        async with over_http(served.url + "/mcp", {}, statuses) as client:
            await client.list_tools()
    assert refused.group_contains(MCPError) and statuses and set(statuses) == {401}
