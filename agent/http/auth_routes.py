"""The web page's sign-in through an OpenID Connect issuer (authorization code + PKCE, `OIDC_ISSUER`): open routes
under `/auth` (no API key; `agent.http.guards.OPEN_PATHS`).

- `GET /auth/config`: `{"enabled", "issuer", "client_id", "scopes"}` from the settings; `enabled` when both
  `OIDC_ISSUER` and `OIDC_CLIENT_ID` are set.
- `GET /auth/discovery`: the endpoints of the issuer's discovery document (`authorization_endpoint`,
  `token_endpoint`, and `end_session_endpoint` when it has one), read here rather than by the browser, as an issuer need
  not answer cross-origin requests (CORS): oidc-provider-mock, the issuer of the tests, does not.
- `POST /auth/token` `{"code", "code_verifier", "redirect_uri"}`: the code exchanged at the issuer's token endpoint,
  as a public client (the client id in the form; PKCE proves the page that asked for the code) or, with
  `OIDC_CLIENT_SECRET`, as a confidential one (HTTP Basic; the secret never reaches the page), answering
  `{"id_token", "access_token", "token_type", "expires_in"}` (those the issuer gave; never its refresh token). Token
  endpoints of single-page clients need CORS set up at the issuer (Keycloak's web origins, Entra ID's SPA platform);
  exchanging here needs none.

The tokens are not verified here: the page keeps the ID token (its audience is the client id) and sends it as
`Authorization: Bearer`, and the API verifies it on every request. Refusals: 404 `not_found` while sign-in is off,
400 `sign_in_refused` when the issuer refuses the code (its error named), 502 `issuer_unavailable` when the issuer
cannot be reached or answers something else than the protocol's JSON.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from typing import Annotated, Any
from urllib.parse import quote_plus

import httpx
from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field, SecretStr

from agent.config.settings import Settings
from agent.http.deps import AppSettings
from agent.http.errors import error_json

ISSUER_TIMEOUT_S = 10.0
"""Bound on each request to the issuer (its discovery document, its token endpoint), seconds."""

DISCOVERY_FIELDS = ("authorization_endpoint", "token_endpoint")
"""What `GET /auth/discovery` passes on from the issuer's discovery document (both required)."""
OPTIONAL_DISCOVERY_FIELDS = ("end_session_endpoint",)
"""Passed on when the issuer names them: `end_session_endpoint`, where the page's "Sign out" ends the issuer's session
too (OpenID Connect RP-Initiated Logout 1.0)."""

TOKEN_FIELDS = ("id_token", "access_token", "token_type", "expires_in")
"""What `POST /auth/token` passes on from the issuer's token response (a refresh token is never handed to a page)."""

router = APIRouter(prefix="/auth")


class IssuerError(Exception):
    """The issuer could not be reached, or answered something else than its protocol's JSON."""


class TokenRequest(BaseModel):
    """The page's code exchange: the code the issuer sent back, the PKCE verifier it was asked with (RFC 7636: 43 to
    128 characters of `A-Z a-z 0-9 - . _ ~`) and the redirect URI of that request."""

    code: str = Field(min_length=1, max_length=4096)
    code_verifier: str = Field(min_length=43, max_length=128, pattern=r"^[A-Za-z0-9\-._~]+$")
    redirect_uri: str = Field(min_length=1, max_length=2048, pattern=r"^https?://")


