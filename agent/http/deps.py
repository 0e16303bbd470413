"""What the routes depend on, as FastAPI dependencies: the app's `RagApp`, its `Settings`, its API keys, the caller
(who holds which key, and so which collections it may use: `Caller`, also for mounted ASGI apps through
`request_caller`), the admin-key guard (`API_KEY`), a place in admission control (`Admitted`).

`create_app` keeps one typed `AppState` on the app (`app_state`): the settings at creation, the opened `RagApp` and its
API keys and quotas (`agent.core.keys`, `agent.core.quotas`) in its lifespan; only `app_state` reads `app.state`, for
the routes' dependencies and the middlewares alike. Tests replace the dependencies with
`app.dependency_overrides[get_rag] = lambda: rag` (and `get_keys` for keys of their own), or set `app_state(app)`'s
fields.

Who the caller is (`get_caller`): a bearer token equal to `API_KEY` is the admin (every collection); a token of an
active key in `api_keys` is that key's holder (its collections only; `key_caller`: a key tied to a group reads that
group's documents with the roles granted to it, any other key the public documents of its collections); with neither
`API_KEY` set nor any key ever created, every request is the admin (no auth, as before keys existed). Anything else is
401. So once a key exists, requests need a key even without `API_KEY`. With sign-in on (`OIDC_ISSUER`,
`agent.core.oidc`), a bearer that is a JWT is a signed-in user: its collections and roles those its groups are granted
(`AppState.grants`), its access its groups'; a refused token is 401 with its reason, and every request needs a token
or a key.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import SecretStr
from starlette.exceptions import HTTPException
from starlette.types import Receive, Scope, Send

from agent.config.settings import Settings
from agent.core.admission import Ticket
from agent.core.app import RagApp
from agent.core.errors import InputError
from agent.core.keys import ApiKey, KeyRing
from agent.core.oidc import OidcVerifier, TokenRefused, looks_like_jwt
from agent.http.admission_gate import request_ticket
from agent.http.errors import ApiError, error_json, error_response, failure_of
from agent.http.guards import invalid_token_headers
from agent.http.state import STATE, AppState, app_state, scope_state
from tools.access import PUBLIC_GROUP, UNRESTRICTED, Access, GrantBook, Role, caller_access
from tools.scope import DEFAULT_COLLECTION, ScopeError, SearchScope, check_collection

__all__ = ["STATE", "AppState", "app_state", "scope_state"]  # the app's typed state (`agent.http.state`), re-exported


def opened_rag(app: Any) -> RagApp:
    """The `RagApp` the lifespan of `app` opened.

    Raises:
        RuntimeError: the lifespan has not opened it.
    """
    rag = app_state(app).rag
    if rag is None:
        raise RuntimeError("the app's lifespan has not opened its RagApp")
    return rag


def get_rag(request: Request) -> RagApp:
    """The `RagApp` the app's lifespan opened (`opened_rag`)."""
    return opened_rag(request.app)


def get_settings(request: Request) -> Settings:
    """The settings the app was created with."""
    return app_state(request.app).settings


Rag = Annotated[RagApp, Depends(get_rag)]
"""A route parameter of this type receives the app's `RagApp`."""
AppSettings = Annotated[Settings, Depends(get_settings)]
"""A route parameter of this type receives the app's `Settings`."""

_bearer = HTTPBearer(auto_error=False, description="`Authorization: Bearer <API_KEY>` when API_KEY is set.")


