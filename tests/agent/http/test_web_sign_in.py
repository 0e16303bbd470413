"""The web page signs in through a real OpenID Connect issuer in headless Chromium (Debian `chromium`, Playwright):
oidc-provider-mock in a subprocess (`tests.oidc_issuer.running_provider`), the app of `rag serve` in a thread over the
in-memory parts. Sign in (authorization code + PKCE S256 through the issuer's authorize form), the page's reads then
carrying the ID token as `Authorization: Bearer`, who is signed in, sign out; an expired token dropped, and one the
server refuses. The server's verification of the token is not this file's: the server of the sign-in test has no key,
so it serves any bearer. In the stack tier with the other browser tests (it needs Chromium and a server process)."""

from __future__ import annotations

import base64
import hashlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from agent.config.settings import Settings
from agent.core.app import RagApp
from agent.core.wiring import Services
from tests.agent_corpus import DOCUMENTS
from tests.browser_rig import axe_violations, browser_page
from tests.conversation_rig import Model
from tests.oidc_issuer import Provider, running_provider
from tools.in_memory import InMemoryCollection

pytestmark = pytest.mark.stack

CLIENT = "rag-page"
ALICE = {"sub": "alice", "email": "alice@example.com", "groups": ["eng"]}
TOKEN_ITEM = "triton-rag-id-token"


@pytest.fixture(scope="module")
def issuer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Provider]:
    with running_provider(tmp_path_factory.mktemp("issuer"), [ALICE]) as running:
        yield running


def rag_app(issuer: Provider, **update: Any) -> RagApp:
    """The in-memory app signing in through `issuer`. A client secret: oidc-provider-mock 0.3.4's token endpoint
    authenticates clients by secret only (any secret), where a real issuer takes a public client with PKCE alone."""
    oidc = {"oidc_issuer": issuer.issuer, "oidc_client_id": CLIENT, "oidc_client_secret": "any"}
    settings = Settings.model_validate({**oidc, "refusal_min_score": 0.3, **update})
    collection = InMemoryCollection(DOCUMENTS)
    return RagApp(settings, Services(collection, collection, Model("It raises homocysteine [1].").model))


def claims(jwt: str) -> dict[str, Any]:
    payload = jwt.split(".")[1]
    return dict(json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))))


def unsigned_jwt(payload: dict[str, Any]) -> str:
    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    return f"{part({'alg': 'RS256', 'typ': 'JWT'})}.{part(payload)}.c2ln"


class Requests:
    """Every request the page sends: (method, URL, headers, body)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, dict[str, str], str | None]] = []

    def record(self, request: Any) -> None:
        self.seen.append((request.method, request.url, request.headers, request.post_data))

    def api(self, origin: str, since: int = 0) -> list[dict[str, str]]:
        """The headers of the page's API requests (`<origin>/v1/...`) from the `since`-th request on."""
        return [headers for _, url, headers, _ in self.seen[since:] if url.startswith(f"{origin}/v1/")]


async def next_search(page: Any, origin: str, text: str) -> dict[str, str]:
    """The headers of the document search the page sends once `text` is typed in the library's search box."""
    async with page.expect_request(lambda r: r.url.startswith(f"{origin}/v1/documents")) as search:
        await page.fill("#doc-search", text)
    return dict((await search.value).headers)


