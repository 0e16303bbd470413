"""The page's sign-in routes (`agent.http.auth_routes`) in-process: `/auth/config` from the settings, open without the
API key; `/auth/discovery` and `/auth/token` against oidc-provider-mock's Flask app served over httpx's WSGI
transport (the routes' issuer client swapped), so a real authorization code is issued and exchanged without a server.
The page driving them in Chromium: test_web_sign_in.py."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from pydantic import SecretStr

from agent.http.auth_routes import issuer_client
from tests.http_rig import Served, assert_error, serve

ISSUER = "http://issuer.test"
CLIENT = "rag-page"
REDIRECT = "http://rag/"
VERIFIER = "v" * 43 + "-._~0123456789"


class AsyncWsgi(httpx.AsyncBaseTransport):
    """httpx's WSGI transport for an async client (it has only the sync one): the Flask app called inline."""

    def __init__(self, app: Any) -> None:
        self.wsgi = httpx.WSGITransport(app=app)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        await request.aread()
        response = self.wsgi.handle_request(request)
        return httpx.Response(response.status_code, headers=response.headers, content=response.read())


@pytest.fixture
def issuer(monkeypatch: pytest.MonkeyPatch) -> httpx.AsyncClient:
    """A client of oidc-provider-mock's app (one user, alice), as `ISSUER`."""
    from oidc_provider_mock import app  # type: ignore[import-untyped]
    from oidc_provider_mock._storage import User  # type: ignore[import-untyped]

    monkeypatch.setenv("AUTHLIB_INSECURE_TRANSPORT", "1")  # plain http, as `python -m oidc_provider_mock` sets
    provider = app(user_claims=[User(sub="alice", claims={"email": "alice@example.com", "groups": ["eng"]})])
    return httpx.AsyncClient(transport=AsyncWsgi(provider), base_url=ISSUER)


def signed_in_app(issuer: httpx.AsyncClient, **update: Any) -> Served:
    """The app signing in through `issuer` as `CLIENT`: a confidential client by default, as oidc-provider-mock 0.3.4
    authenticates clients at its token endpoint by secret only (any secret; it neither takes public clients nor
    checks PKCE)."""
    settings = {"oidc_issuer": ISSUER, "oidc_client_id": CLIENT, "oidc_client_secret": "any", **update}
    served = serve(api_key=SecretStr("admin-key"), **settings)

    async def client() -> AsyncIterator[httpx.AsyncClient]:
        yield issuer

    served.app.dependency_overrides[issuer_client] = client
    return served


@pytest.fixture
def served(issuer: httpx.AsyncClient) -> Iterator[Served]:
    yield signed_in_app(issuer)


def challenge(verifier: str) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()


async def authorization_code(issuer: httpx.AsyncClient, authorize: str, sub: str = "alice") -> str:
    """The code the issuer's authorize form sends back for `sub` (the form the page's user submits)."""
    query = {
        "response_type": "code",
        "client_id": CLIENT,
        "redirect_uri": REDIRECT,
        "scope": "openid profile email",
        "state": "s1",
        "nonce": "n1",
        "code_challenge": challenge(VERIFIER),
        "code_challenge_method": "S256",
    }
    response = await issuer.post(authorize, params=query, data={"sub": sub})
    assert response.status_code == 302, response.text
    back = urlsplit(response.headers["location"])
    assert f"{back.scheme}://{back.netloc}{back.path}" == REDIRECT
    params = parse_qs(back.query)
    assert params["state"] == ["s1"]
    return params["code"][0]


def claims(jwt: str) -> dict[str, Any]:
    payload = jwt.split(".")[1]
    return dict(json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))))


async def test_config_is_open_and_says_sign_in_is_off_by_default() -> None:
    served = serve(api_key=SecretStr("admin-key"))
    async with served.client() as client:  # no key: the page asks before anyone is signed in
        response = await client.get("/auth/config")
        assert response.status_code == 200
        off = {"enabled": False, "issuer": None, "client_id": None, "scopes": "openid profile email"}
        assert response.json() == off
        assert_error(await client.get("/auth/discovery"), 404, "not_found", "OIDC_ISSUER")
        body = {"code": "c", "code_verifier": VERIFIER, "redirect_uri": REDIRECT}
        assert_error(await client.post("/auth/token", json=body), 404, "not_found", "OIDC_ISSUER")
        assert_error(await client.get("/v1/collections"), 401, "unauthorized")  # the rest stays behind the key


async def test_config_names_the_issuer_client_and_scopes(issuer: httpx.AsyncClient) -> None:
    served = signed_in_app(issuer, oidc_scopes="openid email", oidc_client_secret=None)
    async with served.client() as client:
        response = await client.get("/auth/config")
    assert response.json() == {"enabled": True, "issuer": ISSUER, "client_id": CLIENT, "scopes": "openid email"}


async def test_an_issuer_without_a_client_id_is_not_enabled(issuer: httpx.AsyncClient) -> None:
    """Tokens for an audience of their own (an API accepting another client's tokens): no sign-in on the page."""
    served = serve(oidc_issuer=ISSUER, oidc_audience="api://rag")
    async with served.client() as client:
        assert (await client.get("/auth/config")).json()["enabled"] is False


