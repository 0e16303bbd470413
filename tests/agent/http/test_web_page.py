"""The web page's panels in headless Chromium (Debian `chromium`, Playwright) on the app of `rag serve` in a thread,
over the in-memory collection and conversation log with a scripted model: the conversations side list (open,
continue, delete), the collection picker (only the key's collections), the document list (paged to its last
document, searched by id and by title), the citation dialog (passage, title, page, the highlighted page image) and
an upload's progress and per-file result (the upload, job and page image routes scripted in the browser, as the
in-memory app has no jobs queue and keeps no original files). In the stack tier with the other browser tests (it
needs Chromium, not a server)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from agent.config.settings import Settings
from agent.core.app import RagApp
from agent.core.keys import InMemoryKeys
from agent.core.wiring import Services
from tests.agent_corpus import COVERED, DOCUMENTS
from tests.browser_rig import browser_page
from tests.conversation_rig import FOLLOW_UP, SUBJECT, Model
from tools.in_memory import InMemoryCollection
from tools.in_memory_conversations import InMemoryConversations
from tools.ingest import SourceDocument

pytestmark = pytest.mark.stack

REPLY = "It raises homocysteine [1]."
MANY = [SourceDocument(f"doc-{i:03d}", f"Report {i:03d}", f"filler text {i}", "t", {}) for i in range(120)]
LAST = SourceDocument("zz-handbook", "Narwhal operations handbook", "Backups run nightly at two.", "t", {})


def rag_app(documents: list[SourceDocument] = DOCUMENTS) -> tuple[RagApp, InMemoryCollection, InMemoryConversations]:
    settings = Settings.model_validate({"refusal_min_score": 0.3})
    collection = InMemoryCollection(documents)
    conversations = InMemoryConversations()
    rag = RagApp(settings, Services(collection, collection, Model(REPLY).model, conversations=conversations))
    return rag, collection, conversations


def titled(page: Any, title: str) -> Any:
    """The side list's item of the conversation titled exactly `title`."""
    exact = page.locator(".open", has_text=re.compile(f"^{re.escape(title)}$"))
    return page.locator(".conversation-item").filter(has=exact)


async def ask(page: Any, question: str) -> None:
    from playwright.async_api import expect

    await page.fill("#question", question)
    await page.click("#send")
    await expect(page.locator(".turn").last.locator(".meta").last).to_contain_text("total", timeout=60_000)


async def test_past_conversations_are_listed_opened_continued_and_deleted() -> None:
    from playwright.async_api import expect

    rag, _, _ = rag_app()
    async with browser_page(rag) as page:
        await page.goto("/")
        items = page.locator(".conversation-item")
        await ask(page, SUBJECT)
        await expect(items).to_have_count(1)
        await page.click("#new-conversation")
        await ask(page, COVERED)
        await expect(items).to_have_count(2)
        first = titled(page, SUBJECT)
        await expect(page.locator(".conversation-item.current")).to_contain_text(COVERED)

        await first.locator(".open").click()  # open: its turns replace the log
        await expect(page.locator(".turn")).to_have_count(1)
        await expect(page.locator(".turn .question")).to_have_text(SUBJECT)
        await expect(first).to_have_class("conversation-item current")
        await ask(page, FOLLOW_UP)  # continue it: searched with the subject, so cited
        await expect(page.locator(".turn")).to_have_count(2)
        await expect(page.locator(".turn").nth(1).locator(".citation")).to_have_count(1)

        await titled(page, COVERED).locator(".delete-conversation").click()
        confirm = page.locator("dialog#confirm")
        await expect(confirm.locator("#confirm-ok")).to_have_text("Delete conversation")
        await expect(confirm.locator("#confirm-cancel")).to_be_focused()
        await page.keyboard.press("Enter")  # a key typed on by mistake: the focused Cancel, nothing deleted
        await expect(confirm).to_be_hidden()
        await expect(items).to_have_count(2)
        await titled(page, COVERED).locator(".delete-conversation").click()
        await confirm.locator("#confirm-ok").click()
        await expect(items).to_have_count(1)
        await expect(page.locator(".turn")).to_have_count(2)  # another conversation's deletion leaves the open one
        await first.locator(".delete-conversation").click()  # the open one: the log empties
        await confirm.locator("#confirm-ok").click()
        await expect(items).to_have_count(0)
        await expect(page.locator(".turn")).to_have_count(0)
        await page.reload()
        await expect(page.locator("body")).to_have_attribute("data-settled", "true")
        await expect(items).to_have_count(0)
    assert (await rag.conversation_page()).total == 0