async def test_the_page_signs_in_through_the_issuer_sends_the_id_token_and_signs_out(issuer: Provider) -> None:
    from playwright.async_api import expect

    async with browser_page(rag_app(issuer), width=390, height=800) as page:
        requests = Requests()
        page.on("request", requests.record)
        await page.goto("/")
        origin = page.url.rstrip("/")
        # with an issuer configured every read needs a token: the first reads are refused, the panel offers the issuer
        await expect(page.locator("dialog#sign-in")).to_be_visible()
        account = page.locator("#account")
        await expect(account).to_have_text("Sign in")
        await expect(page.locator("#who")).to_be_hidden()
        assert requests.api(origin) and all("authorization" not in h for h in requests.api(origin))

        await expect(page.locator("#sign-in-issuer")).to_be_focused()
        await page.keyboard.press("Enter")  # by keyboard
        await page.wait_for_url(f"{issuer.issuer}/oauth2/authorize?*")
        query = {k: v[0] for k, v in parse_qs(urlsplit(page.url).query).items()}
        assert query["response_type"] == "code" and query["client_id"] == CLIENT
        assert query["redirect_uri"] == f"{origin}/" and query["scope"] == "openid profile email"
        assert query["code_challenge_method"] == "S256" and len(query["code_challenge"]) == 43
        assert len(query["state"]) >= 16 and len(query["nonce"]) >= 16 and query["state"] != query["nonce"]

        back = len(requests.seen)
        await page.fill("input[name=sub]", "alice")  # the issuer's authorize form
        await page.get_by_role("button", name="Authorize", exact=True).click()

        await page.wait_for_url(f"{origin}/")  # back, ?code=&state= stripped
        await expect(page.locator("body")).to_have_attribute("data-settled", "true")
        await expect(page.locator("#who")).to_have_text("Signed in as alice@example.com")
        await expect(account).to_have_text("Sign out")
        token = await page.evaluate(f"sessionStorage.getItem('{TOKEN_ITEM}')")
        id_token = claims(token)
        assert (id_token["sub"], id_token["aud"], id_token["iss"]) == ("alice", [CLIENT], issuer.issuer)
        assert id_token["nonce"] == query["nonce"] and id_token["groups"] == ["eng"]
        assert await page.evaluate("sessionStorage.getItem('triton-rag-sign-in')") is None  # the pending request

        token_url = f"{origin}/auth/token"
        (exchange,) = [body for method, url, _, body in requests.seen if (method, url) == ("POST", token_url)]
        sent = json.loads(exchange or "{}")
        digest = hashlib.sha256(sent["code_verifier"].encode()).digest()
        assert base64.urlsafe_b64encode(digest).rstrip(b"=").decode() == query["code_challenge"]  # PKCE S256
        assert sent["redirect_uri"] == f"{origin}/"

        bearer = f"Bearer {token}"
        first_reads = requests.api(origin, back)
        assert first_reads and all(h.get("authorization") == bearer for h in first_reads)
        await page.click("#open-library")
        assert (await next_search(page, origin, "vitamin")).get("authorization") == bearer  # the next request

        overflow = await page.evaluate("document.documentElement.scrollWidth > document.documentElement.clientWidth")
        assert not overflow  # the 390 px layout holds with the signed-in line
        assert await axe_violations(page) == []

        await page.click("#close-library")
        await account.click()  # sign out: forgotten here, then the issuer's session ended (RP-Initiated Logout)
        await page.wait_for_url(f"{issuer.issuer}/oauth2/end_session?*")
        ended = {k: v[0] for k, v in parse_qs(urlsplit(page.url).query).items()}
        assert ended == {"id_token_hint": token, "client_id": CLIENT, "post_logout_redirect_uri": f"{origin}/"}
        assert await page.evaluate(f"sessionStorage.getItem('{TOKEN_ITEM}')") is None
        signed_out = len(requests.seen)
        await page.get_by_role("button", name="End session").click()  # the issuer's confirmation
        await page.wait_for_url(f"{origin}/")  # back: the button, the reads unauthenticated (and refused) again
        await expect(account).to_have_text("Sign in")
        await expect(page.locator("#who")).to_be_hidden()
        await expect(page.locator("dialog#sign-in")).to_be_visible()
        assert await page.evaluate(f"sessionStorage.getItem('{TOKEN_ITEM}')") is None
        after = requests.api(origin, signed_out)
        assert after and all("authorization" not in h for h in after)


