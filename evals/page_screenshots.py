"""The web page's screenshots in the documentation (`docs/images/web-page-1440.png`, `web-page-390.png`), taken in
headless Debian Chromium (Playwright driving `/usr/bin/chromium`) at 1440 x 900 and 390 x 844 CSS pixels.

The app: `agent.http.create_app` over a `RagApp` of in-memory parts (`tools.in_memory`: four short documents, a
conversation log), a scripted model whose answer has a supported, an unsupported and a contradicted sentence, and the
support check over its doubles (`tools.in_memory_support`), served by uvicorn in this process on a free loopback port.
One question is asked; the screenshot shows the answer with its marks, support summary and sources.

Run: `.venv/bin/python -m evals.page_screenshots [output folder]` (default `docs/images`).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from pathlib import Path

from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo, FunctionModel

from agent.config.settings import Settings
from agent.core.app import RagApp
from agent.core.support import SupportChecker
from agent.core.wiring import Services
from agent.http import create_app
from infra.threaded_server import ThreadedServer
from tools.in_memory import InMemoryCollection
from tools.in_memory_conversations import InMemoryConversations
from tools.in_memory_support import HashedEmbedder, LexicalVerifier
from tools.ingest import SourceDocument
from tools.support import CheckOptions, DecisionRule, EmbeddingSimilarity

CHROMIUM = "/usr/bin/chromium"
SIZES = {"1440": (1440, 900), "390": (390, 844)}
DOCUMENTS = [
    SourceDocument(
        "b12.pdf", "Vitamin B12", "Vitamin B12 deficiency raises plasma homocysteine in older adults.", "t", {}
    ),
    SourceDocument("folate.pdf", "Folate", "Folate intake lowers homocysteine levels in adults.", "t", {}),
    SourceDocument("mri.md", "Diffusion MRI", "Diffusion tensor imaging of newborn white matter.", "t", {}),
    SourceDocument("aldh1.html", "ALDH1", "ALDH1 expression marks breast cancer stem cells.", "t", {}),
]
QUESTION = "How do vitamin B12 and folate affect homocysteine?"
ANSWER = (
    "**In short:** both vitamins are linked to homocysteine.\n\n"
    "- Vitamin B12 deficiency raises plasma homocysteine in older adults [1].\n"
    "- Folate intake never lowers homocysteine levels in adults [2].\n\n"
    "Homocysteine is measured in saliva [1]."
)


async def _answer(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
    yield ANSWER


async def take(folder: Path) -> list[Path]:
    """The screenshots, one per size in `SIZES`, written into `folder` (an existing folder); their paths."""
    from playwright.async_api import async_playwright

    collection = InMemoryCollection(DOCUMENTS)
    rule = DecisionRule(0.6, 0.6)
    checker = SupportChecker(EmbeddingSimilarity(HashedEmbedder()), LexicalVerifier(), CheckOptions(rule=rule))
    services = Services(
        collection,
        collection,
        FunctionModel(stream_function=_answer),
        conversations=InMemoryConversations(),
        support=checker,
    )
    rag = RagApp(Settings.model_validate({"refusal_min_score": 0.1}), services)
    written = []
    with ThreadedServer(create_app(rag.settings, rag)) as server:
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"], headless=True)
            try:
                for name, (width, height) in SIZES.items():
                    context = await browser.new_context(viewport={"width": width, "height": height})
                    page = await context.new_page()
                    await page.goto(server.url + "/")
                    await page.wait_for_function("document.body.dataset.settled === 'true'")
                    await page.fill("#question", QUESTION)
                    await page.press("#question", "Enter")
                    await page.locator(".turn-actions").wait_for(timeout=60_000)
                    path = folder / f"web-page-{name}.png"
                    await page.screenshot(path=str(path))
                    written.append(path)
                    await context.close()
            finally:
                await browser.close()
    return written


def main() -> None:
    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("docs/images")
    folder.mkdir(parents=True, exist_ok=True)
    for path in asyncio.run(take(folder)):
        print(path)


if __name__ == "__main__":
    main()