async def test_the_picker_offers_only_the_key_s_collections_and_narrows_the_list() -> None:
    from playwright.async_api import expect

    rag, collection, _ = rag_app()
    await collection.add_documents([MANY[0], MANY[1]], collection="papers")
    await collection.add_documents([LAST], collection="secret")
    keys = InMemoryKeys()
    _, token = await keys.create(["papers", "notes"])
    async with browser_page(rag, keys, token) as page:
        await page.goto("/")
        await expect(page.locator("body")).to_have_attribute("data-settled", "true")
        options = page.locator("#collection option")
        assert await options.evaluate_all("os => os.map(o => o.value)") == ["", "notes", "papers"]
        await expect(options.first).to_have_text("all my collections")
        await expect(page.locator("tr.doc")).to_have_count(2)  # the key's documents only
        await page.select_option("#collection", "notes")
        await expect(page.locator("tr.doc")).to_have_count(0)
        await page.select_option("#collection", "papers")
        await expect(page.locator("tr.doc")).to_have_count(2)
        await expect(page.locator("#page-info")).to_contain_text("of 2")


async def test_the_document_list_pages_to_the_last_document_and_finds_one_by_id_or_title() -> None:
    from playwright.async_api import expect

    rag, _, _ = rag_app([*MANY, LAST])
    async with browser_page(rag) as page:
        await page.goto("/")
        await page.click("#open-library")
        rows = page.locator("tr.doc")
        await expect(rows).to_have_count(50)
        await expect(page.locator("#page-info")).to_contain_text("1–50 of 121 (page 1/3)")
        await page.click("#next-page")
        await expect(page.locator("#page-info")).to_contain_text("51–100 of 121 (page 2/3)")
        await expect(rows.first).to_have_attribute("data-doc-id", "doc-050")
        await page.click("#last-page")
        await expect(page.locator("#page-info")).to_contain_text("101–121 of 121 (page 3/3)")
        await expect(rows).to_have_count(21)
        await expect(rows.last).to_have_attribute("data-doc-id", "zz-handbook")
        await expect(page.locator("#next-page")).to_be_disabled()

        await page.fill("#doc-search", "doc-117")
        await expect(page.locator("#page-info")).to_contain_text("1–1 of 1")
        await expect(rows).to_have_count(1)
        await expect(rows.first).to_have_attribute("data-doc-id", "doc-117")
        await page.fill("#doc-search", "narwhal OPERATIONS")
        await expect(rows).to_have_count(1)
        await expect(rows.first).to_have_attribute("data-doc-id", "zz-handbook")
        await page.fill("#doc-search", "")
        await expect(rows).to_have_count(50)


def png(width: int, height: int) -> bytes:
    import io

    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (width, height), (250, 250, 250)).save(out, format="PNG")
    return out.getvalue()


