"""The web chat page says when an answer is incomplete: headless Chromium (Debian `chromium`, Playwright) on the app of
`rag serve` in a thread, over the in-memory collection, with the fake OpenAI server ending its answer at the output
limit (`finish_reason: length`). In the stack tier with the other browser tests (it needs Chromium, not a server)."""

from __future__ import annotations

import pytest

from agent.config.settings import Settings
from agent.core.app import RagApp
from agent.core.llm import build_model
from agent.core.wiring import Services
from tests.agent_corpus import COVERED, DOCUMENTS
from tests.browser_rig import browser_page
from tests.fake_openai import FakeOpenAIServer, Reply
from tools.in_memory import InMemoryCollection

pytestmark = pytest.mark.stack


async def test_the_page_flags_an_answer_cut_at_the_output_limit() -> None:
    from playwright.async_api import expect

    with FakeOpenAIServer() as fake:
        fake.reset(Reply(text="Vitamin B12 deficiency raises homocysteine [1] because", finish_reason="length"))
        settings = Settings.model_validate(
            {"llm_base_url": fake.base_url, "vllm_port": fake.port, "llm_model": "fake", "refusal_min_score": 0.3}
        )
        collection = InMemoryCollection(DOCUMENTS)
        rag = RagApp(settings, Services(collection, collection, build_model(settings)))
        async with browser_page(rag) as page:
            await page.goto("/")
            await page.fill("#question", COVERED)
            await page.click("#send")
            turn = page.locator(".turn").first
            await expect(turn.locator(".truncated")).to_contain_text("cut short", timeout=60_000)
            await expect(turn.locator(".answer")).to_contain_text("raises homocysteine")
