"""The chat page as people use chat products (issue 45): headless Chromium (Debian `chromium`, Playwright) on the app of
`rag serve` in a thread, over the in-memory collection and conversation log with scripted models. Zero serious
accessibility violations (axe-core), a 390 px phone layout without overflow, the sign-in panel (masked key, a clear
message when wrong), auto-scroll that stops when the reader scrolls up and Stop, sanitised Markdown answers with
sources grouped by document, a document delete confirmed by a button named after it, collections created from the page
as the upload target, a conversation that keeps its collection, and running upload jobs shown after a reload. In the
stack tier with the other browser tests (it needs Chromium, not a server)."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator

import pytest
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo, FunctionModel

from agent.core.keys import InMemoryKeys
from tests import external_tools
from tests.agent_corpus import COVERED, DOCUMENTS
from tests.browser_rig import app, ask, axe_violations, browser_page

pytestmark = pytest.mark.stack

async def test_the_page_has_no_serious_accessibility_violations() -> None:
    from playwright.async_api import expect

    external_tools.axe_core()
    async with browser_page(app()) as page:
        await page.goto("/")
        await expect(page.locator("body")).to_have_attribute("data-settled", "true")
        await ask(page)
        assert await axe_violations(page) == []
        await page.check("#developer")  # developer detail shown
        await page.click("#open-library")
        await expect(page.locator("#library")).to_be_visible()
        assert await axe_violations(page) == []
        await page.click("#close-library")
        await page.locator(".turn .citation").first.click()
        await expect(page.locator("dialog#passage")).to_be_visible()
        assert await axe_violations(page) == []


async def test_at_390_px_nothing_overflows_and_the_ask_button_is_in_view() -> None:
    from playwright.async_api import expect

    async with browser_page(app(), width=390, height=844) as page:
        await page.goto("/")
        await expect(page.locator("body")).to_have_attribute("data-settled", "true")
        await ask(page)
        await ask(page, "a second question about homocysteine and vitamin B12 deficiency in older adults")
        for drawer in (False, True):
            if drawer:
                await page.click("#open-library")
            width = await page.evaluate("() => document.documentElement.scrollWidth")
            assert width <= 390, f"the page is {width} px wide"
            box = await page.locator("#send").bounding_box()
            assert (
                box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 390 and box["y"] + box["height"] <= 844
            )
        overflowing = await page.evaluate(
            """() => [...document.querySelectorAll("body *")].filter((n) => {
                 const r = n.getBoundingClientRect();
                 const outside = r.right > 390.5 || r.left < -0.5;
                 return r.width > 0 && outside && getComputedStyle(n).position !== "absolute";
               }).map((n) => n.id || n.className)"""
        )
        assert overflowing == []


async def test_the_sign_in_panel_masks_the_key_and_says_when_it_is_wrong() -> None:
    from playwright.async_api import expect

    keys = InMemoryKeys()
    _, token = await keys.create(["default"])
    async with browser_page(app(), keys) as page:
        await page.goto("/")
        panel = page.locator("dialog#sign-in")
        await expect(panel).to_be_visible()
        await expect(page.locator("#api-key")).to_have_attribute("type", "password")
        await page.fill("#api-key", "rag_wrong")
        await page.press("#api-key", "Enter")
        await expect(page.locator("#sign-in-message")).to_contain_text("not accepted")
        await expect(panel).to_be_visible()
        await page.fill("#api-key", token)
        await page.click("#sign-in-submit")
        await expect(panel).to_be_hidden()
        await expect(page.locator("#account")).to_have_text("Sign out")
        await expect(page.locator("#collection option[value='default']")).to_have_count(1)
        turn = await ask(page)
        await expect(turn.locator(".source")).to_have_count(2)


class Slow:
    """A model that streams a long answer a line at a time, until cancelled."""

    def __init__(self) -> None:
        self.cancelled = threading.Event()  # set on the server's thread
        self.model = FunctionModel(stream_function=self.stream)

    async def stream(self, messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        finished = False
        try:
            for i in range(400):
                yield f"Line {i} about vitamin B12 [1].\n\n"
                await asyncio.sleep(0.03)
            finished = True
        finally:  # cancelled, or closed by the agent when its run is cancelled
            if not finished:
                self.cancelled.set()


async def test_auto_scroll_follows_the_answer_until_the_reader_scrolls_up_and_stop_cancels_it() -> None:
    from playwright.async_api import expect

    slow = Slow()
    async with browser_page(app(model=slow.model, support=False), height=600) as page:
        await page.goto("/")
        await page.fill("#question", COVERED)
        await page.click("#send")
        log = page.locator("#log")
        await expect(page.locator("#stop")).to_be_visible()
        await expect(page.locator(".answer")).to_contain_text("Line 30", timeout=30_000)
        gap = "n => n.scrollHeight - n.scrollTop - n.clientHeight"
        assert await log.evaluate(gap) < 40  # following the answer
        await log.evaluate("n => { n.scrollTop = 0; n.dispatchEvent(new Event('scroll')); }")
        await expect(page.locator("#jump")).to_be_visible()
        await expect(page.locator(".answer")).to_contain_text("Line 60", timeout=30_000)
        assert await log.evaluate("n => n.scrollTop") == 0  # left where the reader is
        await page.click("#stop")
        await expect(page.locator(".stopped")).to_contain_text("Stopped")
        await expect(page.locator("#send")).to_be_visible()
        await expect(page.locator("#stop")).to_be_hidden()
        assert await asyncio.to_thread(slow.cancelled.wait, 10)  # the server stopped generating
        await page.click("#jump")
        assert await log.evaluate(gap) < 40


async def test_a_markdown_answer_is_rendered_safely_with_sources_grouped_by_document() -> None:
    from playwright.async_api import expect

    async with browser_page(app()) as page:
        await page.goto("/")
        turn = await ask(page)
        answer = turn.locator(".answer")
        await expect(answer.locator("strong")).to_have_text("Vitamin B12")
        await expect(answer.locator("ul > li")).to_have_count(2)
        await expect(answer.locator("img")).to_have_count(0)
        await expect(answer).to_contain_text('<img src=x onerror="window.pwned=1"> is text')
        assert await page.evaluate("() => window.pwned") is None
        sources = turn.locator(".source")
        await expect(sources).to_have_count(2)  # one line per document, never one per chunk
        await expect(sources.first.locator(".source-title")).to_have_text("Vitamin B12")
        await expect(turn.locator(".timings")).to_be_hidden()  # developer detail behind the toggle
        await page.check("#developer")
        await expect(turn.locator(".timings")).to_be_visible()
        await expect(turn.locator(".support-summary")).to_contain_text("sentences supported")
        await turn.locator(".regenerate").click()
        await expect(page.locator(".turn")).to_have_count(2)
        await expect(page.locator(".turn").last.locator(".turn-actions")).to_be_visible()


async def test_a_document_is_deleted_only_through_a_confirmation_named_after_it() -> None:
    from playwright.async_api import expect

    rag = app()
    async with browser_page(rag) as page:
        await page.goto("/")
        await page.click("#open-library")
        row = page.locator("tr.doc[data-doc-id='folate']")
        await expect(row.locator("button.delete")).to_have_attribute("aria-label", "Delete document “Folate”")
        await row.locator("button.delete").click()
        confirm = page.locator("dialog#confirm")
        await expect(confirm.locator("#confirm-text")).to_contain_text("“Folate” (folate)")
        await expect(confirm.locator("#confirm-ok")).to_have_text("Delete document")
        await page.keyboard.type("why ")  # typing on by mistake deletes nothing: the space presses Cancel
        await expect(confirm).to_be_hidden()
        await expect(row).to_have_count(1)
        await row.locator("button.delete").click()
        await confirm.locator("#confirm-ok").click()
        await expect(row).to_have_count(0)
    assert (await rag.count())[0] == len(DOCUMENTS) - 1


async def test_a_collection_created_on_the_page_is_the_upload_target_and_the_conversation_keeps_it() -> None:
    from playwright.async_api import Route, expect

    uploads: list[bytes] = []

    async def accept(route: Route) -> None:
        uploads.append(route.request.post_data_buffer or b"")
        body = {"job_id": 9, "files": ["a.md"], "collection": "handbooks", "status_url": "/v1/jobs/9"}
        await route.fulfill(status=202, json=body)

    async def status(route: Route) -> None:
        await route.fulfill(
            json={
                "id": 9,
                "status": "done",
                "files_done": 1,
                "files_total": 1,
                "chunks": 1,
                "errors": [],
                "prefix": "",
                "collection": "handbooks",
            }
        )

    async with browser_page(app()) as page:
        await page.route("**/v1/documents/files", accept)
        await page.route("**/v1/jobs/9", status)
        await page.goto("/")
        await page.click("#open-library")
        await expect(page.locator("#target-name")).to_have_text("default")
        await page.fill("#new-collection", "Bad Name")
        await page.click("#create-collection")
        await expect(page.locator("#collection")).to_have_value("")
        await page.fill("#new-collection", "handbooks")
        await page.click("#create-collection")
        await expect(page.locator("#collection")).to_have_value("handbooks")
        await expect(page.locator("#target-name")).to_have_text("handbooks")
        await page.set_input_files("#files", [{"name": "a.md", "mimeType": "text/markdown", "buffer": b"# A\n\nText."}])
        await expect(page.locator(".job").first).to_have_attribute("data-status", "done")
        assert b'name="collection"\r\n\r\nhandbooks' in uploads[0]
        await page.click("#close-library")

        await page.select_option("#collection", "")
        await ask(page)  # this conversation searched every collection
        first = await page.evaluate("() => localStorage.getItem('triton-rag-conversation')")
        await page.click("#new-conversation")
        await page.select_option("#collection", "handbooks")
        await page.locator(f".conversation-item[data-id='{first}'] .open").click()
        await expect(page.locator("#collection")).to_have_value("")


async def test_running_upload_jobs_are_shown_again_after_a_reload() -> None:
    from playwright.async_api import Route, expect

    job = {
        "id": 12,
        "status": "running",
        "files_done": 1,
        "files_total": 3,
        "chunks": 4,
        "errors": [],
        "prefix": "",
        "collection": "default",
        "kind": "upload",
    }

    async def listing(route: Route) -> None:
        done = dict(job, id=11, status="done")
        await route.fulfill(json={"jobs": [job, done]})

    async def status(route: Route) -> None:
        await route.fulfill(body=json.dumps(job), content_type="application/json")

    async with browser_page(app()) as page:
        await page.route("**/v1/jobs?limit=20", listing)
        await page.route("**/v1/jobs/12", status)
        await page.goto("/")
        box = page.locator(".job[data-job='12']")
        await expect(box).to_have_attribute("data-status", "running")
        await expect(box.locator(".job-line")).to_contain_text("1/3 files")
        await expect(page.locator(".job")).to_have_count(1)  # a finished job is not shown again


async def test_a_question_asked_before_the_page_settled_keeps_its_answer() -> None:
    """The page's first reads (here: the collections, held back until the answer has come) may end after the reader's
    first answer; the remembered conversation, by then the one that question started, is not reopened over it (the
    reopened log would show the stored turn, without its answer id, in place of the answer)."""
    from playwright.async_api import Route, expect

    release = asyncio.Event()

    async def late(route: Route) -> None:
        await release.wait()
        await route.continue_()

    async with browser_page(app()) as page:
        await page.route("**/v1/collections", late)
        await page.goto("/")
        turn = await ask(page)  # answered while the page's first reads wait
        answer_id = await turn.get_attribute("data-answer-id")
        assert answer_id
        release.set()
        await expect(page.locator("body")).to_have_attribute("data-settled", "true")
        await expect(page.locator(".turn")).to_have_count(1)
        assert await page.locator(".turn").last.get_attribute("data-answer-id") == answer_id
