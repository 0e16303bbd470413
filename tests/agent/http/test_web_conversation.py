"""The web chat page keeps its conversation: headless Chromium (Debian `chromium`, Playwright) on the app of `rag serve`
in a thread, over the in-memory collection and conversation log with a scripted model. A follow-up is searched with
the first question's subject, a reload shows the earlier turns, "New conversation" starts afresh. In the stack tier
with the other browser tests (it needs Chromium, not a server)."""

from __future__ import annotations

import pytest

from agent.config.settings import Settings
from agent.core.app import RagApp
from agent.core.wiring import Services
from tests.agent_corpus import DOCUMENTS
from tests.browser_rig import browser_page
from tests.conversation_rig import FOLLOW_UP, SUBJECT, Model
from tools.in_memory import InMemoryCollection

pytestmark = pytest.mark.stack


async def test_the_page_keeps_the_conversation_across_turns_and_reloads() -> None:
    from playwright.async_api import expect

    settings = Settings.model_validate({"refusal_min_score": 0.3})
    collection = InMemoryCollection(DOCUMENTS)
    rag = RagApp(settings, Services(collection, collection, Model("It raises homocysteine [1].").model))
    async with browser_page(rag) as page:
        await page.goto("/")
        turns = page.locator(".turn")
        for question in (SUBJECT, FOLLOW_UP):
            await page.fill("#question", question)
            await page.click("#send")
            await expect(turns.last.locator(".meta").last).to_contain_text("total", timeout=60_000)
        follow_up = turns.nth(1)
        await expect(follow_up.locator(".activity").first).to_contain_text("Vitamin B12")  # condensed query
        await expect(follow_up.locator(".citation")).to_have_count(1)  # not refused: the subject was found
        await expect(page.locator("#conversation")).to_contain_text(SUBJECT)

        await page.reload()
        await expect(turns).to_have_count(2, timeout=30_000)
        await expect(turns.nth(0).locator(".question")).to_have_text(SUBJECT)
        await expect(turns.nth(1).locator(".question")).to_have_text(FOLLOW_UP)
        await expect(turns.nth(1).locator(".answer")).to_have_text("It raises homocysteine [1].")
        await expect(turns.nth(1).locator(".source")).to_contain_text("Vitamin B12")
        await expect(page.locator("#conversation")).to_contain_text(SUBJECT)

        await page.click("#new-conversation")
        await expect(turns).to_have_count(0)
        await page.fill("#question", FOLLOW_UP)
        await page.click("#send")
        alone = turns.first  # no earlier turn: the same follow-up is not covered
        await expect(alone.locator(".meta").first).to_contain_text("documents do not cover", timeout=60_000)
        await page.reload()
        await expect(turns).to_have_count(1, timeout=30_000)
        await expect(turns.first.locator(".answer")).to_have_class("answer refused")
    page_of_conversations = await rag.conversation_page()
    assert page_of_conversations.total == 2
    assert sorted(c.turn_count for c in page_of_conversations.conversations) == [1, 2]
