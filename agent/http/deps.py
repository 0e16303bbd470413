"""What the routes depend on, as FastAPI dependencies: the app's `RagApp`, its `Settings`, the API-key check, a place
in admission control.

`create_app` stores the settings on `app.state` at creation and the opened `RagApp` in its lifespan; only these
functions read `app.state`. Tests replace them with `app.dependency_overrides[get_rag] = lambda: rag`.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.exceptions import HTTPException

from agent.admission import Ticket
from agent.app import RagApp
from agent.settings import Settings


def get_rag(request: Request) -> RagApp:
    """The `RagApp` the app's lifespan opened."""
    rag: RagApp = request.app.state.rag
    return rag


def get_settings(request: Request) -> Settings:
    """The settings the app was created with."""
    settings: Settings = request.app.state.settings
    return settings


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
"""Add to a router's or route's `dependencies` to guard it with the API key."""


async def admitted(rag: Rag) -> AsyncIterator[Ticket]:
    """A place in the app's admission control (`agent.admission`), taken before the response starts, so that a
    refusal is a 503 `overloaded` (never an `error` event after a 200 stream), and given back when the request ends,
    whatever the answer did.

    Raises:
        agent.errors.OverloadedError: refused at once (queue full, or the expected wait beyond the deadline).
    """
    ticket = rag.admission.enter()
    try:
        yield ticket
    finally:
        ticket.close()


Admitted = Annotated[Ticket, Depends(admitted)]
"""A route parameter of this type holds a place in admission control for the request's answer."""
