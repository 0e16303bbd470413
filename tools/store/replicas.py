"""Read replicas: searches go to streaming replicas (`DATABASE_READ_URLS`), skipping one that is down or lags;
writes, listings and counts stay on the primary.

- **Health**: a replica is probed (one query: its replayed WAL position and its replay lag) when its last probe is
  older than `probe_interval_s`; one that fails a probe or a search is skipped for `retry_down_s`, one whose lag
  exceeds `max_lag_s` until a later probe finds it caught up. Lag = 0 when the replica has replayed all the WAL it
  received, else the age of the last transaction it replayed (`pg_last_xact_replay_timestamp`).
- **Read your writes**: after each write the store takes the primary's WAL position (past the write's commit) and
  waits, at most `max_lag_s`, until every healthy replica has replayed it (`wait_replayed`): a caller who has seen a
  write return finds it on any replica, in this process or another (a CLI ingest, then `rag ask`). A replica that
  did not catch up in time is used by this process only once a probe shows it past this process' last write; until
  then searches read from the primary.
- **Failover of a search**: a search that fails on a replica (down, recovery conflict) runs again on the primary.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import asyncpg

from tools.store import pools
from tools.store.errors import StoreError, StoreUnavailableError, translated
from tools.store.records import Conn

T = TypeVar("T")

PROBE_SQL = """
SELECT CASE WHEN pg_is_in_recovery() THEN (pg_last_wal_replay_lsn() - '0/0'::pg_lsn)::bigint
            ELSE (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint END AS replayed,
       CASE WHEN NOT pg_is_in_recovery() OR pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn() THEN 0.0
            ELSE coalesce(extract(epoch FROM now() - pg_last_xact_replay_timestamp()), 0.0)::float8 END AS lag_s
"""
"""A replica's replayed WAL position (bytes from 0/0) and replay lag (s); on a primary its own position and 0."""

PRIMARY_LSN_SQL = "SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint"
"""The primary's current WAL write position (bytes from 0/0): past every commit that has returned."""

POLL_S = 0.01
"""Interval between replay-position checks while a write waits for the replicas, seconds."""


@dataclass
class Replica:
    """One read replica's pool and what the last probe found."""

    url: str
    pool: asyncpg.Pool
    replayed: int = -1
    lag_s: float = float("inf")
    probed_at: float = float("-inf")
    down_until: float = float("-inf")


@dataclass
class ReplicaSet:
    """The read replicas of one store (see the module docstring).

    Args:
        max_lag_s: most replay lag of a replica that serves searches, and the longest a write waits for the
            replicas to replay it, seconds (`DATABASE_READ_MAX_LAG_S`).
        acquire_timeout_s: bounded acquire of a replica connection, seconds.
        probe_interval_s: probe age after which a replica is probed again before use, seconds.
        retry_down_s: how long a replica that failed is skipped, seconds.
    """

    replicas: list[Replica]
    max_lag_s: float
    acquire_timeout_s: float
    probe_interval_s: float = 1.0
    retry_down_s: float = 5.0
    written: int = 0
    _turn: itertools.count[int] = field(default_factory=itertools.count)

    async def close(self) -> None:
        for replica in self.replicas:
            await replica.pool.close()

    async def probe(self, replica: Replica) -> None:
        """Refresh `replica`'s replayed position and lag; mark it down when the probe fails."""
        try:
            async with pools.acquired(replica.pool, self.acquire_timeout_s, "probing a read replica") as conn:
                with translated("probing a read replica"):
                    row = await conn.fetchrow(PROBE_SQL)
        except StoreError:
            replica.down_until = time.monotonic() + self.retry_down_s
            return
        assert row is not None
        replica.replayed, replica.lag_s, replica.probed_at = int(row["replayed"]), float(row["lag_s"]), time.monotonic()

    def _usable(self, replica: Replica) -> bool:
        return replica.lag_s <= self.max_lag_s and replica.replayed >= self.written

    async def candidates(self) -> list[Replica]:
        """The replicas a search may use now, round robin from a rotating start (probing stale ones first)."""
        now = time.monotonic()
        start = next(self._turn) % max(len(self.replicas), 1)
        ordered = self.replicas[start:] + self.replicas[:start]
        usable = []
        for replica in ordered:
            if replica.down_until > now:
                continue
            if now - replica.probed_at > self.probe_interval_s or not self._usable(replica):
                await self.probe(replica)
            if replica.down_until <= now and self._usable(replica):
                usable.append(replica)
        return usable

    async def run(
        self, action: str, begin: str, fn: Callable[[Conn], Awaitable[T]], primary: Callable[[], Awaitable[T]]
    ) -> tuple[T, str]:
        """`fn` in a `begin` transaction on the first usable replica; on the primary (`primary()`) when none is
        usable or the replicas fail. Returns (result, the URL that served it or "primary")."""
        for replica in await self.candidates():
            try:
                async with pools.transaction(replica.pool, self.acquire_timeout_s, action, begin) as conn:
                    return await fn(conn), replica.url
            except StoreUnavailableError:
                replica.down_until = time.monotonic() + self.retry_down_s
            except StoreError:
                pass  # e.g. a query cancelled by a recovery conflict: the primary answers
        return await primary(), "primary"

    async def wait_replayed(self, lsn: int) -> None:
        """Record a write at WAL position `lsn` and wait, at most `max_lag_s`, until every healthy replica has
        replayed it."""
        self.written = max(self.written, lsn)
        deadline = time.monotonic() + self.max_lag_s
        pending = [r for r in self.replicas if r.down_until <= time.monotonic()]
        while pending and time.monotonic() < deadline:
            for replica in pending:
                await self.probe(replica)
            pending = [r for r in pending if r.down_until <= time.monotonic() and r.replayed < lsn]
            if pending:
                await asyncio.sleep(POLL_S)


async def open_replicas(
    urls: Sequence[str],
    *,
    max_size: int,
    max_lag_s: float,
    acquire_timeout_s: float,
    vector_schema: str,
    command_timeout_s: float | None,
    statement_cache_size: int,
) -> ReplicaSet:
    """Pools (opened lazily: a replica that is down does not stop the store from starting) for `urls`."""
    replicas = [
        Replica(
            url,
            await pools.open_pool(
                url,
                min_size=0,
                max_size=max_size,
                vector_schema=vector_schema,
                command_timeout_s=command_timeout_s,
                statement_cache_size=statement_cache_size,
                action=f"opening the pool of read replica {url}",
            ),
        )
        for url in urls
    ]
    return ReplicaSet(replicas, max_lag_s, acquire_timeout_s)


READ = "BEGIN READ ONLY"


def read_only(
    primary: asyncpg.Pool, replica_set: ReplicaSet | None, acquire_timeout_s: float, targets: Counter[str]
) -> Callable[[str, str, Callable[[Conn], Awaitable[T]]], Awaitable[T]]:
    """A runner of `fn(conn)` in a read-only transaction starting with `settings` (`SET LOCAL`s, or ""), on a
    usable replica of `replica_set` (None: no replicas), else on `primary`; counts the target in `targets`
    ("primary" or the replica's URL)."""

    async def run(action: str, settings: str, fn: Callable[[Conn], Awaitable[T]]) -> T:
        begin = f"{READ}; {settings}" if settings else READ

        async def on_primary() -> T:
            async with pools.transaction(primary, acquire_timeout_s, action, begin) as conn:
                return await fn(conn)

        if replica_set is None:
            result, target = await on_primary(), "primary"
        else:
            result, target = await replica_set.run(action, begin, fn, on_primary)
        targets[target] += 1
        return result

    return run


async def replicated(primary: asyncpg.Pool, replica_set: ReplicaSet, acquire_timeout_s: float) -> None:
    """After a write has committed: the primary's WAL position, then `replica_set.wait_replayed` of it."""
    async with pools.transaction(primary, acquire_timeout_s, "reading the primary's WAL position", READ) as conn:
        lsn = await conn.fetchval(PRIMARY_LSN_SQL)
    await replica_set.wait_replayed(int(lsn))
