"""API keys and the caller of a request, in-process without servers: tokens and hashes (`agent.core.keys`), the `Caller`
dependency (`agent.http.deps`) over in-memory keys swapped in with `app.dependency_overrides[get_keys]`, and the
routes' answers to key holders (401, 403 `forbidden_collection`, identical 404s, empty listings). The same against
Postgres and the real stack: test_keys_stack.py, test_tenancy_isolation.py."""

from __future__ import annotations

import hashlib
from typing import Any
from uuid import uuid4

import pytest
from pydantic import SecretStr

from agent.core.errors import InputError
from agent.core.keys import CachedKeys, InMemoryKeys
from agent.http.deps import ADMIN, CallerIdentity, app_state, get_keys
from agent.http.errors import ApiError
from tests.http_rig import Served, assert_error, serve
from tests.key_rig import scopes_asked
from tools.access import NOBODY
from tools.records import ApiKey
from tools.scope import SearchScope
from tools.store.keys import TOKEN_PREFIX, new_token, token_hash


def keyed(keys: InMemoryKeys, **settings: Any) -> Served:
    served = serve(**settings)
    app_state(served.app).keys = keys  # what the lifespan opens: the guard's view of the keys
    served.app.dependency_overrides[get_keys] = lambda: keys
    return served


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_tokens_are_256_bit_random_and_only_their_sha256_is_kept() -> None:
    tokens = {new_token() for _ in range(1000)}
    assert len(tokens) == 1000
    assert all(t.startswith(TOKEN_PREFIX) and len(t) == len(TOKEN_PREFIX) + 43 for t in tokens)
    token = tokens.pop()
    assert token_hash(token) == hashlib.sha256(token.encode()).hexdigest()


