"""The routes that serve API key holders beyond documents and answers, in-process without servers: the
OpenAI-compatible API, conversations and MCP over HTTP, each scoped to the caller's key (in-memory keys swapped in
with `app.dependency_overrides[get_keys]`, as in test_keys.py). Against the real stack: test_tenancy_isolation.py."""

from __future__ import annotations

from typing import Any
from uuid import UUID, uuid4

import httpx
import openai
import pytest
from pydantic import SecretStr

from agent.answer import AnswerRequest
from agent.http.deps import get_keys
from agent.keys import InMemoryKeys
from agent.results import AskResult
from tests import test_conversations_http
from tests.test_conversations_logic import FOLLOW_UP, SUBJECT
from tests.test_openai_chat import Rig, ask, assert_openai_error
from tools.scope import SearchScope

ADMIN_KEY = "admin-secret"


async def keyed_rig(collections: list[str], **settings: Any) -> tuple[Rig, str]:
    """A rig whose app has one API key over `collections`; the key's token."""
    keys = InMemoryKeys()
    _, token = await keys.create(collections)
    rig = Rig(**settings)
    rig.app.state.keys = keys  # what the lifespan opens: the guard's view of the keys
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
        SearchScope(collections=("notes", "papers")),
        SearchScope.from_filter({"year": 2019}, ["notes"]),
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
    served = test_conversations_http.Served(api_key=SecretStr(ADMIN_KEY))
    served.app.state.keys = keys
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
    served = test_conversations_http.Served()
    served.app.state.keys = keys
    served.app.dependency_overrides[get_keys] = lambda: keys
    scopes: list[SearchScope | None] = []
    ask = served.rag.ask

    async def spy(request: AnswerRequest | str, **kwargs: Any) -> AskResult:
        assert isinstance(request, AnswerRequest)
        scopes.append(request.scope)
        return await ask(request, **kwargs)

    served.rag.ask = spy  # type: ignore[method-assign]
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
    assert scopes == [SearchScope(collections=("notes", "papers"))] * 2 + [SearchScope(collections=("notes",))]
