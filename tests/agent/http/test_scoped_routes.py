"""The routes that serve API key holders beyond documents and answers, in-process without servers: the
OpenAI-compatible API, conversations and MCP over HTTP, each scoped to the caller's key (in-memory keys swapped in
with `app.dependency_overrides[get_keys]`, as in test_keys.py). Against the real stack: test_tenancy_isolation.py."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import date
from typing import Any
from uuid import UUID, uuid4

import httpx
import httpx2
import openai
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from prometheus_client import CollectorRegistry
from pydantic import SecretStr
from pydantic_ai.models.function import FunctionModel

from agent.config.settings import Settings
from agent.core.app import RagApp
from agent.core.keys import InMemoryKeys
from agent.core.quotas import InMemoryUsage, QuotaMetrics, Quotas
from agent.core.wiring import Services
from agent.http import create_app
from agent.http.deps import app_state, get_keys
from tests.agent_corpus import COVERED, DOCUMENTS
from tests.conversation_rig import FOLLOW_UP, SUBJECT, ConversationServed
from tests.key_rig import scopes_asked
from tests.openai_rig import Rig, ask, assert_openai_error
from tests.scripted_model import ScriptedModel as Model
from tools.access import NOBODY
from tools.in_memory import InMemoryCollection
from tools.ingest import SourceDocument
from tools.scope import SearchScope
from tools.store.usage import total

ADMIN_KEY = "admin-secret"


async def keyed_rig(collections: list[str], **settings: Any) -> tuple[Rig, str]:
    """A rig whose app has one API key over `collections`; the key's token."""
    keys = InMemoryKeys()
    _, token = await keys.create(collections)
    rig = Rig(**settings)
    app_state(rig.app).keys = keys  # what the lifespan opens: the guard's view of the keys
    rig.app.dependency_overrides[get_keys] = lambda: keys
    return rig, token


async def test_a_key_holder_s_completion_searches_only_its_collections() -> None:
    rig, token = await keyed_rig(["papers", "notes"], api_key=SecretStr(ADMIN_KEY))
    sdk = rig.sdk(token)
    assert [m.id async for m in sdk.models.list()] == ["triton-rag", "triton-rag-always", "triton-rag-agentic"]
    assert (await sdk.models.retrieve("triton-rag")).id == "triton-rag"
    for extra in ({}, {"collection": "notes", "filter": {"year": 2019}}):
        completion = await sdk.chat.completions.create(
            model="triton-rag-always",
            messages=[{"role": "user", "content": ask()["messages"][0]["content"]}],
            extra_body=extra,
        )
        assert completion.choices[0].message.content == "It does [1]."
    admin = await rig.sdk(ADMIN_KEY).chat.completions.create(model="triton-rag-always", messages=ask()["messages"])
    assert admin.choices[0].message.content
    assert rig.collection.scopes[:2] == [
        SearchScope(collections=("notes", "papers"), access=NOBODY),  # a key without a group: public documents
        SearchScope.from_filter({"year": 2019}, ["notes"]).read_by(NOBODY),
    ]
    assert rig.collection.scopes[2] is not None and rig.collection.scopes[2].is_everything


async def test_a_collection_outside_the_key_is_403_in_openai_shape_before_any_search() -> None:
    rig, token = await keyed_rig(["papers"])
    async with rig.http(Authorization=f"Bearer {token}") as client:
        for extra in ({"collection": "other"}, {"collections": ["papers", "other"]}):
            for stream in (False, True):
                refused = await client.post("/v1/chat/completions", json=ask(stream=stream, **extra))
                assert refused.status_code == 403, refused.text
                error = refused.json()["error"]
                assert (error["code"], error["type"]) == ("forbidden_collection", "permission_error")
                assert "'other'" in error["message"]
        assert_openai_error(
            await client.get("/v1/models", headers={"Authorization": "Bearer rag_forged"}), 401, "unauthorized"
        )
    with pytest.raises(openai.PermissionDeniedError, match="collection 'nope'") as denied:
        await rig.sdk(token).chat.completions.create(
            model="triton-rag", messages=ask()["messages"], extra_body={"collection": "nope"}
        )
    assert denied.value.code == "forbidden_collection"
    assert not rig.model.seen and not getattr(rig.collection, "scopes", [])


def not_found_body(response: httpx.Response, conversation_id: str) -> dict[str, Any]:
    """The 404 body of `response` with the conversation id taken out of its detail (the rest must match)."""
    assert response.status_code == 404, response.text
    body: dict[str, Any] = response.json()
    assert body["error"] == "conversation_not_found" and conversation_id in body["detail"], body
    return body | {"detail": body["detail"].replace(conversation_id, "<id>")}


