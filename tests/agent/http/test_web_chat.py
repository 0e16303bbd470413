"""The web chat page in headless Chromium (Debian `chromium`, driven by Playwright), served by `rag serve` on the
real stack: type a question, see the streamed answer with its sources; in a new conversation an off-topic question is
refused."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agent.config.settings import Settings
from agent.core.app import RagApp
from tests import external_tools
from tests.chromium import CHROMIUM, CHROMIUM_ARGS
from tests.http_server import OFF_TOPIC, RagServe

# SciFact test claim 51 (gold abstract in the test corpus); at temperature 0 SmolLM2-135M quotes its passages, so the
# answer is cited (the 135M model leaves some other claims uncited: see evals/policy_rates.py).
CLAIM = "ALDH1 expression is associated with better breast cancer outcomes."

pytestmark = [pytest.mark.stack, pytest.mark.llm]


@pytest.fixture(scope="module")
def served(llm_settings: Settings, ingested: str) -> Iterator[RagServe]:
    with RagServe(llm_settings) as server:
        yield server


async def test_typed_question_gets_a_cited_answer(served: RagServe, llm_settings: Settings) -> None:
    external_tools.chromium()
    from playwright.async_api import async_playwright, expect

    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            page = await browser.new_page()
            await page.goto(served.url + "/")
            await page.fill("#question", CLAIM)
            await page.click("#send")
            turn = page.locator(".turn").first
            await expect(turn.locator(".question")).to_have_text(CLAIM)
            await expect(turn.locator(".activity").first).to_contain_text("search_documents", timeout=60_000)
            await expect(turn.locator(".meta").last).to_contain_text("total", timeout=300_000)
            answer = (await turn.locator(".answer").inner_text()).strip()
            cited = await turn.locator(".citation").evaluate_all("items => items.map(i => i.dataset.docId)")
            # a new conversation: inside the first one the off-topic question would be searched together with the
            # claim (the condensed follow-up query, agent/core/followup.py) and find its passages
            await page.click("#new-conversation")
            await expect(page.locator(".turn")).to_have_count(0)
            await page.fill("#question", OFF_TOPIC)
            await page.click("#send")
            refusal = page.locator(".turn").first
            await expect(refusal.locator(".meta").first).to_contain_text("documents do not cover", timeout=60_000)
        finally:
            await browser.close()
    assert answer and "<think>" not in answer
    assert cited, "the answer shows no sources"
    async with RagApp.from_settings(llm_settings) as app:
        retrieved = {p.doc_id for p in (await app.search(CLAIM, llm_settings.top_k)).passages}
    assert set(cited) <= retrieved