async def issuer_client() -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client for the issuer, bounded by `ISSUER_TIMEOUT_S` (tests override this dependency)."""
    async with httpx.AsyncClient(timeout=ISSUER_TIMEOUT_S) as client:
        yield client


IssuerClient = Annotated[httpx.AsyncClient, Depends(issuer_client)]


def enabled(settings: Settings) -> bool:
    """Whether the page signs in through an issuer: `OIDC_ISSUER` and `OIDC_CLIENT_ID` both set."""
    return bool(settings.oidc_issuer and settings.oidc_client_id)


def issuer_json(response: httpx.Response) -> dict[str, Any]:
    """The JSON object of an issuer's answer.

    Raises:
        IssuerError: the body is not a JSON object.
    """
    try:
        body = response.json()
    except ValueError as exc:
        raise IssuerError(f"{response.url} answered HTTP {response.status_code} without JSON") from exc
    if not isinstance(body, dict):
        raise IssuerError(f"{response.url} answered JSON that is not an object")
    return body


async def discover(client: httpx.AsyncClient, issuer: str) -> dict[str, str]:
    """The endpoints of `issuer`'s discovery document (`DISCOVERY_FIELDS`, and `OPTIONAL_DISCOVERY_FIELDS` it names).

    Raises:
        IssuerError: unreachable, not HTTP 200, no JSON object, an `issuer` other than `issuer` (OpenID Connect
            Discovery 1.0 §4.3), or no authorization or token endpoint.
    """
    url = f"{issuer.rstrip('/')}/.well-known/openid-configuration"
    try:
        response = await client.get(url)
    except httpx.HTTPError as exc:
        raise IssuerError(f"{url} cannot be reached: {type(exc).__name__}") from exc
    if response.status_code != 200:
        raise IssuerError(f"{url} answered HTTP {response.status_code}")
    document = issuer_json(response)
    if str(document.get("issuer", "")).rstrip("/") != issuer.rstrip("/"):
        raise IssuerError(f"{url} names the issuer {document.get('issuer')!r}, not {issuer!r} (OIDC_ISSUER)")
    endpoints = {k: document[k] for k in DISCOVERY_FIELDS if isinstance(document.get(k), str)}
    if len(endpoints) < len(DISCOVERY_FIELDS):
        raise IssuerError(f"{url} names no authorization or token endpoint")
    endpoints |= {k: document[k] for k in OPTIONAL_DISCOVERY_FIELDS if isinstance(document.get(k), str)}
    return endpoints


def basic_credentials(client_id: str, secret: SecretStr) -> str:
    """The `Authorization` header of a confidential client at the token endpoint (`client_secret_basic`, RFC 6749
    §2.3.1: the id and secret form-urlencoded, then joined by `:` and base64-encoded)."""
    pair = f"{quote_plus(client_id)}:{quote_plus(secret.get_secret_value())}"
    return f"Basic {base64.b64encode(pair.encode()).decode()}"


def sign_in_off() -> JSONResponse:
    return error_json(404, "not_found", "sign-in through an issuer is off: OIDC_ISSUER and OIDC_CLIENT_ID are unset")


def unavailable(exc: IssuerError) -> JSONResponse:
    return error_json(502, "issuer_unavailable", f"the sign-in issuer failed: {exc}")


@router.get("/config", include_in_schema=False)
async def config(settings: AppSettings) -> JSONResponse:
    """`{"enabled": bool, "issuer": str | None, "client_id": str | None, "scopes": str}`: how the page signs in."""
    return JSONResponse(
        {
            "enabled": enabled(settings),
            "issuer": settings.oidc_issuer,
            "client_id": settings.oidc_client_id,
            "scopes": settings.oidc_scopes,
        }
    )


@router.get("/discovery", include_in_schema=False)
async def discovery(settings: AppSettings, client: IssuerClient) -> JSONResponse:
    """The issuer's authorization and token endpoints; 404 while sign-in is off, 502 when the issuer fails."""
    if not enabled(settings) or settings.oidc_issuer is None:
        return sign_in_off()
    try:
        return JSONResponse(await discover(client, settings.oidc_issuer))
    except IssuerError as exc:
        return unavailable(exc)


@router.post("/token", include_in_schema=False)
async def token(body: TokenRequest, settings: AppSettings, client: IssuerClient) -> JSONResponse:
    """The code exchanged at the issuer's token endpoint (`grant_type=authorization_code`, PKCE verifier, client id);
    the issuer's tokens but its refresh token. 404 while sign-in is off, 400 `sign_in_refused` naming the issuer's
    error, 502 when the issuer fails."""
    if not enabled(settings) or settings.oidc_issuer is None or settings.oidc_client_id is None:
        return sign_in_off()
    form = {
        "grant_type": "authorization_code",
        "code": body.code,
        "code_verifier": body.code_verifier,
        "redirect_uri": body.redirect_uri,
    }
    headers = {"Accept": "application/json"}
    if settings.oidc_client_secret is None:
        form["client_id"] = settings.oidc_client_id  # a public client
    else:
        headers["Authorization"] = basic_credentials(settings.oidc_client_id, settings.oidc_client_secret)
    try:
        endpoint = (await discover(client, settings.oidc_issuer))["token_endpoint"]
        try:
            response = await client.post(endpoint, data=form, headers=headers)
        except httpx.HTTPError as exc:
            raise IssuerError(f"{endpoint} cannot be reached: {type(exc).__name__}") from exc
        answer = issuer_json(response)
    except IssuerError as exc:
        return unavailable(exc)
    if 400 <= response.status_code < 500:
        reason = " ".join(str(answer.get(k, "")) for k in ("error", "error_description")).strip() or "no reason given"
        return error_json(400, "sign_in_refused", f"the issuer refused the code: {reason}")
    if response.status_code != 200 or not isinstance(answer.get("id_token"), str):
        return unavailable(IssuerError(f"{endpoint} answered HTTP {response.status_code} without an ID token"))
    return JSONResponse({k: answer[k] for k in TOKEN_FIELDS if k in answer}, headers={"Cache-Control": "no-store"})
