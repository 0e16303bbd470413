"""`GET /v1/documents/{doc_id}/pages/{n}` in-process over the in-memory collection, with originals kept in a
temporary folder: a PNG of the page (a PDF's page, an image's frame) at the scale asked for, cache headers, and each
refusal with its kind (another collection's key, a chunk of another document, a document not stored whose original
was left behind, no original kept, not a PDF, a page past the end). The highlight's position against real PDF text
is checked on the real stack (test_page_highlight.py)."""

from __future__ import annotations

import asyncio
import io
import threading
import time
from pathlib import Path

import httpx
import pytest
from PIL import Image

from agent.config.settings import Settings
from agent.core.app import RagApp
from agent.core.keys import InMemoryKeys
from agent.core.wiring import Services
from agent.http import create_app
from agent.http.deps import app_state, get_keys, get_rag
from tests.conversation_rig import Model
from tools import render_page
from tools.extract.pdf import EXTRACTOR
from tools.in_memory import InMemoryCollection
from tools.ingest import SourceDocument
from tools.originals import Originals

PAGE_PT = (200, 100)
"""Each page of the test PDF, points (Pillow writes one pixel per point at 72 dpi)."""


def two_page_pdf(path: Path) -> Path:
    first = Image.new("RGB", PAGE_PT, "white")
    first.save(path, format="PDF", resolution=72.0, save_all=True, append_images=[Image.new("RGB", PAGE_PT, "white")])
    return path


@pytest.fixture
async def served(tmp_path: Path) -> tuple[httpx.AsyncClient, dict[str, str]]:
    settings = Settings.model_validate({"originals_dir": tmp_path / "originals", "refusal_min_score": 0.3})
    collection = InMemoryCollection()
    stored = [
        ("scan/report.pdf", "The report text."),
        ("notes.md", "Some notes."),
        ("old.pdf", "Ingested as text."),
        ("torn.pdf", "A PDF cut short."),
        ("scan.tiff", "A scanned letter."),
        ("scans/../report.pdf", "An id with a dot-dot segment."),
    ]
    await collection.add_documents([SourceDocument(i, i, text, "t", {}) for i, text in stored], "manuals")
    rag = RagApp(settings, Services(collection, collection, Model("unused").model))
    rag.originals.keep("manuals", "scan/report.pdf", two_page_pdf(tmp_path / "report.pdf"))
    rag.originals.keep("manuals", "notes.md", b"# Notes\n\nSome notes.\n")
    frames = [Image.new("L", (400, 200), 255), Image.new("L", (400, 200), 0)]  # 144 dpi: 200 x 100 points
    frames[0].save(tmp_path / "scan.tiff", save_all=True, append_images=frames[1:], dpi=(144, 144))
    rag.originals.keep("manuals", "scan.tiff", tmp_path / "scan.tiff")
    rag.originals.keep("manuals", "scans/../report.pdf", two_page_pdf(tmp_path / "dots.pdf"))
    rag.originals.keep("manuals", "torn.pdf", b"%PDF-1.7\n1 0 obj << /Type /Catalog")
    rag.originals.keep("manuals", "deleted.pdf", two_page_pdf(tmp_path / "deleted.pdf"))  # left behind: not stored
    keys = InMemoryKeys()
    _, manuals = await keys.create(["manuals"])
    _, other = await keys.create(["other"])
    app = create_app(settings)
    app_state(app).keys = keys
    app.dependency_overrides[get_keys] = lambda: keys

    async def the_rag() -> RagApp:
        return rag

    app.dependency_overrides[get_rag] = the_rag
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    client = httpx.AsyncClient(transport=transport, base_url="http://rag", timeout=60)
    return client, {"manuals": manuals, "other": other}


@pytest.fixture(autouse=True, scope="module")
def _stop_pdf_worker() -> object:
    yield None
    EXTRACTOR.close()
    render_page.close()


async def get(client: httpx.AsyncClient, token: str, url: str) -> httpx.Response:
    return await client.get(url, headers={"Authorization": f"Bearer {token}"})


async def test_a_page_comes_back_as_a_png_of_the_page_size_at_the_scale(
    served: tuple[httpx.AsyncClient, dict[str, str]],
) -> None:
    client, tokens = served
    url = "/v1/documents/scan/report.pdf/pages/2?chunk=manuals::scan/report.pdf%230&scale=1.5"
    response = await get(client, tokens["manuals"], url)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "image/png"
    assert response.headers["cache-control"] == "private, max-age=300"
    assert Image.open(io.BytesIO(response.content)).size == (300, 150)
    plain = await get(client, tokens["manuals"], "/v1/documents/scan/report.pdf/pages/1?collection=manuals")
    assert plain.status_code == 200 and Image.open(io.BytesIO(plain.content)).size == (400, 200)

    for encoded in ("scan%2Freport.pdf", "scans%2F..%2Freport.pdf"):  # the web page sends the id whole, "/" as %2F
        whole = await get(client, tokens["manuals"], f"/v1/documents/{encoded}/pages/1?scale=1")
        assert whole.status_code == 200 and Image.open(io.BytesIO(whole.content)).size == (200, 100), whole.text
    sentence = "/v1/documents/scan/report.pdf/pages/1?chunk=manuals::scan/report.pdf%230&span=4,16&scale=1"
    narrowed = await get(client, tokens["manuals"], sentence)  # a sentence of the chunk (its `passage_span`)
    assert narrowed.status_code == 200 and Image.open(io.BytesIO(narrowed.content)).size == (200, 100), narrowed.text
    image = await get(client, tokens["manuals"], "/v1/documents/scan.tiff/pages/2?scale=1.5")  # an image's frame
    assert image.status_code == 200, image.text
    frame = Image.open(io.BytesIO(image.content))
    assert frame.size == (300, 150) and frame.convert("L").getextrema() == (0, 0)


