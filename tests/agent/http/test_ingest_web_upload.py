"""The web page's document library in headless Chromium (Debian `chromium`, driven by Playwright) on a real
`rag serve` over the real Postgres and Triton: files picked or dropped are uploaded as a job whose progress the page
shows, the document list shows them, and a document is deleted from the list."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.config.settings import Settings
from tests import external_tools
from tests.chromium import CHROMIUM, CHROMIUM_ARGS
from tests.conftest import REPO_ROOT
from tests.document_files import GUIDE_HTML, print_pdf
from tests.http_server import RagServe

JOB_TIMEOUT_MS = 600_000
"""A bound on waiting for the job on a loaded machine (the outcome does not depend on it)."""


@pytest.fixture
def served(triton_server: Settings, fresh_db: str) -> Iterator[RagServe]:
    env = {"DATABASE_URL": fresh_db, "MODEL_REPOSITORY": str(REPO_ROOT / "model_repository"), "JOBS_POLL_S": "0.2"}
    with RagServe(triton_server, env) as server:
        yield server


async def test_files_picked_or_dropped_are_ingested_listed_and_deleted(served: RagServe, tmp_path: Path) -> None:
    external_tools.chromium()
    from playwright.async_api import async_playwright, expect

    pdf = print_pdf(GUIDE_HTML, tmp_path / "handbook.pdf")
    notes = tmp_path / "notes.md"
    notes.write_text("# Notes\n\n## Backups\n\nThe narwhal backup job runs every night at two.\n")
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            page = await browser.new_page()
            await page.goto(served.url + "/")
            await page.set_input_files("#files", [str(pdf), str(notes)])
            job = page.locator(".job").first
            await expect(job).to_have_attribute("data-status", "done", timeout=JOB_TIMEOUT_MS)
            await expect(job).to_contain_text("2/2 files")
            rows = page.locator("tr.doc")
            await expect(rows).to_have_count(2)
            await expect(page.locator("tr.doc[data-doc-id='handbook.pdf']")).to_contain_text("Handbook")

            await page.evaluate(
                """() => {
                  const data = new DataTransfer();
                  data.items.add(new File(["The okapi gateway listens on port 8080."], "readme.txt"));
                  const drop = document.getElementById("drop");
                  drop.dispatchEvent(new DragEvent("drop", { dataTransfer: data, bubbles: true, cancelable: true }));
                }"""
            )
            dropped = page.locator(".job").first
            await expect(dropped).to_contain_text("1/1 files", timeout=JOB_TIMEOUT_MS)
            await expect(rows).to_have_count(3)
            title = page.locator("tr.doc[data-doc-id='readme.txt'] .doc-title")
            await expect(title).to_have_text("readme")  # its file's name, not the worker's staged 000001

            await page.click("#open-library")
            await page.locator("tr.doc[data-doc-id='notes.md'] button.delete").click()
            await expect(page.locator("#confirm-ok")).to_have_text("Delete document")
            await page.click("#confirm-ok")
            await expect(rows).to_have_count(2)
            await expect(page.locator("tr.doc[data-doc-id='notes.md']")).to_have_count(0)
        finally:
            await browser.close()
