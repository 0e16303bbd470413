"""The web page in headless Chromium (Debian `chromium`, driven by Playwright) on the app of `rag serve` in a thread:
`browser_page` opens a page on a served `RagApp` (in-memory parts, a scripted model)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from agent.core.app import RagApp
from agent.core.keys import InMemoryKeys
from agent.http import create_app
from agent.http.deps import get_keys
from tests import external_tools
from tests.chromium import CHROMIUM, CHROMIUM_ARGS
from tests.fake_openai import ThreadedServer


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
            app.state.keys = keys
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
