"""The typed state of one app of `agent.http.create_app` (`AppState`) and its one reader (`app_state`, and
`scope_state` for the middlewares): the settings, the shutdown drain, the opened `RagApp` and its API keys and quotas.
Nothing else reads `app.state`; `agent.http.deps` re-exports these for the routes and the tests."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agent.config.settings import Settings
from agent.core.app import RagApp
from agent.core.keys import KeyRing
from agent.core.oidc import OidcVerifier
from agent.core.quotas import Quotas
from tools.access import GrantBook

if TYPE_CHECKING:
    from agent.http.shutdown import Drain


@dataclass
class AppState:
    """What one app holds (`create_app` makes it; its lifespan fills it).

    Attributes:
        settings: what the app was created with.
        drain: the server's shutdown drain (`agent.http.shutdown.install_drain`).
        rag: the `RagApp` the lifespan opened; None before.
        keys: the API keys (`RagApp.keys`); None: no keys.
        quotas: the keys' quotas (`RagApp.quotas`); None: no keys.
        grants: the grants of groups to collections (`tools.access.GrantBook`; `Services.grants`, a
            `agent.core.grants.GrantStore`, in `rag serve`); None: a signed-in user or a key tied to a group holds no
            collection.
        oidc: the checker of the sign-in issuer's bearer tokens (`agent.core.oidc`, from `OIDC_ISSUER`); None: sign-in
            off.
    """

    settings: Settings
    drain: Drain
    rag: RagApp | None = None
    keys: KeyRing | None = None
    quotas: Quotas | None = None
    grants: GrantBook | None = None
    oidc: OidcVerifier | None = None


STATE = "served"
"""The attribute of `app.state` holding the `AppState`."""


def app_state(app: Any) -> AppState:
    """The typed state of `app` (the FastAPI app, or an ASGI scope's `scope["app"]`).

    Raises:
        RuntimeError: the app was not made by `create_app`.
    """
    state = getattr(getattr(app, "state", None), STATE, None)
    if not isinstance(state, AppState):
        raise RuntimeError("not an app of `agent.http.create_app`: it holds no AppState")
    return state


def scope_state(scope: Mapping[str, Any]) -> AppState | None:
    """The `AppState` of an ASGI scope's app, for the middlewares; None for a scope without one (e.g. a test's bare
    ASGI app)."""
    state = getattr(getattr(scope.get("app"), "state", None), STATE, None)
    return state if isinstance(state, AppState) else None
