"""The web page shows each answer's support labels: headless Chromium (Debian `chromium`, Playwright) on the app of
`rag serve` in a thread, over the in-memory collection with a scripted model and the support check's doubles
(`tools.in_memory_support`). An unsupported and a contradicted sentence are marked with a label a screen reader
reads, a summary line counts the supported sentences, a sentence (and its `[n]` chip) opens the citation dialog on its
supporting sentence, highlighted, by mouse, Enter and Space; the page image is asked for that sentence's lines only
(`span=`, the stream scripted in the browser: the in-memory documents have no pages). In the stack tier with the other
browser tests (it needs Chromium, not a server)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agent.config.settings import Settings
from agent.core.app import RagApp
from agent.core.support import SupportChecker
from agent.core.wiring import Services
from tests.agent_corpus import COVERED, DOCUMENTS
from tests.browser_rig import browser_page
from tests.conversation_rig import Model
from tools.in_memory import InMemoryCollection
from tools.in_memory_conversations import InMemoryConversations
from tools.in_memory_support import HashedEmbedder, LexicalVerifier
from tools.support import CheckOptions, DecisionRule, EmbeddingSimilarity

pytestmark = pytest.mark.stack

SUPPORTED = "Vitamin B12 deficiency raises plasma homocysteine in older adults [1]."
UNSUPPORTED = "The moon is made of green cheese [1]."
CONTRADICTED = "Folate intake never lowers homocysteine levels in adults [2]."


def checked_app() -> RagApp:
    collection = InMemoryCollection(DOCUMENTS)
    rule = DecisionRule(0.6, 0.6)
    checker = SupportChecker(EmbeddingSimilarity(HashedEmbedder()), LexicalVerifier(), CheckOptions(rule=rule))
    model = Model(f"{SUPPORTED} {UNSUPPORTED} {CONTRADICTED}").model
    services = Services(collection, collection, model, conversations=InMemoryConversations(), support=checker)
    return RagApp(Settings.model_validate({"refusal_min_score": 0.3}), services)


async def ask(page: Any, question: str) -> Any:
    from playwright.async_api import expect

    await page.fill("#question", question)
    await page.click("#send")
    turn = page.locator(".turn").last
    await expect(turn.locator(".support-summary")).to_be_visible(timeout=60_000)
    return turn


async def test_unsupported_and_contradicted_sentences_are_marked_and_counted() -> None:
    from playwright.async_api import expect

    rag = checked_app()
    async with browser_page(rag) as page:
        await page.goto("/")
        turn = await ask(page, COVERED)
        sentences = turn.locator(".answer .sentence")
        await expect(sentences).to_have_count(3)
        assert await sentences.evaluate_all("s => s.map(n => n.dataset.label)") == [
            "SUPPORT",
            "NOT_ENOUGH_INFO",
            "CONTRADICT",
        ]
        unsupported, contradicted = sentences.nth(1), sentences.nth(2)
        await expect(unsupported).to_have_class("sentence unsupported")
        await expect(unsupported).to_have_attribute("title", "not supported by the documents")
        await expect(unsupported.locator(".sr-only")).to_have_text(" (not supported by the documents)")
        await expect(contradicted).to_have_attribute("title", "contradicted by [2]")
        await expect(contradicted.locator(".sr-only")).to_have_text(" (contradicted by [2]; open the evidence)")
        after = await unsupported.evaluate("n => getComputedStyle(n, '::after').content")
        assert after == '"unsupported"'  # a visible mark, not colour alone
        await expect(turn.locator(".support-summary")).to_have_text("1 of 3 sentences supported, 1 contradicted")


async def test_a_sentence_opens_the_dialog_on_its_supporting_sentence_by_mouse_enter_and_space() -> None:
    from playwright.async_api import expect

    rag = checked_app()
    expected = await rag.ask(COVERED)
    assert expected.support is not None
    evidence = expected.support.sentences[0].evidence
    assert evidence is not None
    async with browser_page(rag) as page:
        await page.goto("/")
        turn = await ask(page, COVERED)
        dialog = page.locator("dialog#passage")
        mark = dialog.locator("#passage-text mark.sentence-span")
        supported = turn.locator(".answer .sentence").first

        await supported.click()
        await expect(dialog).to_be_visible()
        await expect(dialog.locator("#passage-title")).to_have_text("Vitamin B12")
        await expect(mark).to_have_text(evidence.text)
        await expect(dialog.locator("#passage-text")).to_have_text(expected.citations[0].text)
        await page.keyboard.press("Escape")
        await expect(dialog).to_be_hidden()

        for key in ("Enter", " "):
            await supported.focus()
            await page.keyboard.press(key)
            await expect(dialog).to_be_visible()
            await page.wait_for_timeout(300)  # the key that opened it must not close it
            await expect(dialog).to_be_visible()
            await expect(mark).to_have_text(evidence.text)
            await page.keyboard.press("Escape")
            await expect(dialog).to_be_hidden()
            await expect(supported).to_be_focused()  # focus comes back to the sentence

        await supported.locator(".chip").click()  # its [1] chip: the same sentence
        await expect(mark).to_have_text(evidence.text)
        await page.keyboard.press("Escape")
        chip = turn.locator(".answer .sentence").nth(1).locator("button.chip")  # an unsupported sentence's [1]
        for key in ("Enter", " "):
            await chip.focus()
            await page.keyboard.press(key)
            await expect(dialog).to_be_visible()
            await page.wait_for_timeout(300)
            await expect(dialog).to_be_visible()
            await expect(dialog.locator("#passage-text mark.passage-span")).to_have_text(expected.citations[0].text)
            await page.keyboard.press("Escape")
            await expect(dialog).to_be_hidden()


def stream(result: dict[str, Any]) -> str:
    events = [("text", {"type": "text", "text": result["answer"]}), ("support", {"support": result["support"]})]
    events.append(("result", result))
    return "".join(f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events)


async def test_the_page_image_highlights_only_the_supporting_sentence() -> None:
    from playwright.async_api import Route, expect

    rag = checked_app()
    passage = "Backups run every night at two. Restores take an hour."
    start = passage.index("Restores")
    box = [12, 72.0, 686.0, 300.0, 698.0]
    citation = {
        "doc_id": "handbook.pdf",
        "chunk_id": "handbook.pdf#3",
        "score": 0.5,
        "passage": 1,
        "title": "Operations handbook",
        "page": 12,
        "section": [],
        "location": "handbook.pdf p. 12",
        "text": passage,
        "span": [40, 40 + len(passage)],
        "boxes": [[12, 72.0, 700.0, 300.0, 712.0], box],
    }
    evidence = {
        "passage": 1,
        "doc_id": "handbook.pdf",
        "chunk_id": "handbook.pdf#3",
        "title": "Operations handbook",
        "text": passage[start:],
        "passage_span": [start, len(passage)],
        "span": [40 + start, 40 + len(passage)],
        "page": 12,
        "boxes": [box],
    }
    answer = "Restores take an hour [1]."
    sentence = {
        "index": 0,
        "text": answer,
        "span": [0, len(answer)],
        "label": "SUPPORT",
        "score": 0.9,
        "supported": True,
        "evidence": evidence,
        "cited": [1],
        "written": [1],
        "repointed": False,
        "quote": False,
    }
    support = {
        "mode": "flag",
        "sentences": [sentence],
        "supported": 1,
        "unsupported": 0,
        "removed": 0,
        "repeated": 0,
        "repointed": 0,
        "extractive": False,
        "generated": answer,
    }
    result = {
        "answer": answer,
        "citations": [citation],
        "support": support,
        "refused": False,
        "timings_ms": {"total": 5.0},
        "conversation_id": None,
    }
    images: list[str] = []

    async def answered(route: Route) -> None:
        await route.fulfill(status=200, content_type="text/event-stream", body=stream(result))

    async def page_image(route: Route) -> None:
        images.append(route.request.url)
        await route.fulfill(status=200, content_type="image/png", body=PNG)

    async with browser_page(rag) as page:
        await page.route("**/v1/ask/stream", answered)
        await page.route("**/v1/documents/handbook.pdf/pages/12?*", page_image)
        await page.goto("/")
        turn = await ask(page, "How long does a restore take?")
        await turn.locator(".answer .sentence").first.click()
        dialog = page.locator("dialog#passage")
        await expect(dialog.locator("#passage-text mark.sentence-span")).to_have_text("Restores take an hour.")
        await expect(dialog.locator("#passage-page-note")).to_have_text("page 12, the supporting sentence highlighted")
    assert len(images) == 1 and images[0].endswith(f"?chunk=handbook.pdf%233&span={start},{len(passage)}")


PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360f8cfc0f01f0005010201a7d6e6ec0000000049454e44ae426082"
)
