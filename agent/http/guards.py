"""Checks `rag serve` makes on every HTTP request before routing or parsing anything (pure ASGI middleware).

In the order a request meets them (`install_guards`):

1. `HostGuard`: the `Host` header must name a host in `ALLOWED_HOSTS` (else 400 `host_not_allowed`). A web page
   that rebinds its own DNS name to 127.0.0.1 sends its own name as `Host`, so a local server that answers only its
   own names cannot be driven from a browser tab.
2. `CrossSiteGuard`: a state-changing request (any method but GET, HEAD, OPTIONS) that a browser sent from another
   site is refused with 403 `forbidden_origin`: `Sec-Fetch-Site: cross-site` or `same-site` (another port of
   localhost is the same site), or an `Origin` that is not the server's own (the `Host` header's host and port;
   `null` included). A page elsewhere can send a form or a `fetch(mode: "no-cors")` to a keyless server on 127.0.0.1; it
   cannot hide where it comes from. Clients that are not browsers send neither header. Every response also forbids
   framing (`X-Frame-Options: DENY`, CSP `frame-ancestors 'none'`) and type sniffing (`X-Content-Type-Options:
   nosniff`).
3. `BearerKeyGuard`: with `API_KEY` set, `Authorization: Bearer <key>` on every path but the open ones (`/health`,
   `/metrics`, the page `/`, its static files and its sign-in routes under `/auth`), else 401 `unauthorized` with
   `WWW-Authenticate: Bearer`. The raw header bytes are compared with the key's UTF-8 bytes in constant time
   (`secrets.compare_digest`), before any body is read, so an unauthenticated request never costs a body read or a
   JSON parse. Once API keys exist (`agent.core.keys`,
   the app's `state.keys`) a key is needed even without `API_KEY`. A token of the keys table (`rag_...`) is looked up
   here too (`KeyRing.holder`, cached by `CachedKeys`), so a made-up one is refused before its body is read; an active
   key's holder is passed on only to the paths whose routes scope it to its collections (`CALLER_PATHS`, the `Caller`
   dependency), with its key in `scope["state"]` (`HOLDER_STATE`) for the quotas (`agent.http.quota_gate`); every other
   path stays the admin key's. With `OIDC_ISSUER` set, a bearer that is a JWT on `CALLER_PATHS` is checked here by the
   app's `agent.core.oidc.OidcVerifier` (401 with `WWW-Authenticate: Bearer error="invalid_token"` and the reason, or
   503 `issuer_unavailable`), and a request without credentials is 401 even while no API key exists.
4. `BodyLimit`: a body over `MAX_BODY_BYTES` gets 413 `payload_too_large`: at once when `Content-Length` announces
   it, and as soon as a streamed (chunked) body passes the limit, whatever the application was doing with it. File
   uploads get their own, larger limit (`UPLOAD_MAX_REQUEST_BYTES` under `/v1/documents/files`); JSON documents
   (`POST /v1/documents`) the bytes `DOCUMENTS_MAX_TEXT_CHARS` characters can take as JSON (`documents_body_bytes`),
   so a body their character limit would refuse is never read or parsed.

Every refusal has the API's error shape `{"error": kind, "detail": message}`.
"""

from __future__ import annotations

import ipaddress
import logging
import secrets
from collections.abc import Iterable, Sequence
from typing import Any
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agent.config.settings import Settings, SettingsError
from agent.core.errors import IssuerUnavailableError
from agent.core.keys import TOKEN_PREFIX, ApiKey, KeyRing
from agent.core.oidc import TokenRefused, looks_like_jwt
from agent.http.errors import error_json, error_response, failure_of
from agent.http.state import scope_state

OPEN_PATHS = frozenset(
    {
        *("/health", "/ready", "/metrics", "/metrics/", "/", "/web/page.js", "/web/page.css"),
        *("/.well-known/agent-card.json", "/a2a/.well-known/agent-card.json"),
        *("/auth/config", "/auth/discovery", "/auth/token"),
    }
)
"""Paths served without the API key: the readiness check, Prometheus' scrape, the web page with its script and
style sheet (the page asks for the key itself), the A2A agent card (discovery; `agent.http.a2a`) and the page's
sign-in through an issuer (`agent.http.auth_routes`: nobody is signed in yet)."""

LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")
"""`ALLOWED_HOSTS` of a server listening on a loopback address when the setting is unset."""

log = logging.getLogger(__name__)


