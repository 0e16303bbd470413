"""Bearer tokens of an OpenID Connect issuer (`OIDC_ISSUER`): who signed in, and in which groups.

`OidcVerifier.verify(token)` checks a JWT the way the issuer's clients are told to: the issuer's discovery document
(`<issuer>/.well-known/openid-configuration`, whose `issuer` must be `OIDC_ISSUER` exactly) names its signing keys
(`jwks_uri`), read with httpx and kept `OIDC_JWKS_CACHE_S` seconds (a token naming a key not among them reads them
again, at most every `KEY_REFETCH_S` seconds); PyJWT checks the signature with the algorithm pinned to
`OIDC_ALGORITHMS` (never `none`, never HS*: an HS256 token "signed" with the issuer's public key is refused before
any key is looked at), the audience (`OIDC_AUDIENCE`, else `OIDC_CLIENT_ID`), the issuer, `exp`, `iat` and `nbf`
within `OIDC_LEEWAY_S`, and requires `exp`, `iat` and `sub`. A token it accepts is an `Identity` (its `sub` and the
groups of `OIDC_GROUPS_CLAIM`, a dotted path: `groups_of`); one it refuses raises `TokenRefused` with one line of
reason. An issuer it cannot read raises `agent.core.errors.IssuerUnavailableError` (503: the token was not judged).
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
import jwt

from agent.config.settings import Settings
from agent.core.errors import IssuerUnavailableError

KEY_REFETCH_S = 10.0
"""Least time between two reads of the JWKS for tokens naming unknown keys, seconds: a flood of tokens with made-up
`kid`s costs the issuer one request per this interval at most."""

FETCH_TIMEOUT_S = 5.0
"""Bound on one request to the issuer (discovery document or JWKS), seconds."""

REQUIRED_CLAIMS = ("exp", "iat", "sub")
"""Claims every accepted token carries."""

_JWT = re.compile(r"^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*$")

log = logging.getLogger(__name__)


class TokenRefused(Exception):  # noqa: N818 - a refusal, not a fault
    """A bearer token is not accepted; `str(exc)` is one line saying why (sent back as the 401's detail and in its
    `WWW-Authenticate` header: printable ASCII without quotes or backslashes, whatever the token held)."""

    def __init__(self, reason: str) -> None:
        super().__init__(_one_line(reason))


@dataclass(frozen=True)
class Identity:
    """A signed-in user.

    Attributes:
        subject: the token's `sub` (the issuer's stable id of the user).
        groups: the groups of `OIDC_GROUPS_CLAIM`, sorted, without duplicates; empty when the claim is absent.
    """

    subject: str
    groups: tuple[str, ...]


def looks_like_jwt(token: str) -> bool:
    """Whether a bearer token has the form of a signed JWT: three base64url parts joined by dots (an API key never
    has)."""
    return bool(_JWT.match(token))


def claim_at(claims: Mapping[str, Any], path: str) -> object:
    """The value at the dotted `path` of `claims` (`realm_access.roles`: `claims["realm_access"]["roles"]`); a key
    holding the whole path (a claim named with dots, e.g. Auth0's URL-like names) wins. None when absent."""
    if path in claims:
        return claims[path]
    value: object = claims
    for part in path.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return value


def groups_of(claims: Mapping[str, Any], path: str) -> tuple[str, ...]:
    """The groups a token's `claims` carry at `path` (`claim_at`): a list's strings (other items are skipped), or
    one group for a string; sorted, de-duplicated, blanks dropped. Absent or any other type: none."""
    value = claim_at(claims, path)
    items: Sequence[object] = [value] if isinstance(value, str) else value if isinstance(value, list) else []
    return tuple(sorted({item.strip() for item in items if isinstance(item, str) and item.strip()}))


def _one_line(text: str, limit: int = 200) -> str:
    """`text` on one line of printable ASCII without quotes or backslashes (it goes into a `WWW-Authenticate`
    header), at most `limit` characters."""
    cleaned = "".join(ch if " " <= ch <= "~" and ch not in '"\\' else "?" for ch in " ".join(text.split()))
    return cleaned[:limit]


def _unverified_header(token: str) -> dict[str, Any]:
    """The JOSE header of `token`, unverified.

    Raises:
        TokenRefused: not a JWT, or a header that is not base64url JSON (an object).
    """
    if not looks_like_jwt(token):
        raise TokenRefused("malformed token: expected a JWT (three base64url parts)")
    try:
        header: dict[str, Any] = jwt.get_unverified_header(token)  # PyJWT: an object, or DecodeError
    except jwt.DecodeError:
        raise TokenRefused("malformed token: its header is not base64url JSON") from None
    return header


@dataclass
class _KeySet:
    """The issuer's signing keys as read, and when (monotonic seconds)."""

    keys: list[dict[str, Any]]
    read_at: float


class OidcVerifier:
    """Checks the bearer tokens of one issuer (module docstring); one per app, shared by its requests.

    Args:
        issuer: `OIDC_ISSUER`, compared byte for byte with the discovery document's and each token's `iss`.
        audience: the `aud` a token must name.
        algorithms: the signature algorithms accepted (asymmetric; `Settings` refuses others).
        groups_claim: `OIDC_GROUPS_CLAIM` (a dotted path).
        leeway_s: clock skew allowed on the time claims, seconds.
        jwks_cache_s: how long the keys read are trusted, seconds.
        transport: httpx transport for the requests to the issuer (tests); default: the network.
        clock: monotonic seconds (tests).
    """

    def __init__(
        self,
        issuer: str,
        audience: str,
        algorithms: Sequence[str],
        groups_claim: str = "groups",
        leeway_s: float = 30.0,
        jwks_cache_s: float = 300.0,
        transport: httpx.AsyncBaseTransport | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.issuer = issuer
        self.audience = audience
        self.algorithms = tuple(algorithms)
        self.groups_claim = groups_claim
        self.leeway_s = leeway_s
        self.jwks_cache_s = jwks_cache_s
        self._transport = transport
        self._clock = clock
        self._jwks_uri: str | None = None
        self._keys: _KeySet | None = None
        self._built: dict[tuple[str | None, str], tuple[dict[str, Any], jwt.PyJWK]] = {}
        """(kid, alg) -> the JWK read and its key, built once per JWK read."""
        self._lock = asyncio.Lock()

    @classmethod
    def from_settings(cls, settings: Settings) -> OidcVerifier | None:
        """The verifier `settings` describe; None when `OIDC_ISSUER` is unset (sign-in off)."""
        audience = settings.oidc_token_audience
        if settings.oidc_issuer is None or audience is None:
            return None
        return cls(
            settings.oidc_issuer,
            audience,
            settings.oidc_algorithms,
            settings.oidc_groups_claim,
            settings.oidc_leeway_s,
            settings.oidc_jwks_cache_s,
        )

    async def verify(self, token: str) -> Identity:
        """The signed-in user `token` stands for.

        Raises:
            TokenRefused: the token is not accepted (one line: malformed, alg none, a shared-secret algorithm, an
                algorithm not in OIDC_ALGORITHMS, unknown key, bad signature, expired, wrong audience, wrong issuer,
                a required claim missing, not yet valid).
            IssuerUnavailableError: the issuer's discovery document or keys could not be read (503).
        """
        header = _unverified_header(token)
        alg = header.get("alg")
        if not isinstance(alg, str) or not alg:
            raise TokenRefused("malformed token: its header names no algorithm (alg)")
        if alg.lower() == "none":
            raise TokenRefused("unsigned token (alg none) refused")
        if alg.upper().startswith("HS"):
            raise TokenRefused(
                f"token signed with {alg}, a shared-secret algorithm; the issuer signs with a private key"
            )
        if alg not in self.algorithms:
            raise TokenRefused(f"token algorithm {alg} is not one of OIDC_ALGORITHMS ({', '.join(self.algorithms)})")
        kid = header.get("kid")
        if kid is not None and not isinstance(kid, str):
            raise TokenRefused("malformed token: its key id (kid) is not text")
        key = await self._key(kid, alg)
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key=key,
                algorithms=[alg],
                audience=self.audience,
                issuer=self.issuer,
                leeway=self.leeway_s,
                options={"require": list(REQUIRED_CLAIMS)},
            )
        except jwt.InvalidSignatureError:
            raise TokenRefused("bad signature: the token was not signed by the issuer's key") from None
        except jwt.ExpiredSignatureError:
            raise TokenRefused("token expired") from None
        except jwt.InvalidAudienceError:
            raise TokenRefused(f"wrong audience: the token is not for {self.audience}") from None
        except jwt.InvalidIssuerError:
            raise TokenRefused(f"wrong issuer: the token is not from {self.issuer}") from None
        except jwt.MissingRequiredClaimError as exc:
            raise TokenRefused(f"token lacks the required claim {exc.claim}") from None
        except jwt.ImmatureSignatureError:
            raise TokenRefused("token not valid yet (iat or nbf in the future)") from None
        except jwt.DecodeError as exc:
            raise TokenRefused(f"malformed token: {exc}") from None
        except jwt.InvalidTokenError as exc:
            raise TokenRefused(f"token refused: {exc}") from None
        subject = claims.get("sub")
        if not isinstance(subject, str) or not subject:
            raise TokenRefused("token lacks the required claim sub")
        return Identity(subject, groups_of(claims, self.groups_claim))

    async def _key(self, kid: str | None, alg: str) -> jwt.PyJWK:
        """The issuer's key `kid` (the only key when the token names none) for `alg`, read again once when unknown.

        Raises:
            TokenRefused: no such key, or a key that does not fit `alg`.
            IssuerUnavailableError: the keys could not be read.
        """
        found = _find(await self._keys_read(), kid)
        if found is None:
            found = _find(await self._keys_read(unknown_key=True), kid)
        if found is None:
            named = f"kid {kid!r}" if kid is not None else "no kid, and the issuer has several keys"
            raise TokenRefused(f"unknown signing key ({named})")
        declared = found.get("alg")
        if declared is not None and declared != alg:
            raise TokenRefused(f"token algorithm {alg} does not match its key's ({declared})")
        built = self._built.get((kid, alg))
        if built is None or built[0] is not found:
            try:
                built = (found, jwt.PyJWK(found, algorithm=alg))
            except jwt.PyJWTError as exc:
                raise TokenRefused(f"the issuer's key does not fit algorithm {alg} ({exc})") from None
            self._built[(kid, alg)] = built
        return built[1]

    async def _keys_read(self, unknown_key: bool = False) -> list[dict[str, Any]]:
        """The issuer's signing keys (JWK objects): those read within `jwks_cache_s`, else read now; with
        `unknown_key`, read now unless read within `KEY_REFETCH_S`. Keys read before are kept when a new read fails.

        Raises:
            IssuerUnavailableError: the keys cannot be read and none were read before.
        """
        async with self._lock:
            now = self._clock()
            cached = self._keys
            fresh_for = KEY_REFETCH_S if unknown_key else self.jwks_cache_s
            if cached is not None and now - cached.read_at < fresh_for:
                return cached.keys
            try:
                keys = await self._read_keys()
            except IssuerUnavailableError:
                if cached is None:
                    raise
                log.warning("the issuer's keys could not be read again; using those read before", exc_info=True)
                cached.read_at = now  # try again after the interval, not on every request
                return cached.keys
            self._keys = _KeySet(keys, now)
            return keys

    async def _read_keys(self) -> list[dict[str, Any]]:
        """Read the discovery document (once) and the JWKS.

        Raises:
            IssuerUnavailableError: either could not be read, or the document names another issuer.
        """
        async with httpx.AsyncClient(transport=self._transport, timeout=FETCH_TIMEOUT_S) as http:
            if self._jwks_uri is None:
                discovery = await _get_json(http, self.issuer.rstrip("/") + "/.well-known/openid-configuration")
                if discovery.get("issuer") != self.issuer:
                    raise IssuerUnavailableError(
                        f"the issuer's discovery document names issuer {discovery.get('issuer')!r}, not OIDC_ISSUER "
                        f"{self.issuer!r}: set OIDC_ISSUER to the document's issuer"
                    )
                jwks_uri = discovery.get("jwks_uri")
                if not isinstance(jwks_uri, str) or not jwks_uri:
                    raise IssuerUnavailableError("the issuer's discovery document names no jwks_uri")
                self._jwks_uri = jwks_uri
            jwks = await _get_json(http, self._jwks_uri)
        keys = jwks.get("keys")
        if not isinstance(keys, list):
            raise IssuerUnavailableError(f"the issuer's JWKS ({self._jwks_uri}) has no `keys` list")
        return [key for key in keys if isinstance(key, dict) and key.get("use", "sig") == "sig"]


def _find(keys: list[dict[str, Any]], kid: str | None) -> dict[str, Any] | None:
    """The key `kid` of `keys`; for a token without `kid`, the only key. None when there is none."""
    if kid is None:
        return keys[0] if len(keys) == 1 else None
    return next((key for key in keys if key.get("kid") == kid), None)


async def _get_json(http: httpx.AsyncClient, url: str) -> dict[str, Any]:
    """The JSON object at `url`.

    Raises:
        IssuerUnavailableError: unreachable, not 200, or not a JSON object.
    """
    try:
        response = await http.get(url, headers={"Accept": "application/json"})
        response.raise_for_status()
        body = response.json()
    except (httpx.HTTPError, ValueError) as exc:
        raise IssuerUnavailableError(
            _one_line(f"the sign-in issuer cannot be read at {url} ({type(exc).__name__}: {exc})", 300)
        ) from None
    if not isinstance(body, dict):
        raise IssuerUnavailableError(f"the sign-in issuer's answer at {url} is not a JSON object")
    return body
