"""The access routes and keys tied to a group, in-process over in-memory keys, grants and documents: the grants are
the admin key's alone, a document's groups are changed by the admin or a collection admin, and a key's group decides
its collections, roles and the documents it reads."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import SecretStr

from agent.core.keys import InMemoryKeys
from agent.http.deps import app_state, get_keys, key_caller
from agent.http.jobs import get_jobs
from tests.http_rig import Served, assert_error, serve
from tools.access import NOBODY, Role, caller_access
from tools.in_memory_grants import InMemoryGrants

ADMIN = {"Authorization": "Bearer admin-secret"}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def served(keys: InMemoryKeys, grants: InMemoryGrants, **settings: Any) -> Served:
    """The app with `keys` and `grants` as its lifespan would open them, and the admin key `admin-secret`."""
    app = serve(api_key=SecretStr("admin-secret"), **settings)
    state = app_state(app.app)
    state.keys, state.grants = keys, grants
    app.app.dependency_overrides[get_keys] = lambda: keys
    return app


async def test_the_admin_manages_grants_and_nobody_else_does() -> None:
    keys, grants = InMemoryKeys(), InMemoryGrants()
    _, token = await keys.create(["default"])
    app = served(keys, grants)
    async with app.client() as client:
        made = await client.put("/v1/access/grants", json={"group": "eng", "collection": "handbook"}, headers=ADMIN)
        assert made.status_code == 200 and made.json()["role"] == "reader"
        body = {"group": "/org/ops", "collection": "handbook", "role": "admin"}
        assert (await client.put("/v1/access/grants", json=body, headers=ADMIN)).status_code == 200
        listed = (await client.get("/v1/access/grants", headers=ADMIN)).json()["grants"]
        assert [(g["group"], g["role"]) for g in listed] == [("/org/ops", "admin"), ("eng", "reader")]
        bad = await client.put("/v1/access/grants", json={**body, "role": "owner"}, headers=ADMIN)
        assert_error(bad, 422, "bad_request", "role 'owner'")
        gone = await client.delete("/v1/access/grants//org/ops/handbook", headers=ADMIN)
        assert gone.status_code == 200 and gone.json() == {"group": "/org/ops", "collection": "handbook"}
        again = await client.delete("/v1/access/grants//org/ops/handbook", headers=ADMIN)
        assert_error(again, 404, "grant_not_found", "/org/ops")
        for refused in (
            await client.get("/v1/access/grants", headers=bearer(token)),
            await client.put("/v1/access/grants", json=body, headers=bearer(token)),
        ):
            assert refused.status_code == 401  # the key guard: a key holder reaches no admin path
    assert [g.group for g in await grants.list()] == ["eng"]


async def test_a_key_tied_to_a_group_uses_the_group_s_grants() -> None:
    keys, grants = InMemoryKeys(), InMemoryGrants()
    await grants.grant("eng", "default", "reader")
    await grants.grant("everyone", "public", "reader")
    await grants.grant("sales", "deals", "admin")
    eng, eng_token = await keys.create([], group="eng")
    pinned, pinned_token = await keys.create(["default", "notes"], group="eng")
    app = served(keys, grants)
    caller = await key_caller(eng, grants)
    assert caller.collections == ("default", "public") and caller.access == caller_access(["eng"])
    assert caller.roles == {"default": Role.READER, "public": Role.READER}
    own = await key_caller(pinned, grants)
    assert own.collections == ("default", "notes") and own.roles == {"default": Role.READER, "notes": Role.READER}
    async with app.client() as client:
        listed = await client.get("/v1/collections", headers=bearer(eng_token))
        assert [c["name"] for c in listed.json()["collections"]] == ["default", "public"]
        write = {"documents": [{"doc_id": "x", "text": "Herons fish."}]}
        refused = await client.post("/v1/documents", json=write, headers=bearer(eng_token))
        assert_error(refused, 403, "forbidden_collection", "uploader")
        await grants.grant("eng", "default", "uploader")
        assert (await client.post("/v1/documents", json=write, headers=bearer(eng_token))).status_code == 201
        outside = await client.post(
            "/v1/documents", json={**write, "collection": "deals"}, headers=bearer(pinned_token)
        )
        assert_error(outside, 403, "forbidden_collection", "deals")


async def test_a_key_without_a_group_reads_public_documents_with_every_role_in_its_collections() -> None:
    keys, grants = InMemoryKeys(), InMemoryGrants()
    plain, _ = await keys.create(["default"])
    caller = await key_caller(plain, grants)
    assert caller.access == NOBODY and caller.roles is None and caller.role_in("default") is Role.ADMIN
    assert caller.role_in("other") is None


async def test_document_groups_are_set_by_an_admin_and_missing_reads_like_refused() -> None:
    keys, grants = InMemoryKeys(), InMemoryGrants()
    await grants.grant("ops", "default", "admin")
    await grants.grant("eng", "default", "uploader")
    _, ops = await keys.create([], group="ops")
    _, eng = await keys.create([], group="eng")
    app = served(keys, grants)
    doc_id = app.collection._keys(None)[0][0]
    async with app.client() as client:
        path = f"/v1/documents/{doc_id}/groups"
        by_ops = await client.put(path, json={"groups": []}, headers=bearer(ops))  # a public document: ops reads it
        assert by_ops.status_code == 200 and by_ops.json()["groups"] == ["everyone"]
        refused = await client.put(path, json={"groups": ["eng"]}, headers=bearer(eng))
        assert_error(refused, 403, "admin_only", "admin role")
        done = await client.put(path, json={"groups": ["sales", " eng"]}, headers=ADMIN)
        assert done.status_code == 200, done.text
        assert done.json() == {"doc_id": doc_id, "collection": "default", "groups": ["eng", "sales"]}
        assert app.collection._entries[doc_id, "default"].groups == ("eng", "sales")
        unreadable = await client.put(path, json={"groups": []}, headers=bearer(ops))  # ops is in neither group now
        assert_error(unreadable, 404, "document_not_found", doc_id)
        missing = await client.put("/v1/documents/no/such.md/groups", json={"groups": ["eng"]}, headers=ADMIN)
        assert_error(missing, 404, "document_not_found", "no/such.md")
        bad = await client.put(path, json={"groups": ["bad\x01"]}, headers=ADMIN)
        assert_error(bad, 422, "bad_request", "group")


class FakeJobs:
    """The ingestion service's job routes' side: what was queued."""

    def __init__(self) -> None:
        self.submitted: list[tuple[list[str], str, str, tuple[str, ...] | None]] = []
        self.synced: list[tuple[dict[str, Any], str]] = []

    async def submit(self, files: list[Any], prefix: str, collection: str, groups: Any = None) -> int:
        self.submitted.append(([f.name for f in files], prefix, collection, groups))
        return len(self.submitted)

    async def submit_sync(self, params: dict[str, Any], collection: str) -> int:
        self.synced.append((params, collection))
        return len(self.synced)


async def test_documents_get_the_groups_a_write_gives_them_if_the_caller_is_in_them(tmp_path: Any) -> None:
    keys, grants = InMemoryKeys(), InMemoryGrants()
    await grants.grant("eng", "default", "uploader")
    _, eng = await keys.create([], group="eng")
    app = served(keys, grants, sync_roots=[str(tmp_path)])
    fake = FakeJobs()
    app.app.dependency_overrides[get_jobs] = lambda: fake
    stored: list[dict[str, Any]] = []
    add = app.collection.add_documents

    async def spy(documents: Any, collection: str = "default") -> Any:
        stored.extend(d.metadata for d in documents)
        return await add(documents, collection)

    app.collection.add_documents = spy  # type: ignore[method-assign]
    doc = {"doc_id": "x.md", "text": "Herons fish at dawn."}
    async with app.client() as client:
        by_admin = {
            "documents": [{**doc, "groups": ["sales", "eng"]}, {**doc, "doc_id": "y", "metadata": {"groups": "a,b"}}]
        }
        assert (await client.post("/v1/documents", json=by_admin, headers=ADMIN)).status_code == 201
        assert stored == [{"groups": ["eng", "sales"]}, {"groups": ["a", "b"]}]
        mine = {"documents": [{**doc, "groups": ["eng"]}]}
        assert (await client.post("/v1/documents", json=mine, headers=bearer(eng))).status_code == 201
        theirs = {"documents": [{**doc, "groups": ["eng", "sales"]}]}
        assert_error(
            await client.post("/v1/documents", json=theirs, headers=bearer(eng)), 403, "forbidden_group", "sales"
        )
        bad = {"documents": [{**doc, "groups": ["\x01"]}]}
        assert_error(await client.post("/v1/documents", json=bad, headers=ADMIN), 422, "bad_request", "group")

        files = [("files", ("a.md", b"# A\n\nText.\n", "text/markdown"))]
        up = await client.post("/v1/documents/files", files=files, data={"groups": "eng, "}, headers=bearer(eng))
        assert up.status_code == 202, up.text
        plain = await client.post("/v1/documents/files", files=files, headers=ADMIN)
        assert plain.status_code == 202
        refused = await client.post("/v1/documents/files", files=files, data={"groups": "hr"}, headers=bearer(eng))
        assert_error(refused, 403, "forbidden_group", "hr")
        assert fake.submitted == [(["a.md"], "", "default", ("eng",)), (["a.md"], "", "default", None)]

        body = {"path": str(tmp_path), "groups": ["hr"]}
        assert (await client.post("/v1/sync", json=body, headers=ADMIN)).status_code == 202
        assert (await client.post("/v1/sync", json={"path": str(tmp_path)}, headers=ADMIN)).status_code == 202
        assert (await client.post("/v1/sync", json=body, headers=bearer(eng))).status_code == 401  # the admin's
    assert [p.get("groups") for p, _ in fake.synced] == [["hr"], None]


def test_a_collection_refusal_names_whose_collections_they_are() -> None:
    from agent.http.deps import CallerIdentity
    from agent.http.errors import ApiError

    signed_in = CallerIdentity(collections=("handbook",), roles={"handbook": Role.READER}, subject="alice")
    holder = CallerIdentity(collections=("handbook",))
    for caller, whose in ((signed_in, "your account's"), (holder, "this API key's")):
        with pytest.raises(ApiError) as refused:
            caller.visible("payroll")
        assert refused.value.status_code == 403
        assert refused.value.detail == f"collection 'payroll' is not one of {whose} collections (handbook)"