async def test_discovery_passes_on_the_issuer_s_endpoints(served: Served) -> None:
    async with served.client() as client:
        response = await client.get("/auth/discovery")
    assert response.status_code == 200, response.text
    assert response.json() == {
        "authorization_endpoint": f"{ISSUER}/oauth2/authorize",
        "token_endpoint": f"{ISSUER}/oauth2/token",
        "end_session_endpoint": f"{ISSUER}/oauth2/end_session",
    }


async def test_a_code_is_exchanged_for_an_id_token_of_the_client_and_no_refresh_token(
    served: Served, issuer: httpx.AsyncClient
) -> None:
    async with served.client() as client:
        endpoints = (await client.get("/auth/discovery")).json()
        code = await authorization_code(issuer, endpoints["authorization_endpoint"])
        body = {"code": code, "code_verifier": VERIFIER, "redirect_uri": REDIRECT}
        response = await client.post("/auth/token", json=body)
        assert response.status_code == 200, response.text
        tokens = response.json()
        assert set(tokens) == {"id_token", "access_token", "token_type", "expires_in"}  # the refresh token kept back
        assert response.headers["cache-control"] == "no-store"
        id_token = claims(tokens["id_token"])
        assert (id_token["sub"], id_token["aud"], id_token["iss"]) == ("alice", [CLIENT], ISSUER)
        assert id_token["nonce"] == "n1" and id_token["email"] == "alice@example.com"

        again = await client.post("/auth/token", json=body)  # a code is good once
        assert_error(again, 400, "sign_in_refused", "invalid_grant")


async def test_a_malformed_exchange_is_refused_before_the_issuer_is_asked(served: Served) -> None:
    async with served.client() as client:
        for body in (
            {"code": "c", "code_verifier": "short", "redirect_uri": REDIRECT},  # RFC 7636: at least 43 characters
            {"code": "c", "code_verifier": VERIFIER.replace("~", "+"), "redirect_uri": REDIRECT},
            {"code": "c", "code_verifier": VERIFIER, "redirect_uri": "javascript:alert(1)"},
            {"code": "", "code_verifier": VERIFIER, "redirect_uri": REDIRECT},
        ):
            assert_error(await client.post("/auth/token", json=body), 422, "bad_request")


async def test_an_issuer_that_names_another_issuer_or_cannot_be_reached_is_a_502() -> None:
    def impostor(request: httpx.Request) -> httpx.Response:
        endpoints = {"authorization_endpoint": f"{ISSUER}/authorize", "token_endpoint": f"{ISSUER}/token"}
        return httpx.Response(200, json={"issuer": "http://elsewhere.test", **endpoints})

    served = signed_in_app(httpx.AsyncClient(transport=httpx.MockTransport(impostor)))
    async with served.client() as client:
        assert_error(await client.get("/auth/discovery"), 502, "issuer_unavailable", "names the issuer")

    def unreachable(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    down = signed_in_app(httpx.AsyncClient(transport=httpx.MockTransport(unreachable)))
    async with down.client() as client:
        assert_error(await client.get("/auth/discovery"), 502, "issuer_unavailable", "cannot be reached")
        body = {"code": "c", "code_verifier": VERIFIER, "redirect_uri": REDIRECT}
        assert_error(await client.post("/auth/token", json=body), 502, "issuer_unavailable", "cannot be reached")


async def exchanged(answer: httpx.Response, secret: str | None) -> tuple[httpx.Response, httpx.Request]:
    """`POST /auth/token` of a code through an issuer that answers its token endpoint with `answer`, as a client with
    `secret`: the app's response and the request the issuer got."""
    sent: list[httpx.Request] = []

    def issuer(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/openid-configuration"):
            endpoints = {"authorization_endpoint": f"{ISSUER}/authorize", "token_endpoint": f"{ISSUER}/token"}
            return httpx.Response(200, json={"issuer": ISSUER, **endpoints})
        sent.append(request)
        return answer

    served = signed_in_app(httpx.AsyncClient(transport=httpx.MockTransport(issuer)), oidc_client_secret=secret)
    async with served.client() as client:
        body = {"code": "the-code", "code_verifier": VERIFIER, "redirect_uri": REDIRECT}
        response = await client.post("/auth/token", json=body)
    (request,) = sent
    return response, request


async def test_a_public_client_sends_its_id_and_the_verifier_and_no_secret() -> None:
    tokens = {"id_token": "a.b.c", "refresh_token": "r", "token_type": "Bearer"}
    response, request = await exchanged(httpx.Response(200, json=tokens), None)
    assert response.json() == {"id_token": "a.b.c", "token_type": "Bearer"}
    assert parse_qs(request.content.decode()) == {
        "grant_type": ["authorization_code"],
        "code": ["the-code"],
        "code_verifier": [VERIFIER],
        "redirect_uri": [REDIRECT],
        "client_id": [CLIENT],
    }
    assert "authorization" not in request.headers


async def test_a_confidential_client_authenticates_with_http_basic() -> None:
    refusal = {"error": "invalid_grant", "error_description": "code expired"}
    response, request = await exchanged(httpx.Response(400, json=refusal), "s3:cr+t")
    assert_error(response, 400, "sign_in_refused", "invalid_grant code expired")
    assert request.headers["authorization"] == "Basic " + base64.b64encode(b"rag-page:s3%3Acr%2Bt").decode()
    assert "client_id" not in parse_qs(request.content.decode())
