"""`GET /v1/collections` and the `collections` of `/v1/ask`, in-process over the in-memory collection with in-memory
API keys: a key holder sees and searches only its own collections (a named one outside them is 403), the admin sees
every collection that holds a document; a citation carries its passage's text; the page's static files are open."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
from pydantic import SecretStr

from agent.core.keys import InMemoryKeys
from agent.http.deps import app_state, get_keys
from tests.agent_corpus import COVERED
from tests.http_rig import Served, assert_error, serve, sse_events
from tests.key_rig import scopes_asked
from tools.ingest import SourceDocument
from tools.scope import SearchScope

ADMIN = "admin-secret"
PAPER = SourceDocument("p1", "Homocysteine paper", "Vitamin B12 deficiency raises homocysteine.", "t", {})
SECRET = SourceDocument("s1", "Secret", "Vitamin B12 deficiency raises homocysteine, secretly.", "t", {})


@asynccontextmanager
async def keyed(collections: list[str]) -> AsyncIterator[tuple[Served, httpx.AsyncClient, httpx.AsyncClient]]:
    """The app with documents in `default`, `papers` and `secret`, one key over `collections`: (served, the key's
    client, the admin's client)."""
    served = serve(api_key=SecretStr(ADMIN))
    await served.collection.add_documents([PAPER], collection="papers")
    await served.collection.add_documents([SECRET], collection="secret")
    keys = InMemoryKeys()
    _, token = await keys.create(collections)
    app_state(served.app).keys = keys
    served.app.dependency_overrides[get_keys] = lambda: keys
    async with (
        served.client(authorization=f"Bearer {token}") as holder,
        served.client(authorization=f"Bearer {ADMIN}") as admin,
    ):
        yield served, holder, admin


async def test_collections_are_the_key_s_own_or_every_one_for_the_admin() -> None:
    async with keyed(["papers", "notes"]) as (_, holder, admin):
        mine = await holder.get("/v1/collections")
        assert mine.status_code == 200, mine.text
        assert mine.json() == {
            "collections": [{"name": "notes", "documents": 0}, {"name": "papers", "documents": 1}],
            "scoped": True,
        }
        every = (await admin.get("/v1/collections")).json()
        assert every == {
            "collections": [
                {"name": "default", "documents": 4},
                {"name": "papers", "documents": 1},
                {"name": "secret", "documents": 1},
            ],
            "scoped": False,
        }
        listed = (await holder.get("/v1/documents", params={"q": "e"})).json()
        assert [d["doc_id"] for d in listed["documents"]] == ["p1"] and listed["total"] == 1


def collections_of(asked: list[SearchScope | None]) -> tuple[str, ...] | None:
    """The collections of the last scope asked for."""
    assert asked[-1] is not None
    return asked[-1].collections


async def test_ask_searches_only_the_collections_named_within_the_key() -> None:
    async with keyed(["papers", "notes"]) as (served, holder, _):
        served.script.text = "It does [1]."
        asked = scopes_asked(served.rag)
        response = await holder.post("/v1/ask", json={"question": COVERED, "collections": ["papers"]})
        assert response.status_code == 200, response.text
        assert collections_of(asked) == ("papers",)
        assert [c["doc_id"] for c in response.json()["citations"]] == ["p1"]
        named = {"question": COVERED, "collection": "notes", "collections": ["papers"]}
        both = await holder.post("/v1/ask", json=named)
        assert both.status_code == 200 and collections_of(asked) == ("notes", "papers")
        outside = await holder.post("/v1/ask", json={"question": COVERED, "collections": ["papers", "secret"]})
        assert_error(outside, 403, "forbidden_collection", "'secret'")
        stream = await holder.post("/v1/ask/stream", json={"question": COVERED, "collections": ["secret"]})
        events = sse_events(stream.text)
        assert [e for e, _ in events] == ["error"] and events[0][1]["error"] == "forbidden_collection"
        empty = await holder.post("/v1/ask", json={"question": COVERED, "collections": []})
        assert empty.status_code == 422


async def test_a_citation_carries_the_text_of_its_passage() -> None:
    served = serve()
    served.script.text = "It raises it [1]."
    async with served.client() as client:
        body = (await client.post("/v1/ask", json={"question": COVERED})).json()
    assert body["citations"][0]["doc_id"] == "b12"
    # the chunk as retrieved (the in-memory chunk opens with its title)
    assert body["citations"][0]["text"].endswith("Vitamin B12 deficiency raises plasma homocysteine in older adults.")


async def test_the_page_and_its_static_files_are_served_without_a_key() -> None:
    served = serve(api_key=SecretStr(ADMIN))
    async with served.client() as client:
        page = await client.get("/")
        assert page.status_code == 200 and '<script src="/web/page.js">' in page.text
        script = await client.get("/web/page.js")
        assert script.status_code == 200 and script.headers["content-type"].startswith("text/javascript")
        style = await client.get("/web/page.css")
        assert style.status_code == 200 and style.headers["content-type"].startswith("text/css")
        assert (await client.get("/web/index.html")).status_code == 401  # not a page file: behind the key
        assert (await client.get("/v1/collections")).status_code == 401
