"""Document listing in pages through the interfaces, in-process over the in-memory collection (the store's own
pages are tested against Postgres in test_store_documents.py): `GET /v1/documents` pages by a keyset cursor with a
total, and `rag docs list` streams every page."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from pydantic_ai.models.test import TestModel
from typer.testing import CliRunner

from agent.cli import main as cli
from agent.config.settings import Settings
from agent.core.app import RagApp
from agent.core.errors import InputError
from agent.core.wiring import Services
from agent.http import create_app
from agent.http.deps import get_rag
from tools.in_memory import InMemoryCollection
from tools.ingest import SourceDocument

DOCS = [SourceDocument(f"notes/{i:03d}.md", f"Note {i}", f"text of note {i}", "notes", {}) for i in range(23)]


async def served() -> tuple[httpx.AsyncClient, RagApp]:
    settings = Settings.model_validate({})
    collection = InMemoryCollection([])
    await collection.add_documents(DOCS)
    rag = RagApp(settings, Services(collection, collection, TestModel(), {}))
    app = create_app(settings)
    app.dependency_overrides[get_rag] = lambda: rag
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    return httpx.AsyncClient(transport=transport, base_url="http://rag", timeout=30), rag


async def test_documents_are_listed_in_pages_with_a_total_and_a_cursor() -> None:
    client, _ = await served()
    async with client:
        first = (await client.get("/v1/documents", params={"limit": 10})).json()
        assert [d["doc_id"] for d in first["documents"]] == [d.doc_id for d in DOCS[:10]]
        assert first["total"] == 23 and first["next_cursor"]
        seen = [d["doc_id"] for d in first["documents"]]
        cursor = first["next_cursor"]
        while cursor is not None:
            page = (await client.get("/v1/documents", params={"limit": 10, "cursor": cursor})).json()
            seen += [d["doc_id"] for d in page["documents"]]
            cursor = page["next_cursor"]
        assert seen == [d.doc_id for d in DOCS]
        default = (await client.get("/v1/documents")).json()  # paginated by default (100 a page)
        assert len(default["documents"]) == 23 and default["next_cursor"] is None and default["total"] == 23
        bad = await client.get("/v1/documents", params={"cursor": "not a cursor"})
        assert bad.status_code == 422 and bad.json()["error"] == "bad_request" and "cursor" in bad.json()["detail"]
        assert (await client.get("/v1/documents", params={"limit": 0})).status_code == 422
        assert (await client.get("/v1/documents", params={"limit": 10_001})).status_code == 422


async def test_iterating_documents_reads_every_page() -> None:
    _, rag = await served()
    assert [d.doc_id async for d in rag.iter_documents(page_size=4)] == [d.doc_id for d in DOCS]
    with pytest.raises(InputError, match="cursor"):
        await rag.document_page(10, "%%%")


def test_rag_docs_list_prints_one_plain_table_streamed_page_by_page(monkeypatch: pytest.MonkeyPatch) -> None:
    collection = InMemoryCollection([])
    long_title = SourceDocument("notes/999.md", "A title " * 20, "text", "notes", {})
    asyncio.run(collection.add_documents([*DOCS, long_title]))
    rag = RagApp(Settings.model_validate({}), Services(collection, collection, TestModel(), {}))
    monkeypatch.setattr(cli, "LIST_PAGE", 4)  # six pages
    monkeypatch.setattr(cli, "RagApp", lambda: rag)
    result = CliRunner().invoke(cli.app, ["docs", "list"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    header, rows, total = lines[0], lines[1:-1], lines[-1]
    assert header.split()[:3] == ["doc", "id", "collection"] and total == "24 documents"
    assert [row.split()[0] for row in rows] == [d.doc_id for d in DOCS] + ["notes/999.md"]
    starts = {row.index("default") for row in rows}
    assert starts == {header.index("collection")}  # one table: the columns line up across pages
    assert not any(ch in result.stdout for ch in "│┃┏━─")  # plain text: no per-cell layout to compute
    assert "A title A title" in rows[-1] and "…" in rows[-1] and len(rows[-1]) < 150  # a long title is cut


async def test_documents_are_searched_by_title_or_id_with_their_total() -> None:
    client, _ = await served()
    async with client:
        by_id = (await client.get("/v1/documents", params={"q": "NOTES/017"})).json()
        assert [d["doc_id"] for d in by_id["documents"]] == ["notes/017.md"] and by_id["total"] == 1
        by_title = (await client.get("/v1/documents", params={"q": "note 2", "limit": 2})).json()
        assert by_title["total"] == 4  # Note 2, Note 20, Note 21, Note 22
        assert [d["doc_id"] for d in by_title["documents"]] == ["notes/002.md", "notes/020.md"]
        rest = (await client.get("/v1/documents", params={"q": "note 2", "limit": 2, "offset": 2})).json()
        assert [d["doc_id"] for d in rest["documents"]] == ["notes/021.md", "notes/022.md"]
        assert rest["next_cursor"] is None
        none = (await client.get("/v1/documents", params={"q": "50%_"})).json()
        assert none == {"documents": [], "total": 0, "next_cursor": None}
        blank = (await client.get("/v1/documents", params={"q": "  ", "limit": 1})).json()
        assert blank["total"] == 23
        bad = await client.get("/v1/documents", params={"q": "a\x00b"})
        assert bad.status_code == 422 and "NUL" in bad.json()["detail"]