def is_loopback(bind_host: str) -> bool:
    """True when `bind_host` (an interface `rag serve --host` listens on) is reachable only from this machine."""
    if bind_host.strip("[]").lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(bind_host.strip("[]")).is_loopback
    except ValueError:  # a host name other than localhost
        return False


def allowed_hosts_for(settings: Settings, bind_host: str) -> tuple[str, ...]:
    """The host names a server listening on `bind_host` answers: `ALLOWED_HOSTS` when set, else this machine's
    names (`LOOPBACK_HOSTS`) on a loopback address, else any host (`*`)."""
    if settings.allowed_hosts is not None:
        return settings.allowed_hosts
    return LOOPBACK_HOSTS if is_loopback(bind_host) else ("*",)


def require_key_off_loopback(settings: Settings, bind_host: str) -> None:
    """Refuse to serve beyond this machine when nothing authenticates the callers: neither an admin key nor a
    sign-in issuer (with `OIDC_ISSUER` set every request needs an issuer's token or an API key, `BearerKeyGuard`).

    Raises:
        SettingsError: `bind_host` is not a loopback address (e.g. `0.0.0.0`) and both `API_KEY` and
            `OIDC_ISSUER` are unset.
    """
    if settings.api_key is None and settings.oidc_issuer is None and not is_loopback(bind_host):
        raise SettingsError(
            f"--host {bind_host} accepts connections from other machines but API_KEY is unset (and no sign-in "
            f"issuer, OIDC_ISSUER): set API_KEY or OIDC_ISSUER, or listen on 127.0.0.1 (the default)"
        )


def _host_of(value: str | None) -> str | None:
    """The lower-cased host name of a `Host` header (`name`, `name:port`, `[::1]:8080`), None when malformed."""
    if not value:
        return None
    try:
        host = urlsplit(f"//{value}").hostname
    except ValueError:
        return None
    return host.lower() if host else None


def host_allowed(host: str, patterns: Iterable[str]) -> bool:
    """Whether `host` (lower case, no port) matches a pattern: the same name, `*.example.com` for a subdomain of
    example.com, or `*` for any host (the matching of Starlette's `TrustedHostMiddleware`)."""
    for pattern in patterns:
        pattern = pattern.lower().strip("[]")
        if pattern == "*" or host == pattern or (pattern.startswith("*.") and host.endswith(pattern[1:])):
            return True
    return False


def origin_allowed(origin: str, host_header: str | None, allowed_hosts: Sequence[str]) -> bool:
    """Whether a browser page from `origin` (the `Origin` header, e.g. `https://app.example.com`) may call `/mcp`:
    the same host and port as the request's `Host` header, or a host `ALLOWED_HOSTS` names (`*` names none here:
    it lets any `Host` in, not any page)."""
    try:
        parts = urlsplit(origin)
        origin_host, port = (parts.hostname or "").lower(), parts.port
    except ValueError:
        return False
    if not origin_host or parts.scheme not in ("http", "https"):
        return False  # `null` (a sandboxed page, a file), or no origin a server could hold
    host = urlsplit(f"//{host_header}") if host_header else None
    default_port = 443 if parts.scheme == "https" else 80
    if host is not None and host.hostname == origin_host and (host.port or default_port) == (port or default_port):
        return True
    return host_allowed(origin_host, [p for p in allowed_hosts if p != "*"])