async def test_a_key_holder_sees_only_its_own_conversations() -> None:
    keys = InMemoryKeys()
    (a, token_a), (_, token_b) = await keys.create(["default"]), await keys.create(["default"])
    served = ConversationServed(api_key=SecretStr(ADMIN_KEY))
    app_state(served.app).keys = keys
    served.app.dependency_overrides[get_keys] = lambda: keys
    async with served.client(Authorization=f"Bearer {token_a}") as tenant_a:
        mine = (await tenant_a.post("/v1/conversations", json={"title": "a's"})).json()["id"]
        asked = await tenant_a.post("/v1/ask", json={"question": SUBJECT, "conversation_id": mine})
        assert asked.status_code == 200 and asked.json()["conversation_id"] == mine
    async with served.client(Authorization=f"Bearer {ADMIN_KEY}") as admin:
        unowned = (await admin.post("/v1/conversations", json={"title": "admin's"})).json()["id"]
        listed = (await admin.get("/v1/conversations")).json()
        assert {c["id"] for c in listed["conversations"]} == {mine, unowned} and listed["total"] == 2
        assert (await admin.get(f"/v1/conversations/{mine}")).json()["turn_count"] == 1
    assert (await served.rag.conversation(UUID(mine))).owner == str(a.id)
    assert (await served.rag.conversation(UUID(unowned))).owner is None
    missing = str(uuid4())
    async with served.client(Authorization=f"Bearer {token_b}") as tenant_b:
        assert (await tenant_b.get("/v1/conversations")).json() == {
            "conversations": [],
            "total": 0,
            "next_cursor": None,
        }
        for method, path in (("GET", "/v1/conversations/"), ("DELETE", "/v1/conversations/")):
            for theirs in (mine, unowned):
                answers = [await tenant_b.request(method, path + cid) for cid in (theirs, missing)]
                assert not_found_body(answers[0], theirs) == not_found_body(answers[1], missing)
        for path in ("/v1/ask", "/v1/ask/stream"):
            for theirs in (mine, unowned):
                answers = [
                    await tenant_b.post(path, json={"question": FOLLOW_UP, "conversation_id": cid})
                    for cid in (theirs, missing)
                ]
                assert not_found_body(answers[0], theirs) == not_found_body(answers[1], missing)
    async with served.client(Authorization=f"Bearer {token_a}") as tenant_a:
        listed = (await tenant_a.get("/v1/conversations")).json()
        assert [c["id"] for c in listed["conversations"]] == [mine] and listed["total"] == 1
        assert (await tenant_a.get(f"/v1/conversations/{mine}")).json()["turn_count"] == 1  # nothing of b's stored
        assert (await tenant_a.delete(f"/v1/conversations/{mine}")).json() == {"deleted": mine}
        assert (await tenant_a.get(f"/v1/conversations/{mine}")).status_code == 404


async def test_a_conversation_s_turns_search_the_asking_caller_s_collections() -> None:
    keys = InMemoryKeys()
    _, token = await keys.create(["papers", "notes"])
    served = ConversationServed()
    app_state(served.app).keys = keys
    served.app.dependency_overrides[get_keys] = lambda: keys
    scopes = scopes_asked(served.rag)
    async with served.client(Authorization=f"Bearer {token}") as client:
        cid = (await client.post("/v1/conversations")).json()["id"]
        for question in (SUBJECT, FOLLOW_UP):
            asked = await client.post("/v1/ask", json={"question": question, "conversation_id": cid})
            assert asked.status_code == 200, asked.text
        narrowed = await client.post(
            "/v1/ask", json={"question": FOLLOW_UP, "conversation_id": cid, "collection": "notes"}
        )
        refused = await client.post("/v1/ask", json={"question": FOLLOW_UP, "conversation_id": cid, "collection": "x"})
        assert refused.status_code == 403 and refused.json()["error"] == "forbidden_collection"
        assert narrowed.status_code == 200 and (await client.get(f"/v1/conversations/{cid}")).json()["turn_count"] == 3
    public = [SearchScope(collections=("notes", "papers"), access=NOBODY)] * 2
    assert scopes == [*public, SearchScope(collections=("notes",), access=NOBODY)]


SECRET = SourceDocument("b12-other", "Vitamin B12 (other team)", "Vitamin B12 deficiency raises homocysteine.", "o", {})
"""A near-duplicate of `b12` in the collection `other`, which the tenant's key does not hold."""