async def test_another_collection_s_key_reads_the_document_as_missing(
    served: tuple[httpx.AsyncClient, dict[str, str]],
) -> None:
    client, tokens = served
    for url in (
        "/v1/documents/scan/report.pdf/pages/1?chunk=manuals::scan/report.pdf%230",
        "/v1/documents/scan/report.pdf/pages/1",
    ):
        response = await get(client, tokens["other"], url)
        assert response.status_code == 404, response.text
        assert "scan/report.pdf" in response.json()["detail"]
    forbidden = await get(client, tokens["other"], "/v1/documents/scan/report.pdf/pages/1?collection=manuals")
    assert forbidden.status_code == 403


@pytest.mark.parametrize(
    ("url", "status", "kind", "says"),
    [
        ("/v1/documents/scan/report.pdf/pages/1?chunk=manuals::notes.md%230", 404, "chunk_not_found", "not a stored"),
        ("/v1/documents/old.pdf/pages/1?chunk=manuals::old.pdf%230", 404, "original_not_kept", "original not kept"),
        ("/v1/documents/notes.md/pages/1?chunk=manuals::notes.md%230", 422, "not_a_pdf", "not a PDF"),
        ("/v1/documents/scan/report.pdf/pages/3", 404, "page_not_found", "it has 2 page(s)"),
        ("/v1/documents/scan.tiff/pages/3", 404, "page_not_found", "it has 2 page(s)"),
        ("/v1/documents/deleted.pdf/pages/1", 404, "document_not_found", "'deleted.pdf' is not stored"),
        ("/v1/documents/deleted.pdf/pages/1?collection=manuals", 404, "document_not_found", "not stored"),
        ("/v1/documents/scan/report.pdf/pages/1?scale=9", 422, "bad_request", "scale"),
        ("/v1/documents/scan/report.pdf/pages/0", 422, "bad_request", "n"),
        (
            "/v1/documents/scan/report.pdf/pages/1?chunk=manuals::scan/report.pdf%230&span=4-9",
            422,
            "bad_request",
            "query.span",
        ),
        (
            "/v1/documents/scan/report.pdf/pages/1?chunk=manuals::scan/report.pdf%230&span=9,4",
            422,
            "bad_request",
            "span 9,4 is outside",
        ),
        (
            "/v1/documents/scan/report.pdf/pages/1?chunk=manuals::scan/report.pdf%230&span=4,34",
            422,
            "bad_request",
            "(33 characters)",
        ),
        ("/v1/documents/scan/report.pdf/pages/1?span=0,4", 422, "bad_request", "span needs chunk"),
    ],
)
async def test_each_refusal_names_its_cause(
    served: tuple[httpx.AsyncClient, dict[str, str]], url: str, status: int, kind: str, says: str
) -> None:
    client, tokens = served
    response = await get(client, tokens["manuals"], url)
    assert response.status_code == status, response.text
    assert response.json()["error"] == kind and says in response.json()["detail"]


async def test_an_unreadable_original_is_named_by_document_and_page_not_by_the_server_s_path(
    served: tuple[httpx.AsyncClient, dict[str, str]], caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    client, tokens = served
    response = await get(client, tokens["manuals"], "/v1/documents/torn.pdf/pages/1")
    assert response.status_code == 422 and response.json()["error"] == "not_a_pdf", response.text
    detail = response.json()["detail"]
    assert "'torn.pdf', page 1" in detail and "not a PDF PDFium can read" in detail
    assert str(tmp_path) not in detail and "originals" not in detail  # no file path of the server
    assert f"{tmp_path}/originals/manuals/" in caplog.text  # logged for the operator


async def test_a_page_is_rendered_while_the_pdf_extractor_is_busy_with_a_long_file(
    served: tuple[httpx.AsyncClient, dict[str, str]], tmp_path: Path
) -> None:
    client, tokens = served
    busy = threading.Thread(target=EXTRACTOR.call, args=(time.sleep, 6), kwargs={"path": tmp_path / "long-scan.pdf"})
    busy.start()  # the ingest's worker process reads a long scan (played by a sleep)
    try:
        response = await get(client, tokens["manuals"], "/v1/documents/scan/report.pdf/pages/1")
        assert response.status_code == 200, response.text
        assert busy.is_alive()  # the page did not wait for it
    finally:
        await asyncio.to_thread(busy.join)


async def test_the_original_is_looked_up_in_a_render_thread_not_on_the_event_loop(
    served: tuple[httpx.AsyncClient, dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    client, tokens = served
    threads: list[str] = []
    find = Originals.find

    def recording(self: Originals, collection: str, doc_id: str) -> Path | None:
        threads.append(threading.current_thread().name)
        return find(self, collection, doc_id)

    monkeypatch.setattr(Originals, "find", recording)
    response = await get(client, tokens["manuals"], "/v1/documents/scan/report.pdf/pages/1")
    assert response.status_code == 200, response.text
    assert threads and all(name.startswith("page-render") for name in threads)
