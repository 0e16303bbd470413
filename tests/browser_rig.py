"""The web page in headless Chromium (Debian `chromium`, driven by Playwright) on the app of `rag serve` in a thread:
`browser_page` opens a page on a served `RagApp` (in-memory parts, a scripted model); `app` builds that app (the
support check over its doubles), `ask` asks on the page, `axe_violations` runs axe-core."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from pydantic_ai.models.function import FunctionModel

from agent.config.settings import Settings
from agent.core.app import RagApp
from agent.core.keys import InMemoryKeys
from agent.core.support import SupportChecker
from agent.core.wiring import Services
from agent.http import create_app
from agent.http.deps import app_state, get_keys
from tests import external_tools
from tests.agent_corpus import COVERED, DOCUMENTS
from tests.chromium import CHROMIUM, CHROMIUM_ARGS
from tests.conversation_rig import Model
from tests.fake_openai import ThreadedServer
from tools.in_memory import InMemoryCollection
from tools.in_memory_conversations import InMemoryConversations
from tools.in_memory_support import HashedEmbedder, LexicalVerifier
from tools.support import CheckOptions, DecisionRule, EmbeddingSimilarity


@asynccontextmanager
async def browser_page(
    rag: RagApp, keys: InMemoryKeys | None = None, token: str = "", width: int = 1280, height: int = 800
) -> AsyncIterator[Any]:
    """A Chromium page of `width` x `height` CSS pixels on the served app (with `keys`, and `token` as the page's
    stored API key), not yet opened."""
    external_tools.chromium()
    from playwright.async_api import async_playwright

    app = create_app(rag.settings, rag)
    with ThreadedServer(app) as server:
        if keys is not None:  # after the lifespan, which opens no keys for a given app
            app_state(app).keys = keys
            app.dependency_overrides[get_keys] = lambda: keys
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
            try:
                context = await browser.new_context(base_url=server.url, viewport={"width": width, "height": height})
                if token:
                    await context.add_init_script(f"sessionStorage.setItem('triton-rag-api-key', {json.dumps(token)})")
                yield await context.new_page()
            finally:
                await browser.close()


MARKDOWN = (
    "**Vitamin B12** deficiency raises plasma homocysteine in older adults [1].\n\n"
    "- Folate intake lowers homocysteine levels in adults [2].\n"
    '- <img src=x onerror="window.pwned=1"> is text, not markup.\n\n'
    "The moon is made of green cheese [1]."
)


def app(reply: str = MARKDOWN, model: FunctionModel | None = None, support: bool = True) -> RagApp:
    collection = InMemoryCollection(DOCUMENTS)
    rule = DecisionRule(0.6, 0.6)
    checker = SupportChecker(EmbeddingSimilarity(HashedEmbedder()), LexicalVerifier(), CheckOptions(rule=rule))
    services = Services(
        collection,
        collection,
        model or Model(reply).model,
        conversations=InMemoryConversations(),
        support=checker if support else None,
    )
    return RagApp(Settings.model_validate({"refusal_min_score": 0.3}), services)


async def ask(page: Any, question: str = COVERED) -> Any:
    from playwright.async_api import expect

    await page.fill("#question", question)
    await page.press("#question", "Enter")  # Enter asks
    turn = page.locator(".turn").last
    await expect(turn.locator(".turn-actions")).to_be_visible(timeout=60_000)
    return turn


async def axe_violations(page: Any) -> list[dict[str, Any]]:
    """axe-core's serious and critical violations on the page as it stands (WCAG 2.x A and AA rules)."""
    await page.add_script_tag(path=str(external_tools.axe_core()))
    result = await page.evaluate(
        """() => axe.run(document, {
             runOnly: { type: "tag", values: ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"] } })"""
    )
    return [
        {"id": v["id"], "impact": v["impact"], "nodes": [n["target"] for n in v["nodes"]]}
        for v in result["violations"]
        if v["impact"] in ("serious", "critical")
    ]