async def test_a_citation_opens_its_passage_with_title_page_and_the_highlighted_page_image() -> None:
    from playwright.async_api import Route, expect

    rag, _, conversations = rag_app()
    stored = await conversations.create("Handbook questions")
    cited = {
        "doc_id": "scans/../handbook.pdf",  # sent whole: the browser must not resolve its ".."
        "chunk_id": "scans/../handbook.pdf#3",
        "score": 0.5,
        "passage": 1,
        "title": "Operations handbook",
        "page": 12,
        "section": [],
        "location": "scans/../handbook.pdf p. 12",
        "text": "Backups run every night at two.",
        "span": [40, 71],
        "boxes": [[12, 72.0, 700.0, 300.0, 712.0]],
    }
    await conversations.add_turn(stored.id, "When do backups run?", "At two [1].", [cited])
    page_requests: list[str] = []

    async def page_image(route: Route) -> None:  # the rendered page (the in-memory app keeps no original files)
        page_requests.append(route.request.url)
        await route.fulfill(status=200, content_type="image/png", body=png(120, 160))

    async with browser_page(rag) as page:
        await page.route("**/v1/documents/scans%2F..%2Fhandbook.pdf/pages/12?*", page_image)
        await page.goto("/")
        await ask(page, COVERED)  # a live answer: its citation holds the retrieved chunk
        await page.locator(".citation").first.click()
        dialog = page.locator("dialog#passage")
        await expect(dialog).to_be_visible()
        await expect(dialog.locator("#passage-title")).to_have_text("Vitamin B12")
        await expect(dialog.locator("#passage-text")).to_contain_text("raises plasma homocysteine")
        await page.click("#close-passage")
        await expect(dialog).to_be_hidden()

        await titled(page, "Handbook questions").locator(".open").click()
        await expect(page.locator(".turn .question")).to_have_text("When do backups run?")
        await page.locator(".citation").first.click()
        await expect(dialog.locator("#passage-title")).to_have_text("Operations handbook")
        await expect(dialog.locator("#passage-where")).to_contain_text("page 12")
        await expect(dialog.locator("#passage-where")).to_contain_text("characters 40–71")
        await expect(dialog.locator("#passage-text")).to_have_text("Backups run every night at two.")
        await expect(dialog.locator("#passage-text mark.passage-span")).to_have_text("Backups run every night at two.")
        image = dialog.locator("#passage-image")
        await expect(dialog.locator("#passage-page")).to_be_visible()
        await expect(image).to_have_attribute("src", re.compile(r"^blob:"))
        assert await image.evaluate("i => i.decode().then(() => [i.naturalWidth, i.naturalHeight])") == [120, 160]
        await expect(dialog.locator("#passage-page-note")).to_have_text("page 12, the cited passage highlighted")
        path = "v1/documents/scans%2F..%2Fhandbook.pdf/pages/12?chunk=scans%2F..%2Fhandbook.pdf%233"
        assert page_requests == [f"{page.url.rstrip('/')}/{path}"]
        await page.click("#close-passage")
        await expect(dialog.locator("#passage-page")).to_be_hidden()


async def test_an_upload_shows_its_job_s_progress_and_each_file_s_result() -> None:
    from playwright.async_api import Route, expect

    rag, _, _ = rag_app()
    released = False
    polls = 0

    def job(status: str, done: int, errors: list[dict[str, str]]) -> dict[str, Any]:
        return {"id": 7, "status": status, "files_done": done, "files_total": 2, "chunks": 3 * done,
                "errors": errors, "prefix": "", "collection": "default"}  # fmt: skip

    sent: list[bytes] = []

    async def accept(route: Route) -> None:
        sent.append(route.request.post_data_buffer or b"")
        body = {"job_id": 7, "files": ["good.md", "bad.txt"], "collection": "default", "status_url": "/v1/jobs/7"}
        await route.fulfill(status=202, json=body)

    async def status(route: Route) -> None:
        nonlocal polls
        polls += 1
        if not released:
            await route.fulfill(json=job("running", 1, []))
        else:
            await route.fulfill(json=job("done", 2, [{"file": "bad.txt", "error": "no text could be extracted"}]))

    async with browser_page(rag) as page:
        await page.route("**/v1/documents/files", accept)
        await page.route("**/v1/jobs/7", status)
        await page.goto("/")
        await page.click("#open-library")
        await page.fill("#upload-groups", " hr, hr-leads ")  # who may read the uploaded documents
        await page.set_input_files(
            "#files",
            [
                {"name": "good.md", "mimeType": "text/markdown", "buffer": b"# Good\n\nText."},
                {"name": "bad.txt", "mimeType": "text/plain", "buffer": b"\x00\x01"},
            ],
        )
        box = page.locator(".job").first
        files = box.locator(".job-file")
        await expect(box).to_have_attribute("data-status", "running")
        await expect(box.locator(".job-line")).to_contain_text("1/2 files")
        await expect(files.nth(0)).to_have_attribute("data-state", "done")
        await expect(files.nth(1)).to_have_attribute("data-state", "indexing")
        assert await box.locator("progress").evaluate("p => [p.value, p.max]") == [1, 2]
        released = True
        await expect(box).to_have_attribute("data-status", "done")
        await expect(box.locator(".job-line")).to_contain_text("2/2 files")
        await expect(files.nth(0)).to_have_text("good.md: done")
        await expect(files.nth(1)).to_have_attribute("data-state", "error")
        await expect(files.nth(1)).to_contain_text("no text could be extracted")
        assert await box.locator("progress").evaluate("p => [p.value, p.max]") == [2, 2]
    assert polls >= 2
    assert b'name="groups"\r\n\r\nhr, hr-leads\r\n' in sent[0]  # the form's `groups` field, trimmed