async def test_an_expired_token_is_dropped_and_sign_in_offered_again(issuer: Provider) -> None:
    from playwright.async_api import expect

    expired = unsigned_jwt({"sub": "alice", "aud": CLIENT, "exp": int(time.time()) - 60})
    async with browser_page(rag_app(issuer)) as page:
        await page.context.add_init_script(f"sessionStorage.setItem('{TOKEN_ITEM}', {json.dumps(expired)})")
        sent: list[str | None] = []
        page.on("request", lambda r: sent.append(r.headers.get("authorization")) if "/v1/" in r.url else None)
        await page.goto("/")
        await expect(page.locator("dialog#sign-in")).to_be_visible()  # its reads went without the token: refused
        await expect(page.locator("#account")).to_have_text("Sign in")
        await expect(page.locator("#who")).to_be_hidden()
        assert await page.evaluate(f"sessionStorage.getItem('{TOKEN_ITEM}')") is None
        assert sent and set(sent) == {None}


async def test_a_return_whose_state_is_not_this_tab_s_is_refused(issuer: Provider) -> None:
    from playwright.async_api import expect

    async with browser_page(rag_app(issuer)) as page:
        await page.goto("/?code=stolen&state=forged")
        await expect(page.locator("#who")).to_contain_text("not for this tab's request")
        await expect(page.locator("#account")).to_have_text("Sign in")
        assert urlsplit(page.url).query == ""
        assert await page.evaluate(f"sessionStorage.getItem('{TOKEN_ITEM}')") is None


async def test_a_refused_read_offers_the_issuer_beside_the_api_key(issuer: Provider) -> None:
    from playwright.async_api import expect

    async with browser_page(rag_app(issuer, api_key="admin-key")) as page:
        await page.goto("/")  # its first reads are refused: the panel, the issuer's button first
        panel = page.locator("dialog#sign-in")
        await expect(panel).to_be_visible()
        await expect(page.locator("#sign-in-issuer")).to_be_focused()
        await expect(page.locator("#api-key")).to_be_visible()
        await expect(page.locator("#key-note")).to_have_text(
            "Or an API key: it is kept in this tab only, until you close it."
        )
        assert await axe_violations(page) == []
        await page.keyboard.press("Enter")
        await page.wait_for_url(f"{issuer.issuer}/oauth2/authorize?*")


async def test_a_token_the_server_refuses_is_dropped_and_the_panel_opens(issuer: Provider) -> None:
    from playwright.async_api import expect

    forged = unsigned_jwt({"sub": "mallory", "aud": CLIENT, "exp": int(time.time()) + 3600})  # no valid signature
    async with browser_page(rag_app(issuer, api_key="admin-key")) as page:
        await page.context.add_init_script(f"sessionStorage.setItem('{TOKEN_ITEM}', {json.dumps(forged)})")
        await page.goto("/")
        await expect(page.locator("dialog#sign-in")).to_be_visible()
        await expect(page.locator("#sign-in-message")).to_contain_text("no longer accepted")
        assert await page.evaluate(f"sessionStorage.getItem('{TOKEN_ITEM}')") is None
        await page.click("#sign-in-cancel")
        await expect(page.locator("#account")).to_have_text("Sign in")
        await expect(page.locator("#who")).to_be_hidden()


async def test_sign_in_is_off_without_an_issuer(tmp_path: Path) -> None:
    from playwright.async_api import expect

    settings = Settings.model_validate({"refusal_min_score": 0.3})
    collection = InMemoryCollection(DOCUMENTS)
    rag = RagApp(settings, Services(collection, collection, Model("x").model))
    async with browser_page(rag) as page:
        await page.goto("/")
        await expect(page.locator("body")).to_have_attribute("data-settled", "true")
        await page.click("#account")  # the API key panel, without the issuer's button
        await expect(page.locator("dialog#sign-in")).to_be_visible()
        await expect(page.locator("#sign-in-issuer")).to_be_hidden()
        await expect(page.locator("#api-key")).to_be_focused()
        await expect(page.locator("#key-note")).to_contain_text("This server needs an API key.")
