"""Connection pools of the store, bounded acquires, and one transaction per store operation.

Reads never wait behind writers: writers (ingest, replace, delete) queue on the write lock holding connections of
their own pool, while searches, listings, counts and document reads use a separate read pool. Acquiring a
connection from either is bounded (`acquire_timeout_s`, `DB_ACQUIRE_TIMEOUT_S`) and raises `StoreBusyError`.

Every operation is one explicit transaction on one connection (`BEGIN ...; SET LOCAL ...` in one round trip, the
statements, `COMMIT`). That pins one server connection behind PgBouncer in transaction mode, so an unnamed prepared
statement is parsed and executed on the same server, and settings made with `SET LOCAL` apply to it. No connection
carries session state: nothing is sent as a start-up parameter, and a connection goes back to its pool without
asyncpg's `RESET ALL` round trip (an open transaction is still rolled back).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import AsyncIterator

import asyncpg
from pgvector.asyncpg import register_vector

from tools.errors import StoreBusyError, StoreUnavailableError
from tools.store.errors import translated
from tools.store.records import Conn


async def _init_conn(conn: asyncpg.Connection, schema: str) -> None:
    """Register pgvector's codecs; in a transaction, so that its type look-ups run on one server connection."""
    async with conn.transaction():
        await register_vector(conn, schema=schema)


async def _no_session_reset(conn: asyncpg.Connection) -> None:
    """Nothing to reset: store operations set only `SET LOCAL` settings and transaction-level advisory locks."""


async def open_pool(
    dsn: str,
    *,
    min_size: int,
    max_size: int,
    vector_schema: str,
    command_timeout_s: float | None,
    statement_cache_size: int,
    action: str,
) -> asyncpg.Pool:
    """An asyncpg pool of `min_size`..`max_size` connections to `dsn` with pgvector's codecs.

    Raises:
        StoreUnavailableError / StoreQueryError: Postgres refused or is unreachable (`action` names the step).
    """
    with translated(action):
        return await asyncpg.create_pool(
            dsn,
            min_size=min_size,
            max_size=max_size,
            init=functools.partial(_init_conn, schema=vector_schema),
            reset=_no_session_reset,
            command_timeout=command_timeout_s,
            statement_cache_size=statement_cache_size,
        )


@contextlib.asynccontextmanager
async def acquired(pool: asyncpg.Pool, timeout_s: float, action: str) -> AsyncIterator[Conn]:
    """A connection of `pool`, waited for at most `timeout_s` seconds.

    Raises:
        StoreBusyError: no connection became free within `timeout_s`.
        StoreUnavailableError / StoreQueryError: opening a new connection failed.
    """
    with translated(action):
        try:
            conn = await pool.acquire(timeout=timeout_s)
        except TimeoutError as exc:
            raise StoreBusyError(
                f"{action}: no database connection free within {timeout_s:g} s (all {pool.get_max_size()} in use); "
                f"try again"
            ) from exc
    try:
        yield conn
    finally:
        with translated(action):
            await pool.release(conn)


@contextlib.asynccontextmanager
async def transaction(pool: asyncpg.Pool, timeout_s: float, action: str, begin: str = "BEGIN") -> AsyncIterator[Conn]:
    """One transaction on a connection of `pool` (bounded acquire, see `acquired`): `begin` (e.g.
    `BEGIN READ ONLY; SET LOCAL ...`, one round trip), the caller's statements, then COMMIT; ROLLBACK when the
    caller's block raises. asyncpg's and the socket's errors come out as the store's (`errors.translated`)."""
    async with acquired(pool, timeout_s, action) as conn:
        try:
            with translated(action):
                await conn.execute(begin)
                try:
                    yield conn
                except BaseException:
                    if not conn.is_closed():
                        with contextlib.suppress(Exception):
                            await conn.execute("ROLLBACK")
                    raise
                await conn.execute("COMMIT")
        except StoreUnavailableError:
            with contextlib.suppress(asyncpg.InterfaceError):  # already detached when asyncpg saw it close
                conn.terminate()  # its server went away: the pool opens a new connection for the next caller
            raise


class PooledTables:
    """Tables over one asyncpg pool, one transaction per operation (`transaction`, bounded acquire): the base of the
    stores of API keys (`tools.store.keys.PostgresKeys`) and their usage (`tools.store.usage.PostgresUsage`).

    Args:
        pool: a connected pool on the store's database.
        acquire_timeout_s: longest wait for a pooled connection, seconds (`DB_ACQUIRE_TIMEOUT_S`).
    """

    def __init__(self, pool: asyncpg.Pool, acquire_timeout_s: float = 5.0) -> None:
        self.pool = pool
        self.acquire_timeout_s = acquire_timeout_s

    def _tx(self, action: str, begin: str = "BEGIN") -> contextlib.AbstractAsyncContextManager[Conn]:
        return transaction(self.pool, self.acquire_timeout_s, action, begin)
