"""The routes that serve API key holders beyond documents and answers, in-process without servers: the
OpenAI-compatible API, conversations and MCP over HTTP, each scoped to the caller's key (in-memory keys swapped in
with `app.dependency_overrides[get_keys]`, as in test_keys.py). Against the real stack: test_tenancy_isolation.py."""

from __future__ import annotations

from typing import Any

import openai
import pytest
from pydantic import SecretStr

from agent.http.deps import get_keys
from agent.keys import InMemoryKeys
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