async def require_api_key(
    settings: AppSettings, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> None:
    """The `API_KEY` check: no key configured lets everything through; otherwise the bearer token must equal the key
    (`secrets.compare_digest`, constant time).

    Raises:
        HTTPException: 401 with `WWW-Authenticate: Bearer` for a missing or wrong key.
    """
    if settings.api_key is None:
        return
    expected = settings.api_key.get_secret_value().encode()
    # Starlette decodes header bytes as latin-1: encoding back gives the bytes sent (a UTF-8 key matches)
    given = credentials.credentials.encode("latin-1") if credentials is not None else b""
    if not secrets.compare_digest(given, expected):
        raise HTTPException(401, "missing or wrong API key", headers={"WWW-Authenticate": "Bearer"})


API_KEY = Depends(require_api_key)
"""Add to a router's or route's `dependencies` to guard it with the API key (admin key only; routes that serve
key holders depend on `Caller` instead)."""


def get_keys(request: Request) -> KeyRing | None:
    """The API keys the app's lifespan opened (`agent.core.keys.CachedKeys`); None for an app without them."""
    return app_state(request.app).keys


Keys = Annotated[KeyRing | None, Depends(get_keys)]


@dataclass(frozen=True)
class CallerIdentity:
    """Who sent a request and what it may see.

    Attributes:
        collections: the collections of the caller's key, sorted; None: the admin (`API_KEY`, or no key
            configured), every collection.
        key_id: the id of the caller's key in `api_keys`; None for the admin.
    """

    collections: tuple[str, ...] | None
    key_id: int | None = None
    access: Access = UNRESTRICTED
    """The documents the caller may read (`tools.access`): the admin's is `UNRESTRICTED`; a key holder's or a
    signed-in user's is its groups (with `PUBLIC_GROUP`), enforced by the store's row-level security."""
    roles: Mapping[str, Role] | None = None
    """Collection -> the caller's role there, for callers whose collections come from group grants (a signed-in
    user, a key tied to a group); None: every role in `collections` (the admin, a key scoped to collections)."""
    subject: str | None = None
    """The identity provider's subject (`sub`) of a signed-in user; None for key holders and the admin."""

    @property
    def owner(self) -> str | None:
        """The owner of the conversations this caller creates and sees (`tools.conversations`): `sub:<subject>` for
        a signed-in user, its key id as text for a key holder; None for the admin (creates unowned conversations,
        sees every one)."""
        if self.subject is not None:
            return f"sub:{self.subject}"
        return None if self.key_id is None else str(self.key_id)

    def allows(self, collection: str) -> bool:
        """Whether the caller may use `collection`."""
        return self.collections is None or collection in self.collections

    def role_in(self, collection: str) -> Role | None:
        """The caller's role in `collection`: None outside its collections; `Role.ADMIN` where `roles` is None
        (the admin, a key scoped to collections)."""
        if not self.allows(collection):
            return None
        return Role.ADMIN if self.roles is None else self.roles.get(collection)

    @property
    def _whose(self) -> str:
        """Whose collections a refusal names: the signed-in user's (a token of the issuer) or the API key's."""
        return "your account's" if self.subject is not None else "this API key's"

    def _checked(self, names: Sequence[str]) -> tuple[str, ...]:
        """`names` when each is a valid collection of the caller's. Raises InputError (422) for an invalid name,
        ApiError 403 `forbidden_collection` for one outside the key (whether or not it exists)."""
        try:
            checked = tuple(check_collection(n) for n in names)
        except ScopeError as exc:
            raise InputError(str(exc)) from None
        outside = [n for n in checked if not self.allows(n)]
        if outside:
            raise ApiError(
                403,
                "forbidden_collection",
                f"collection {outside[0]!r} is not one of {self._whose} collections "
                f"({', '.join(self.collections or ()) or 'none'})",
            )
        return checked

    def visible(self, collection_or_list: str | Sequence[str] | None) -> tuple[str, ...] | None:
        """The collections a read covers: the ones named (each must be the caller's), else all of the caller's
        (None: every collection, the admin).

        Raises:
            InputError: an invalid collection name (422 `bad_request`).
            ApiError: 403 `forbidden_collection` for a named collection outside the key.
        """
        if collection_or_list is None:
            return self.collections
        names = [collection_or_list] if isinstance(collection_or_list, str) else list(collection_or_list)
        return tuple(sorted(set(self._checked(names))))

    def target(self, collection: str | None) -> str:
        """The collection a write goes into: the one named, else `default`; the caller must hold it.

        Raises:
            InputError / ApiError: as `visible` (403 also for `default` when the key lacks it: name a collection; 403
                also when the caller's role there, from grants, is below uploader).
        """
        checked = self._checked([collection or DEFAULT_COLLECTION])[0]
        role = None if self.roles is None else self.roles.get(checked)
        if self.roles is not None and (role is None or not role.includes(Role.UPLOADER)):
            raise ApiError(
                403,
                "forbidden_collection",
                f"collection {checked!r}: writing needs role uploader; the caller's is {role or 'none'}",
            )
        return checked

    def scope(
        self, filter_obj: Mapping[str, Any] | None, collection_or_list: str | Sequence[str] | None = None
    ) -> SearchScope:
        """The search scope of a request: its `filter` (`tools.scope` grammar) over the collections it names
        (each must be the caller's), within the caller's collections.

        Raises:
            InputError: an invalid filter or collection name (422 `bad_request`).
            ApiError: 403 `forbidden_collection` for a named collection outside the key.
        """
        collections = self.visible(collection_or_list)
        try:
            return SearchScope.from_filter(filter_obj, collections).within(self.collections).read_by(self.access)
        except ScopeError as exc:
            raise InputError(str(exc)) from None

    def narrow(self, asked: SearchScope | None) -> SearchScope:
        """A scope a request built itself (its `filter` and `collection`), within the caller's collections.

        Raises:
            ApiError: 403 `forbidden_collection` when it names a collection outside the key.
        """
        if asked is None:
            return self.scope(None)
        self.visible(asked.collections)
        return asked.within(self.collections).read_by(self.access)


def admin_bytes(key: SecretStr) -> bytes:
    """The UTF-8 bytes of the admin key `API_KEY`."""
    return key.get_secret_value().encode()


ADMIN = CallerIdentity(None)
"""The caller with every collection."""


async def key_caller(key: ApiKey, grants: GrantBook | None) -> CallerIdentity:
    """The caller holding `key`: a key tied to a group reads the documents of that group (and the public ones), in
    the key's own collections when it has any (its role there: the group's grant, reader at least), else in the
    collections granted to the group or to everyone (roles from the grants); a key without a group reads the public
    documents of its collections, every role there.

    Raises:
        StoreError: the grants could not be read.
    """
    if key.group is None:
        return CallerIdentity(key.collections, key.id, access=caller_access([]))
    granted = dict(await grants.roles_for([key.group, PUBLIC_GROUP])) if grants is not None else {}
    roles = {c: granted.get(c, Role.READER) for c in key.collections} if key.collections else granted
    return CallerIdentity(tuple(sorted(roles)), key.id, access=caller_access([key.group]), roles=roles)


def get_signin(request: Request) -> SignIn:
    """The app's sign-in checker and grants (`AppState.oidc`, `AppState.grants`)."""
    state = app_state(request.app)
    return SignIn(state.oidc, state.grants)


@dataclass(frozen=True)
class SignIn:
    """What makes a sign-in token a caller: the issuer's token checker (None: sign-in off) and the grants of groups
    to collections (None: no collection for anyone signed in)."""

    oidc: OidcVerifier | None
    grants: GrantBook | None

    async def caller(self, token: str) -> CallerIdentity:
        """The caller of a sign-in `token`: its subject, the access of its groups (`caller_access`) and the
        collections its groups (and `PUBLIC_GROUP`) are granted, with their roles.

        Raises:
            HTTPException: 401 with `WWW-Authenticate: Bearer error="invalid_token"`, the reason as the detail.
            IssuerUnavailableError: the issuer cannot be read (503).
            StoreError: the grants cannot be read (503).
        """
        if self.oidc is None:
            raise HTTPException(401, "sign-in is off on this server", headers=invalid_token_headers("sign-in is off"))
        try:
            identity = await self.oidc.verify(token)
        except TokenRefused as exc:
            raise HTTPException(401, str(exc), headers=invalid_token_headers(str(exc))) from None
        access = caller_access(identity.groups)  # PUBLIC_GROUP added, names that are not valid groups dropped
        roles = dict(await self.grants.roles_for(sorted(access.groups or ()))) if self.grants else {}
        return CallerIdentity(
            collections=tuple(sorted(roles)),
            access=access,
            roles=roles,
            subject=identity.subject,
        )


async def get_caller(
    settings: AppSettings,
    keys: Keys,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    signin: Annotated[SignIn, Depends(get_signin)],
) -> CallerIdentity:
    """The request's caller (see the module docstring). The admin key is compared in constant time; a key holder's
    token is found by its sha256 (`agent.core.keys`); with sign-in on (`OIDC_ISSUER`), a bearer that is a JWT is
    a signed-in user (`SignIn.caller`), and a request without credentials is refused even while no key exists.

    Raises:
        HTTPException: 401 with `WWW-Authenticate: Bearer` for a missing, wrong or revoked key or a refused token.
        StoreUnavailableError: the keys could not be read (503).
        IssuerUnavailableError: the sign-in issuer cannot be read (503).
    """
    token = credentials.credentials if credentials is not None else None
    admin = settings.api_key
    # Starlette decodes header bytes as latin-1: encoding back gives the bytes sent (a UTF-8 key matches)
    if token is not None and admin is not None and secrets.compare_digest(token.encode("latin-1"), admin_bytes(admin)):
        return ADMIN
    if token is not None and signin.oidc is not None and looks_like_jwt(token):
        return await signin.caller(token)
    if token is not None and keys is not None:
        key = await keys.holder(token)
        if key is not None:
            return await key_caller(key, signin.grants)
    if settings.api_key is None and settings.oidc_issuer is None and (keys is None or not await keys.any_keys()):
        return ADMIN
    raise HTTPException(401, "missing, wrong or revoked API key", headers={"WWW-Authenticate": "Bearer"})


async def request_caller(request: Request) -> CallerIdentity:
    """`get_caller` outside FastAPI's dependencies (an ASGI app mounted in the router, e.g. MCP): the caller of
    `request` from its `Authorization` header, the app's settings and its API keys (`app_state`).

    Raises:
        As `get_caller`.
    """
    return await get_caller(get_settings(request), get_keys(request), await _bearer(request), get_signin(request))


async def caller_or_refused(scope: Scope, receive: Receive, send: Send) -> CallerIdentity | None:
    """`request_caller` of an ASGI request for a protocol endpoint mounted in the router (MCP, A2A); None once the
    refusal has been answered: 401 `unauthorized` with `WWW-Authenticate: Bearer` for a wrong or revoked token, the
    app's error answer (503) when the keys cannot be read."""
    try:
        return await request_caller(Request(scope))
    except HTTPException as exc:
        headers = dict(exc.headers or {})
        await error_json(exc.status_code, "unauthorized", str(exc.detail), headers)(scope, receive, send)
    except Exception as exc:  # noqa: BLE001 - the keys cannot be read: the app's error answer (503)
        await error_response(failure_of(exc))(scope, receive, send)
    return None


Caller = Annotated[CallerIdentity, Depends(get_caller)]
"""A route parameter of this type receives the request's caller; depending on it also guards the route (401)."""
CALLER = Depends(get_caller)
"""Add to a router's `dependencies` to guard every route with `get_caller` (a key holder's key or the admin's)."""


async def admitted(rag: Rag, request: Request) -> AsyncIterator[Ticket]:
    """A place in the app's admission control (`agent.core.admission`), taken before the response starts, so that a
    refusal is a 503 `overloaded` (never an `error` event after a 200 stream), and given back when the request ends,
    whatever the answer did.

    Raises:
        agent.core.errors.OverloadedError: refused at once (queue full, or the expected wait beyond the deadline).
    """
    ticket = request_ticket(rag.admission, request.scope)  # taken before the body was read (the admission gate)
    try:
        yield ticket
    finally:
        ticket.close()


Admitted = Annotated[Ticket, Depends(admitted)]
"""A route parameter of this type holds a place in admission control for the request's answer."""
