"""Rating answers from the chat page (issue 44): headless Chromium (Debian `chromium`, Playwright) on the app of
`rag serve` in a thread, over the in-memory collection, conversation log and feedback store with a scripted model.
Thumbs up and down under each finished answer (`aria-pressed` shows the rating), then an optional comment and "the
right source was …" sent with the rating; what was stored is read back through `GET /v1/feedback/{answer_id}`. A
comment that looks like HTML stays text; the whole flow works from the keyboard. In the stack tier with the other
browser tests (it needs Chromium, not a server)."""

from __future__ import annotations

from typing import Any

import pytest

from tests import external_tools
from tests.browser_rig import app, ask, axe_violations, browser_page

pytestmark = pytest.mark.stack

HOSTILE = "<img src=x onerror=alert(1)> wrong dose"


async def stored(page: Any, answer_id: str) -> dict[str, Any]:
    """The rating of `answer_id` as the HTTP API returns it."""
    response = await page.request.get(f"/v1/feedback/{answer_id}")
    assert response.status == 200, await response.text()
    body: dict[str, Any] = await response.json()
    return body


async def test_an_answer_is_rated_down_with_a_comment_and_the_right_source() -> None:
    from playwright.async_api import expect

    external_tools.axe_core()
    async with browser_page(app()) as page:
        await page.goto("/")
        await expect(page.locator("body")).to_have_attribute("data-settled", "true")
        turn = await ask(page)
        answer_id = await turn.get_attribute("data-answer-id")
        assert answer_id
        good = turn.get_by_role("button", name="Good answer")
        bad = turn.get_by_role("button", name="Bad answer")
        await expect(good).to_have_attribute("aria-pressed", "false")
        await expect(bad).to_have_attribute("aria-pressed", "false")
        await expect(turn.locator(".rate-form")).to_be_hidden()
        await bad.click()
        await expect(bad).to_have_attribute("aria-pressed", "true")
        await expect(good).to_have_attribute("aria-pressed", "false")
        await expect(turn.locator(".rate-status")).to_have_text("Thanks — rated down")
        assert (await stored(page, answer_id))["rating"] == "down"
        # the answer's cited documents are offered as the right source
        options = turn.locator(".rate-form datalist option")
        assert sorted(await options.evaluate_all("os => os.map((o) => o.value)")) == ["b12", "folate"]
        await turn.get_by_label("Comment (optional)").fill(HOSTILE)
        await turn.get_by_label("The right source was (optional)").fill("folate")
        await turn.get_by_role("button", name="Send").click()
        await expect(turn.locator(".rate-status")).to_have_text(
            "Thanks — rated down, with your comment and the right source"
        )
        rated = await stored(page, answer_id)
        assert (rated["rating"], rated["comment"], rated["right_source"]) == ("down", HOSTILE, "folate")
        await expect(page.locator("img")).to_have_count(1)  # the passage dialog's page image only, never the comment's
        await expect(page.locator(".turn img")).to_have_count(0)
        assert await axe_violations(page) == []  # the thumbs, the form and its confirmation


async def test_at_390_px_the_rating_form_fits() -> None:
    from playwright.async_api import expect

    async with browser_page(app(), width=390, height=844) as page:
        await page.goto("/")
        turn = await ask(page)
        await turn.get_by_role("button", name="Bad answer").click()
        await expect(turn.locator(".rate-form")).to_be_visible()
        width = await page.evaluate("() => document.documentElement.scrollWidth")
        assert width <= 390, f"the page is {width} px wide"
        for part in (".rate-comment", ".rate-source", ".rate-send", ".rate-down"):
            box = await turn.locator(part).bounding_box()
            assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 390, part