class Counted(InMemoryKeys):
    """In-memory keys that count the look-ups a `CachedKeys` passes on to them."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    async def holder(self, token: str) -> ApiKey | None:
        self.reads += 1
        return await super().holder(token)

    async def any_keys(self) -> bool:
        self.reads += 1
        return await super().any_keys()


async def test_cached_keys_read_the_table_once_per_ttl_and_never_remember_a_miss() -> None:
    keys, now = Counted(), [0.0]
    cached = CachedKeys(keys, ttl_s=5.0, timer=lambda: now[0])
    assert not await cached.any_keys() and not await cached.any_keys() and keys.reads == 1  # "none yet": 5 s
    key, token = await keys.create(["a"])
    assert not await cached.any_keys()  # the first key is required within API_KEYS_CACHE_S
    now[0] = 5.1
    assert await cached.any_keys() and keys.reads == 2
    await keys.revoke(key.id)
    now[0] = 1e6
    assert await cached.any_keys() and keys.reads == 2  # some key exists: for good (keys are never deleted)

    key, token = await keys.create(["b"])
    assert await cached.holder(token) == key and await cached.holder(token) == key and keys.reads == 3
    assert await cached.holder("rag_unknown") is None and await cached.holder("rag_unknown") is None
    assert keys.reads == 5  # a token without a key is asked every time: a new key works at once
    await keys.revoke(key.id)
    assert await cached.holder(token) == key  # revoked: still trusted until its entry expires
    now[0] += 5.1
    assert await cached.holder(token) is None and keys.reads == 6


async def test_cached_keys_with_ttl_0_read_every_time() -> None:
    keys = Counted()
    cached = CachedKeys(keys, ttl_s=0)
    key, token = await keys.create(["a"])
    for _ in range(3):
        assert await cached.holder(token) == key
    assert not await CachedKeys(Counted(), ttl_s=0).any_keys()
    assert keys.reads == 3


async def test_in_memory_keys_create_list_and_revoke() -> None:
    keys = InMemoryKeys()
    key, token = await keys.create(["b", "a", "a"], name="team")
    assert key.collections == ("a", "b") and key.active and key.name == "team"
    assert [(k, h) for k, h in keys.rows.values()] == [(key, token_hash(token))]  # the token itself is not kept
    assert await keys.holder(token) == key and await keys.holder(token + "x") is None
    revoked = await keys.revoke(key.id)
    assert revoked is not None and not revoked.active and await keys.holder(token) is None
    assert await keys.revoke(99) is None and [k.id for k in await keys.list()] == [key.id]
    with pytest.raises(ValueError, match="collection"):
        await keys.create([])
    with pytest.raises(ValueError, match="collection 'Bad Name'"):
        await keys.create(["Bad Name"])


def test_the_scope_of_a_caller_is_its_request_within_its_key() -> None:
    tenant = CallerIdentity(("a", "b"), key_id=1)
    assert tenant.scope(None) == SearchScope(collections=("a", "b"))
    assert tenant.scope({"year": 2019}, "b") == SearchScope.from_filter({"year": 2019}, ["b"])
    assert tenant.scope(None, ["b", "a", "b"]) == SearchScope(collections=("a", "b"))
    assert ADMIN.scope(None).is_everything and ADMIN.scope(None, "zzz") == SearchScope(collections=("zzz",))
    with pytest.raises(ApiError) as refused:
        tenant.scope(None, ["a", "c"])
    assert (refused.value.status_code, refused.value.kind) == (403, "forbidden_collection")
    assert "'c'" in str(refused.value.detail)
    with pytest.raises(InputError, match="collection 'A'"):
        tenant.scope(None, "A")
    with pytest.raises(InputError, match="filter 'year'"):
        tenant.scope({"year": []}, "a")
    with pytest.raises(ApiError):
        tenant.target(None)  # `default` is not the key's: a write must name a collection of the key
    assert tenant.target("b") == "b" and ADMIN.target(None) == "default"


async def test_keys_in_the_table_need_a_key_even_without_api_key() -> None:
    keys = InMemoryKeys()
    open_server = keyed(keys)
    async with open_server.client() as client:
        assert (await client.get("/v1/documents")).status_code == 200  # no API_KEY, no keys: open, as before keys
    _, token = await keys.create(["default"])
    async with keyed(keys).client() as client:
        for headers in ({}, bearer("rag_not-a-key"), bearer(token[:-1])):
            response = await client.get("/v1/documents", headers=headers)
            assert_error(response, 401, "unauthorized", "API key")
            assert response.headers["www-authenticate"] == "Bearer"
        assert (await client.get("/v1/documents", headers=bearer(token))).status_code == 200
        assert (await client.get("/health")).status_code == 200  # health stays open


async def test_api_key_stays_the_admin_of_every_collection() -> None:
    keys = InMemoryKeys()
    _, token = await keys.create(["other"])
    served = keyed(keys, api_key=SecretStr("admin-secret"))
    async with served.client() as client:
        admin = (await client.get("/v1/documents", headers=bearer("admin-secret"))).json()
        tenant = (await client.get("/v1/documents", headers=bearer(token))).json()
        assert_error(await client.get("/v1/documents"), 401, "unauthorized")
    assert admin["total"] == 4 and {d["collection"] for d in admin["documents"]} == {"default"}
    assert tenant == {"documents": [], "total": 0, "next_cursor": None}


async def test_a_revoked_key_is_refused_from_the_next_request() -> None:
    keys = InMemoryKeys()
    key, token = await keys.create(["default"])
    async with keyed(keys).client(**bearer(token)) as client:
        assert (await client.get("/v1/documents")).json()["total"] == 4
        await keys.revoke(key.id)
        assert_error(await client.get("/v1/documents"), 401, "unauthorized", "revoked")
        assert_error(await client.delete("/v1/documents/b12"), 401, "unauthorized")
    assert (await keyed(keys).collection.count())[0] == 4


async def test_another_collection_s_document_reads_exactly_like_a_missing_one() -> None:
    keys = InMemoryKeys()
    _, token = await keys.create(["other"])
    served = keyed(keys)
    async with served.client(**bearer(token)) as client:
        outside = await client.delete("/v1/documents/b12")  # stored, in `default`
        missing = await client.delete("/v1/documents/no-such-doc")
        listed = await client.get("/v1/documents", params={"limit": 10})
        own = await client.get("/v1/documents", params={"collection": "other"})
    assert outside.status_code == missing.status_code == 404
    assert outside.json() == {"error": "document_not_found", "detail": "document 'b12' is not stored"}
    assert missing.json() == {"error": "document_not_found", "detail": "document 'no-such-doc' is not stored"}
    assert set(outside.headers) == set(missing.headers)
    assert listed.json() == own.json() == {"documents": [], "total": 0, "next_cursor": None}
    assert (await served.collection.count())[0] == 4  # nothing was deleted


async def test_naming_a_collection_outside_the_key_is_403_whether_or_not_it_exists() -> None:
    keys = InMemoryKeys()
    _, token = await keys.create(["other"])
    document = {"doc_id": "n", "text": "new text"}
    async with keyed(keys).client(**bearer(token)) as client:
        for collection in ("default", "never-made"):
            assert_error(
                await client.get("/v1/documents", params={"collection": collection}),
                403,
                "forbidden_collection",
                f"collection {collection!r} is not one of this API key's collections (other)",
            )
            assert_error(
                await client.delete("/v1/documents/b12", params={"collection": collection}), 403, "forbidden_collection"
            )
            body = {"documents": [document], "collection": collection}
            assert_error(await client.post("/v1/documents", json=body), 403, "forbidden_collection")
        # without a collection a write goes to `default`, which this key does not hold
        assert_error(await client.post("/v1/documents", json={"documents": [document]}), 403, "forbidden_collection")
        assert_error(await client.get("/v1/documents", params={"collection": "Not Valid"}), 422, "bad_request")


async def test_an_answer_searches_only_the_caller_s_collections() -> None:
    keys = InMemoryKeys()
    _, token = await keys.create(["other", "default"])
    served = keyed(keys, api_key=SecretStr("admin-secret"))
    scopes = scopes_asked(served.rag)
    async with served.client() as client:
        question = {"question": "Vitamin B12 deficiency and homocysteine levels"}
        assert (await client.post("/v1/ask", json=question, headers=bearer("admin-secret"))).status_code == 200
        tenant = await client.post("/v1/ask", json=question, headers=bearer(token))
        stream = await client.post("/v1/ask/stream", json=question, headers=bearer(token))
    assert scopes[0] is not None and scopes[0].is_everything
    assert scopes[1:] == [SearchScope(collections=("default", "other"), access=NOBODY)] * 2  # public documents
    assert stream.status_code == 200 and tenant.status_code != 401


async def test_a_caller_is_needed_for_the_schema_and_jobs() -> None:
    keys = InMemoryKeys()
    _, token = await keys.create(["default"])
    async with keyed(keys).client() as client:
        for path in ("/openapi.json", "/v1/jobs", "/v1/jobs/1"):
            assert_error(await client.get(path), 401, "unauthorized")
        assert (await client.get("/openapi.json", headers=bearer(token))).status_code == 200
        response = await client.post("/v1/documents/files", headers=bearer(token), files={"files": ("a.txt", b"x")})
        assert response.status_code == 503  # a test app has no jobs queue; the key was accepted first


@pytest.mark.parametrize("api_key", [None, "admin-secret"])
async def test_openai_and_mcp_refuse_a_missing_or_forged_token(api_key: str | None) -> None:
    keys = InMemoryKeys()
    _, token = await keys.create(["default"])
    served = keyed(keys, **({"api_key": SecretStr(api_key)} if api_key else {}))
    async with served.client() as client:
        for headers in ({}, bearer("rag_forged")):
            assert_error(await client.post("/mcp", headers=headers, json={}), 401, "unauthorized")
        for headers in ({}, bearer("rag_forged")):  # OpenAI's routes answer in OpenAI's error shape
            assert (await client.get("/v1/models", headers=headers)).status_code == 401
            assert (await client.post("/v1/chat/completions", headers=headers, json={})).status_code == 401
        assert (await client.get("/v1/models", headers=bearer(token))).status_code == 200
        if api_key:
            assert (await client.get("/v1/models", headers=bearer(api_key))).status_code == 200


def test_a_scope_the_request_built_is_narrowed_to_the_key() -> None:
    tenant = CallerIdentity(("a", "b"), key_id=1)
    asked = SearchScope.from_filter({"team": "bio"}, ["b"])
    assert tenant.narrow(asked) == asked and tenant.narrow(None) == SearchScope(collections=("a", "b"))
    assert tenant.narrow(SearchScope.from_filter({"team": "bio"})) == SearchScope.from_filter(
        {"team": "bio"}, ["a", "b"]
    )
    assert ADMIN.narrow(asked) == asked
    with pytest.raises(ApiError):
        tenant.narrow(SearchScope(collections=("c",)))


async def test_a_key_holder_s_unknown_conversation_is_404() -> None:
    keys = InMemoryKeys()
    _, token = await keys.create(["default"])
    body = {"question": "Vitamin B12 deficiency and homocysteine levels", "conversation_id": str(uuid4())}
    async with keyed(keys).client(**bearer(token)) as client:
        for path in ("/v1/ask", "/v1/ask/stream"):
            assert_error(await client.post(path, json=body), 404, "conversation_not_found")