class HostGuard:
    """Answers 400 `host_not_allowed` unless the request's `Host` header matches `allowed_hosts`."""

    def __init__(self, app: ASGIApp, allowed_hosts: Sequence[str]) -> None:
        for pattern in allowed_hosts:
            if "*" in pattern[1:] or (pattern.startswith("*") and pattern != "*" and not pattern.startswith("*.")):
                raise SettingsError(f"ALLOWED_HOSTS entry {pattern!r}: expected a name, `*.example.com` or `*`")
        self.app = app
        self.allowed_hosts = tuple(allowed_hosts)
        self.allow_any = "*" in self.allowed_hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on, or refuse it."""
        if self.allow_any or scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        raw = Headers(scope=scope).get("host")
        host = _host_of(raw)
        if host is None or not host_allowed(host, self.allowed_hosts):
            detail = f"Host {raw!r} is not served here; expected one of ALLOWED_HOSTS ({', '.join(self.allowed_hosts)})"
            await error_json(400, "host_not_allowed", detail)(scope, receive, send)
            return
        await self.app(scope, receive, send)


SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
"""Methods that change nothing: never refused for where they come from."""

SECURITY_HEADERS = [
    (b"x-frame-options", b"DENY"),
    (b"content-security-policy", b"frame-ancestors 'none'"),
    (b"x-content-type-options", b"nosniff"),
]
"""Sent with every response: no page of another site may frame ours (clickjacking), no body is type-sniffed."""


class CrossSiteGuard:
    """Answers 403 `forbidden_origin` to a state-changing request a browser sent from another site (module
    docstring), and adds `SECURITY_HEADERS` to every response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on with the headers added, or refuse it."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def secured_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                present = {name.lower() for name, _ in message.get("headers", [])}
                extra = [(n, v) for n, v in SECURITY_HEADERS if n not in present]
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        if scope["method"] not in SAFE_METHODS and (why := self._cross_site(Headers(scope=scope))) is not None:
            await error_json(403, "forbidden_origin", why)(scope, receive, secured_send)
            return
        await self.app(scope, receive, secured_send)

    def _cross_site(self, headers: Headers) -> str | None:
        """Why the request comes from another site, or None."""
        site = headers.get("sec-fetch-site", "").lower()
        if site in ("cross-site", "same-site"):
            return (
                f"a {site} request from a web page (Sec-Fetch-Site); this server changes nothing for other sites' "
                "pages: use its own page, or a client that is not a browser"
            )
        origin = headers.get("origin")
        if origin is not None and not origin_allowed(origin, headers.get("host"), ()):
            return f"Origin {origin!r} is not this server's own: other sites' pages change nothing here"
        return None


def key_matches(authorization: bytes | None, key: bytes) -> bool:
    """Whether the raw `Authorization` header bytes are `Bearer <key>` (scheme case-insensitive; the token is
    compared byte for byte, in constant time, with `key`: the API key's UTF-8 bytes)."""
    if not authorization:
        return False
    scheme, _, token = authorization.strip().partition(b" ")
    return scheme.lower() == b"bearer" and secrets.compare_digest(token.strip(), key)


CALLER_PATHS = (
    "/v1/ask",
    "/v1/documents",
    "/v1/collections",
    "/v1/jobs",
    "/v1/chat/completions",
    "/v1/models",
    "/v1/conversations",
    "/v1/usage",
    "/v1/feedback",
    "/mcp",
    "/a2a",
    "/openapi.json",
    "/docs",
)
"""Path prefixes whose routes identify key holders (`agent.http.deps.Caller`; MCP's `agent.http.mcp.CallerGate`) and
scope them to their collections (A2A's `agent.http.a2a.A2aGate`)."""


def caller_path(path: str) -> bool:
    """Whether `path` is one of `CALLER_PATHS` or under one."""
    return any(path == p or path.startswith(p + "/") for p in CALLER_PATHS)


def _app_keys(scope: Scope) -> KeyRing | None:
    """The app's API keys (`AppState.keys`, an `agent.core.keys.KeyRing` opened by its lifespan); None without them."""
    state = scope_state(scope)
    return None if state is None else state.keys


async def keys_exist(scope: Scope) -> bool:
    """Whether the app's API keys (`AppState.keys`, opened by its lifespan) hold any key."""
    keys = _app_keys(scope)
    return keys is not None and bool(await keys.any_keys())


HOLDER_STATE = "api_key_holder"
"""The key of `scope["state"]` (Starlette's `request.state`) where `BearerKeyGuard` leaves the active key
(`tools.store.keys.ApiKey`) of a key holder's request, for what runs inside it (`agent.http.quota_gate`)."""


async def active_holder(scope: Scope, authorization: bytes | None) -> ApiKey | None:
    """The active key of the app's API keys whose token the `Authorization` header holds (one look-up by its hash,
    remembered by `CachedKeys`); None without keys.

    Raises:
        Whatever the keys raise when they cannot be read (`tools.store` errors).
    """
    keys = _app_keys(scope)
    if keys is None:
        return None
    # Starlette decodes header bytes as latin-1 (as `agent.http.deps.get_caller` reads the token)
    token = (authorization or b"").strip().partition(b" ")[2].strip().decode("latin-1")
    key: ApiKey | None = await keys.holder(token)
    return key


def holder_token(authorization: bytes | None) -> bool:
    """Whether the raw `Authorization` header is `Bearer rag_...`: a token of the API keys table (`agent.core.keys`),
    checked by the routes' `Caller` dependency."""
    scheme, _, token = (authorization or b"").strip().partition(b" ")
    return scheme.lower() == b"bearer" and token.strip().startswith(TOKEN_PREFIX.encode())