async def test_a_rating_is_changed_from_up_to_down_and_errors_are_sentences() -> None:
    from playwright.async_api import expect

    async with browser_page(app()) as page:
        await page.goto("/")
        turn = await ask(page)
        answer_id = await turn.get_attribute("data-answer-id")
        assert answer_id
        good = turn.get_by_role("button", name="Good answer")
        bad = turn.get_by_role("button", name="Bad answer")
        await good.click()
        await expect(turn.locator(".rate-status")).to_have_text("Thanks — rated up")
        await expect(good).to_have_attribute("aria-pressed", "true")
        assert (await stored(page, answer_id))["rating"] == "up"
        await bad.click()
        await expect(turn.locator(".rate-status")).to_have_text("Thanks — rated down")
        await expect(good).to_have_attribute("aria-pressed", "false")
        await expect(bad).to_have_attribute("aria-pressed", "true")
        assert (await stored(page, answer_id))["rating"] == "down"
        # a refusal is shown as a sentence, never raw JSON, and the thumbs keep the stored rating
        refusal = {"error": "bad_request", "detail": "right_source: expected text without NUL characters"}
        await page.route("**/v1/feedback", lambda route: route.fulfill(status=422, json=refusal))
        await turn.get_by_label("The right source was (optional)").fill("folate")
        await turn.get_by_role("button", name="Send").click()
        status = turn.locator(".rate-status")
        await expect(status).to_have_text(
            "The rating was not saved: right_source: expected text without NUL characters"
        )
        await page.unroute("**/v1/feedback")
        await expect(bad).to_have_attribute("aria-pressed", "true")
        # once the answer's record is deleted, rating it says so
        assert (await page.request.delete(f"/v1/feedback/{answer_id}")).status == 204
        await good.click()
        await expect(status).to_have_text("This answer can no longer be rated (it is not kept on the server).")
        await expect(bad).to_have_attribute("aria-pressed", "true")


async def test_rating_works_from_the_keyboard_alone() -> None:
    from playwright.async_api import expect

    async with browser_page(app()) as page:
        await page.goto("/")
        turn = await ask(page)
        answer_id = await turn.get_attribute("data-answer-id")
        assert answer_id
        await turn.get_by_role("button", name="Regenerate the answer").focus()
        await page.keyboard.press("Tab")
        good = turn.get_by_role("button", name="Good answer")
        await expect(good).to_be_focused()
        await page.keyboard.press("Enter")
        await expect(good).to_have_attribute("aria-pressed", "true")
        await expect(good).to_be_focused()  # the focus stays on the button pressed
        await page.keyboard.press("Tab")
        bad = turn.get_by_role("button", name="Bad answer")
        await expect(bad).to_be_focused()
        await page.keyboard.press("Space")
        await expect(bad).to_have_attribute("aria-pressed", "true")
        await expect(turn.locator(".rate-status")).to_have_text("Thanks — rated down")
        await page.keyboard.press("Tab")
        await expect(turn.get_by_label("Comment (optional)")).to_be_focused()
        await page.keyboard.type("too vague")
        await page.keyboard.press("Tab")
        await expect(turn.get_by_label("The right source was (optional)")).to_be_focused()
        await page.keyboard.type("b12#0")
        await page.keyboard.press("Tab")
        send = turn.get_by_role("button", name="Send")
        await expect(send).to_be_focused()
        outline = await send.evaluate("n => getComputedStyle(n).outlineStyle")
        assert outline != "none"  # the focus is visible
        await page.keyboard.press("Enter")
        await expect(turn.locator(".rate-status")).to_contain_text("with your comment and the right source")
        rated = await stored(page, answer_id)
        assert (rated["rating"], rated["comment"], rated["right_source"]) == ("down", "too vague", "b12#0")


async def test_an_answer_restored_without_an_id_has_no_thumbs() -> None:
    from playwright.async_api import expect

    async with browser_page(app()) as page:
        await page.goto("/")
        turn = await ask(page)
        await expect(turn.locator(".rate button")).to_have_count(2)
        await page.reload()
        restored = page.locator(".turn.stored")
        await expect(restored).to_have_count(1)
        await expect(restored.locator(".turn-actions")).to_be_visible()
        await expect(restored.locator(".rate, .rate-form")).to_have_count(0)