@asynccontextmanager
async def mcp_as(
    token: str, keys: InMemoryKeys, mode: str = "auto", quotas: Quotas | None = None
) -> AsyncIterator[Client]:
    """The SDK's client over streamable HTTP to `/mcp` of the `rag serve` app (its lifespan run, with `keys` and,
    given, `quotas`), over `DOCUMENTS` in `default` and `SECRET` in `other`, sending `Authorization: Bearer
    <token>`."""
    settings = Settings.model_validate({"refusal_min_score": 0.3, "api_key": ADMIN_KEY})
    collection = InMemoryCollection(DOCUMENTS)
    await collection.add_documents([SECRET], "other")
    rag = RagApp(settings, Services(collection, collection, FunctionModel(stream_function=Model().stream)))
    app = create_app(settings, rag)
    transport = httpx2.ASGITransport(app=app)
    headers = {"Authorization": f"Bearer {token}"}
    async with app.router.lifespan_context(app):
        app_state(app).keys = keys  # a test app's lifespan brings no keys
        app_state(app).quotas = quotas
        async with (
            httpx2.AsyncClient(transport=transport, base_url="http://localhost", headers=headers) as http,
            Client(streamable_http_client("http://localhost/mcp", http_client=http), mode=mode) as client,
        ):
            yield client


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_a_key_holder_s_mcp_tools_see_only_its_collections(mode: str) -> None:
    keys = InMemoryKeys()
    _, token = await keys.create(["default"])
    async with mcp_as(token, keys, mode) as client:
        found = await client.call_tool("search", {"query": COVERED, "top_k": 10})
        theirs = await client.call_tool("get_document", {"doc_id": "b12-other"})
        missing = await client.call_tool("get_document", {"doc_id": "nowhere"})
        asked = await client.call_tool("ask", {"question": COVERED, "top_k": 10})
        mine = await client.call_tool("get_document", {"doc_id": "b12"})
        refused = [
            await client.call_tool(tool, {"collection": "other"} | args)
            for tool, args in (
                ("search", {"query": COVERED}),
                ("get_document", {"doc_id": "b12-other"}),
                ("ask", {"question": COVERED}),
            )
        ]
    assert found.structured_content is not None and asked.structured_content is not None
    assert {p["doc_id"] for p in found.structured_content["passages"]} <= {d.doc_id for d in DOCUMENTS}
    assert "b12" in {p["doc_id"] for p in found.structured_content["passages"]}
    assert {c["doc_id"] for c in asked.structured_content["citations"]} == {"b12"}
    assert theirs.is_error and missing.is_error and not mine.is_error
    assert theirs.content[0].text.replace("b12-other", "<id>") == missing.content[0].text.replace("nowhere", "<id>")  # type: ignore[union-attr]
    for result in refused:
        assert result.is_error and "forbidden_collection" in result.content[0].text  # type: ignore[union-attr]
        assert "'other'" in result.content[0].text  # type: ignore[union-attr]


async def test_the_admin_s_mcp_tools_see_every_collection() -> None:
    async with mcp_as(ADMIN_KEY, InMemoryKeys()) as client:
        found = await client.call_tool("search", {"query": COVERED, "top_k": 10})
        theirs = await client.call_tool("get_document", {"doc_id": "b12-other", "collection": "other"})
    assert found.structured_content is not None and not theirs.is_error
    assert "b12-other" in {p["doc_id"] for p in found.structured_content["passages"]}


async def test_the_tokens_of_an_mcp_answer_count_in_its_key_s_usage() -> None:
    keys, usage = InMemoryKeys(), InMemoryUsage()
    key, token = await keys.create(["default"])
    quotas = Quotas(Settings.model_validate({}), usage, QuotaMetrics.create(CollectorRegistry()))
    async with mcp_as(token, keys, quotas=quotas) as client:
        asked = await client.call_tool("ask", {"question": COVERED})
        await client.call_tool("search", {"query": COVERED})
    assert not asked.is_error
    used = total(await usage.report(date(2000, 1, 1), key.id))
    assert used.prompt_tokens > 0 and used.completion_tokens > 0 and used.llm_ms > 0  # the ask tool's answer
    assert used.requests == 1  # the ask call; neither the session's set-up nor `search` is an answer request


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_mcp_protocol_messages_use_no_quota_and_an_ask_over_it_is_a_tool_error(mode: str) -> None:
    """With 3 requests a minute, the session's set-up (`initialize`, its notification, `tools/list`) takes none of
    them: three `ask` calls are answered, the fourth is a tool error the official client shows, and the session
    goes on (`search` is not metered)."""
    keys, usage = InMemoryKeys(), InMemoryUsage()
    key, token = await keys.create(["default"], requests_per_minute=3)
    quotas = Quotas(Settings.model_validate({}), usage, QuotaMetrics.create(CollectorRegistry()))
    async with mcp_as(token, keys, mode, quotas=quotas) as client:
        assert {t.name for t in (await client.list_tools()).tools} >= {"ask", "search"}
        answers = [await client.call_tool("ask", {"question": COVERED}) for _ in range(4)]
        found = await client.call_tool("search", {"query": COVERED})
    assert [a.is_error for a in answers] == [False, False, False, True] and not found.is_error
    text = answers[3].content[0].text  # type: ignore[union-attr]
    assert "quota_exceeded: API key" in text and "requests of the last minute (retry after" in text, text
    assert total(await usage.report(date(2000, 1, 1), key.id)).requests == 3