SUBJECT_STATE = "signed_in_subject"
"""The key of `scope["state"]` where `BearerKeyGuard` leaves the subject (`sub`) of a signed-in user's accepted token,
for admission control's fair share (`agent.http.admission_gate.tenant_of`)."""


def invalid_token_headers(reason: str) -> dict[str, str]:
    """The `WWW-Authenticate` header of a 401 for a refused sign-in token (RFC 6750 `invalid_token`, with `reason`:
    one line of printable ASCII without quotes, `agent.core.oidc.TokenRefused`)."""
    return {"WWW-Authenticate": f'Bearer error="invalid_token", error_description="{reason}"'}


def bearer_jwt(authorization: bytes | None) -> str | None:
    """The token of a raw `Authorization: Bearer <token>` header when it has the form of a JWT
    (`agent.core.oidc.looks_like_jwt`), else None."""
    scheme, _, token = (authorization or b"").strip().partition(b" ")
    text = token.strip().decode("latin-1")
    return text if scheme.lower() == b"bearer" and looks_like_jwt(text) else None


async def token_refused(scope: Scope, receive: Receive, send: Send, token: str) -> bool:
    """Check a sign-in token of a request on `CALLER_PATHS` with the app's `OidcVerifier` before its body is read;
    True once a refusal has been answered: 401 `unauthorized` (`invalid_token_headers`, the reason as the detail),
    or the app's error answer (503 `issuer_unavailable`) when the issuer cannot be read. An accepted token's subject
    is left in `scope["state"]` (`SUBJECT_STATE`)."""
    state = scope_state(scope)
    oidc = None if state is None else state.oidc
    if oidc is None:
        return False
    try:
        identity = await oidc.verify(token)
    except TokenRefused as exc:
        await error_json(401, "unauthorized", str(exc), invalid_token_headers(str(exc)))(scope, receive, send)
        return True
    except IssuerUnavailableError as exc:
        await error_response(failure_of(exc))(scope, receive, send)
        return True
    scope.setdefault("state", {})[SUBJECT_STATE] = identity.subject
    return False


