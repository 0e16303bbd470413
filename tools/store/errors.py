"""The one place where asyncpg's (and the socket's) exceptions become the store's errors (`tools.errors`).

Callers above the store see only those types: `StoreUnavailableError` (Postgres is down, restarting or shutting
down; retryable), its subclass `StoreBusyError` (no pooled connection within the bounded acquire time; retryable),
and `StoreQueryError` (Postgres refused or failed a statement; not retryable). Bad input is a plain `StoreError`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import asyncpg

from tools.errors import StoreError, StoreQueryError, StoreUnavailableError

UNAVAILABLE: tuple[type[BaseException], ...] = (
    asyncpg.PostgresConnectionError,  # class 08: connection lost, refused by the server or by PgBouncer
    asyncpg.CannotConnectNowError,  # starting up or in recovery
    asyncpg.AdminShutdownError,  # fast or smart shutdown
    asyncpg.CrashShutdownError,
    asyncpg.TooManyConnectionsError,
    asyncpg.InterfaceError,  # e.g. the connection was closed in the middle of an operation
    asyncpg.InternalClientError,  # a pooled connection's protocol state after the server closed it unasked
    OSError,  # a refused TCP port or a missing unix socket (the embedded server is restarting)
)
"""asyncpg's and the socket's exceptions of a Postgres that is unreachable, restarting or shutting down."""

VECTOR_HINT = (
    "is the pgvector extension installed in a schema on the connection's search_path? `CREATE EXTENSION vector` "
    "in that database, or `ALTER EXTENSION vector SET SCHEMA public`"
)
"""What to do when Postgres does not know the `vector` type or its operators."""


def _one_line(text: str) -> str:
    return " ".join(text.split())


def translate(exc: BaseException, action: str) -> StoreError | None:
    """The store error for `exc` raised while doing `action` (e.g. "dense search"), or None when `exc` is not one
    of Postgres' or the socket's (a bug of ours, or a StoreError already).

    - `TimeoutError` (asyncpg's `command_timeout`) and the `UNAVAILABLE` types -> `StoreUnavailableError`;
    - `UndefinedObjectError` -> `StoreQueryError` with a hint about the `vector` extension;
    - any other `asyncpg.PostgresError` -> `StoreQueryError`.
    """
    if isinstance(exc, StoreError):
        return None
    detail = _one_line(str(exc)) or type(exc).__name__
    if isinstance(exc, TimeoutError):
        return StoreUnavailableError(f"{action}: Postgres did not answer in time ({detail}); try again")
    if isinstance(exc, UNAVAILABLE):
        return StoreUnavailableError(
            f"{action}: Postgres is unreachable, restarting or shutting down ({type(exc).__name__}: {detail})"
        )
    if isinstance(exc, asyncpg.UndefinedObjectError):
        return StoreQueryError(f"{action}: Postgres: {detail} ({VECTOR_HINT})")
    if isinstance(exc, asyncpg.PostgresError):
        return StoreQueryError(f"{action}: Postgres: {detail}")
    return None


@contextlib.contextmanager
def translated(action: str) -> Iterator[None]:
    """Raise the store's error type (`translate`) instead of asyncpg's or the socket's, chained to the original.

    Raises:
        StoreUnavailableError / StoreQueryError: see `translate`; other exceptions pass unchanged.
    """
    try:
        yield
    except Exception as exc:
        store_error = translate(exc, action)
        if store_error is None:
            raise
        raise store_error from exc