class BearerKeyGuard:
    """Answers 401 `unauthorized` unless the request carries `Authorization: Bearer <key>` (or, on `CALLER_PATHS`, a
    token of the keys table, or with `signin` a sign-in token the app's `OidcVerifier` accepts), on every path but
    `open_paths`; `key` None lets everything through while no API key exists and `signin` is off."""

    def __init__(
        self, app: ASGIApp, key: str | None, open_paths: frozenset[str] = OPEN_PATHS, signin: bool = False
    ) -> None:
        self.app = app
        self.key = key.encode("utf-8") if key is not None else None
        self.open_paths = open_paths
        self.signin = signin

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on, or refuse it before its body is read."""
        if scope["type"] != "http" or scope["path"] in self.open_paths:
            await self.app(scope, receive, send)
            return
        given = next((v for k, v in scope["headers"] if k.lower() == b"authorization"), None)
        if self.key is not None and key_matches(given, self.key):
            await self.app(scope, receive, send)
            return
        token = bearer_jwt(given) if self.signin and caller_path(scope["path"]) else None
        if token is not None:  # a sign-in token: its route's `Caller` makes it a caller (grants of its groups)
            if not await token_refused(scope, receive, send, token):
                await self.app(scope, receive, send)
            return
        try:
            holder = await active_holder(scope, given) if holder_token(given) and caller_path(scope["path"]) else None
            open_server = holder is None and self.key is None and not self.signin and not await keys_exist(scope)
        except Exception as exc:  # noqa: BLE001 (the keys cannot be read: refuse, retryable)
            detail = f"the API keys cannot be read ({type(exc).__name__}); try again"
            await error_json(503, "postgres_unavailable", detail, {"Retry-After": "5"})(scope, receive, send)
            return
        if holder is None and not open_server:  # a holder's route `Caller` scopes it to its collections
            headers = {"WWW-Authenticate": "Bearer"}
            await error_json(401, "unauthorized", "missing, wrong or revoked API key", headers)(scope, receive, send)
            return
        if holder is not None:
            scope.setdefault("state", {})[HOLDER_STATE] = holder
        await self.app(scope, receive, send)


class BodyTooLargeError(Exception):
    """A streamed request body passed the limit (raised from `receive` into the application)."""


class BodyLimit:
    """Answers 413 `payload_too_large` for a body over its path's limit: before reading when `Content-Length` says
    so, else as soon as the streamed body passes the limit (the application's own response is then replaced).

    Args:
        max_bytes: the limit of every path (`MAX_BODY_BYTES`).
        path_limits: `(path prefix, bytes, setting name)` for paths with a limit of their own (uploads); the longest
            matching prefix wins.
    """

    def __init__(self, app: ASGIApp, max_bytes: int, path_limits: Sequence[tuple[str, int, str]] = ()) -> None:
        for name, value in (("MAX_BODY_BYTES", max_bytes), *((n, v) for _, v, n in path_limits)):
            if value < 1:
                raise SettingsError(f"{name}={value}; expected at least 1 byte")
        self.app = app
        self.max_bytes = max_bytes
        self.path_limits = sorted(path_limits, key=lambda limit: -len(limit[0]))

    def limit_of(self, path: str) -> tuple[int, str]:
        """The body limit of `path` in bytes and the setting that sets it."""
        for prefix, limit, name in self.path_limits:
            if path == prefix or path.startswith(prefix.rstrip("/") + "/"):
                return limit, name
        return self.max_bytes, "MAX_BODY_BYTES"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on with a counting `receive`, or refuse it."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        max_bytes, setting = self.limit_of(scope["path"])
        detail = f"the request body is larger than {max_bytes} bytes ({setting})"
        refusal = error_json(413, "payload_too_large", detail, {"Connection": "close"})
        length = Headers(scope=scope).get("content-length")
        if length is not None and length.isdigit() and int(length) > max_bytes:
            await refusal(scope, receive, send)
            return
        received = 0
        too_large = False
        started = False

        async def counting_receive() -> Message:
            nonlocal received, too_large
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > max_bytes:
                    too_large = True
                    raise BodyTooLargeError(f"request body over {max_bytes} bytes ({setting})")
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if too_large:  # the application's answer to the aborted read is replaced by the 413
                return
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counting_receive, guarded_send)
        except Exception:
            if not too_large:
                raise
        if too_large and not started:
            await refusal(scope, receive, send)


UPLOAD_PATHS = ("/v1/documents/files",)
"""Path prefixes that take file uploads (multipart), limited by `UPLOAD_MAX_REQUEST_BYTES`."""

DOCUMENTS_PATH = "/v1/documents"
"""The JSON documents route (`POST /v1/documents`), limited by `documents_body_bytes`."""

JSON_BYTES_PER_CHAR = 12
"""Most bytes one character of a JSON string can take: an astral character escaped as a surrogate pair
(`\\ud83d\\ude00`), as `json.dumps` writes it by default."""


def documents_body_bytes(settings: Settings) -> int:
    """The largest `POST /v1/documents` body worth reading: `DOCUMENTS_MAX_TEXT_CHARS` characters of titles and
    texts at the most bytes JSON can spell them with (`JSON_BYTES_PER_CHAR`), plus `MAX_BODY_BYTES` for ids,
    sources, metadata and the JSON around them. A larger body would be refused for its characters anyway
    (`agent.http.documents.check_size`), so it is refused before it is read or parsed."""
    return settings.max_body_bytes + JSON_BYTES_PER_CHAR * settings.documents_max_text_chars


def body_limits(settings: Settings) -> list[tuple[str, int, str]]:
    """`BodyLimit`'s `path_limits`: `UPLOAD_MAX_REQUEST_BYTES` under `UPLOAD_PATHS`, `documents_body_bytes` for the
    JSON documents route (and the bodyless routes under it)."""
    uploads = [(path, settings.upload_max_request_bytes, "UPLOAD_MAX_REQUEST_BYTES") for path in UPLOAD_PATHS]
    return [*uploads, (DOCUMENTS_PATH, documents_body_bytes(settings), "DOCUMENTS_MAX_TEXT_CHARS")]


def install_guards(app: Any, settings: Settings, allowed_hosts: Sequence[str]) -> None:
    """Add the guards to a Starlette/FastAPI `app` (outermost first: host, other sites' pages, API key, body size:
    `MAX_BODY_BYTES`, and `body_limits` for the documents routes).

    Args:
        allowed_hosts: host patterns to answer (`allowed_hosts_for`); `("*",)` answers any host.
    """
    key = settings.api_key.get_secret_value() if settings.api_key is not None else None
    # add_middleware puts each new middleware outside the ones added before it
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes, path_limits=body_limits(settings))
    app.add_middleware(BearerKeyGuard, key=key, signin=settings.oidc_issuer is not None)
    app.add_middleware(CrossSiteGuard)
    app.add_middleware(HostGuard, allowed_hosts=tuple(allowed_hosts))
