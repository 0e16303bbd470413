"""Read replicas: searches go to streaming replicas (`DATABASE_READ_URLS`), skipping one that is down or lags;
writes, listings and counts stay on the primary.

- **Health**: a replica is probed when its last probe is older than `probe_interval_s`: first the primary's flushed
  WAL position (all that a WAL sender can send; recorded with the time it was read), then the replica's replayed
  position. The replica is known to hold everything the primary had flushed at the latest recorded time whose
  position it has replayed (`Replica.fresh_at`); its lag is the time since then, and it serves searches while that
  lag is at most `max_lag_s`. The lag is measured against the primary, never against what the replica itself has
  received: a replica whose WAL sender stopped or disconnected has replayed all it received and would otherwise
  look current while the primary moves on. A replica that fails a probe or a search is skipped for `retry_down_s`.
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
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import asyncpg

from tools.errors import StoreError, StoreUnavailableError
from tools.store import pools
from tools.store.errors import translated
from tools.store.records import Conn

T = TypeVar("T")

REPLICA_SQL = """
SELECT CASE WHEN pg_is_in_recovery() THEN (pg_last_wal_replay_lsn() - '0/0'::pg_lsn)::bigint
            ELSE (pg_current_wal_flush_lsn() - '0/0'::pg_lsn)::bigint END AS replayed
"""
"""A replica's replayed WAL position (bytes from 0/0); on a server that is not in recovery, its own flushed one."""

PRIMARY_LSN_SQL = "SELECT (pg_current_wal_flush_lsn() - '0/0'::pg_lsn)::bigint"
"""The primary's flushed WAL position (bytes from 0/0): past every commit that has returned, and the end of what a
WAL sender can send."""

POSITIONS_KEPT = 1024
"""Primary positions remembered for the lag, newest last; older ones only ever prove a lag past any sane bound."""

REPROBE_UNUSABLE_S = 0.05
"""Shortest interval between probes of a replica that lags or is behind this process' writes, seconds."""

POLL_S = 0.01
"""Interval between replay-position checks while a write waits for the replicas, seconds."""


@dataclass
class Replica:
    """One read replica's pool and what the last probe found."""

    url: str
    pool: asyncpg.Pool
    replayed: int = -1
    fresh_at: float = float("-inf")
    probed_at: float = float("-inf")
    down_until: float = float("-inf")

    def lag_s(self, now: float) -> float:
        """Seconds (monotonic clock) since the latest moment whose primary WAL this replica is known to have
        replayed; infinite before a probe has shown any."""
        return now - self.fresh_at


@dataclass
class ReplicaSet:
    """The read replicas of one store (see the module docstring).

    Args:
        replicas: the replicas' pools and probe results.
        primary: a pool on the primary, where the lag is measured from (its flushed WAL position).
        max_lag_s: most replay lag of a replica that serves searches, and the longest a write waits for the
            replicas to replay it, seconds (`DATABASE_READ_MAX_LAG_S`).
        acquire_timeout_s: bounded acquire of a replica connection, seconds.
        probe_interval_s: probe age after which a replica is probed again before use, seconds.
        retry_down_s: how long a replica that failed is skipped, seconds.
    """

    replicas: list[Replica]
    primary: asyncpg.Pool
    max_lag_s: float
    acquire_timeout_s: float
    probe_interval_s: float = 1.0
    retry_down_s: float = 5.0
    written: int = 0
    positions: deque[tuple[float, int]] = field(default_factory=lambda: deque(maxlen=POSITIONS_KEPT))
    _turn: itertools.count[int] = field(default_factory=itertools.count)

    async def close(self) -> None:
        for replica in self.replicas:
            await replica.pool.close()

    def record_primary(self, at: float, lsn: int) -> None:
        """Remember that the primary had flushed WAL up to `lsn` (bytes from 0/0) at `at` (monotonic seconds, taken
        before the position was read)."""
        if not self.positions or lsn >= self.positions[-1][1]:
            self.positions.append((at, lsn))

    async def read_primary(self) -> None:
        """Record the primary's flushed WAL position now; a primary that cannot answer records nothing (the
        replicas' lag then grows until it answers again)."""
        action, at = "reading the primary's WAL position", time.monotonic()
        try:
            async with pools.acquired(self.primary, self.acquire_timeout_s, action) as conn:
                with translated(action):
                    lsn = await conn.fetchval(PRIMARY_LSN_SQL)
        except StoreError:
            return
        self.record_primary(at, int(lsn))

    def fresh_at(self, replayed: int) -> float:
        """The latest recorded time at which the primary's position was at most `replayed`, monotonic seconds;
        -inf when no recorded position is that old."""
        for at, lsn in reversed(self.positions):
            if lsn <= replayed:
                return at
        return float("-inf")

    async def probe(self, replica: Replica, *, read_primary: bool = True) -> None:
        """Refresh `replica`'s replayed position and the moment it is known to be current as of (the primary's
        position first, unless `read_primary` is False, then the replica's); mark it down when the replica does not
        answer."""
        if read_primary:
            await self.read_primary()
        try:
            async with pools.acquired(replica.pool, self.acquire_timeout_s, "probing a read replica") as conn:
                with translated("probing a read replica"):
                    replayed = await conn.fetchval(REPLICA_SQL)
        except StoreError:
            replica.down_until = time.monotonic() + self.retry_down_s
            return
        replica.replayed, replica.probed_at = int(replayed), time.monotonic()
        replica.fresh_at = max(replica.fresh_at, self.fresh_at(replica.replayed))

    def _usable(self, replica: Replica, now: float) -> bool:
        return replica.lag_s(now) <= self.max_lag_s and replica.replayed >= self.written

    async def candidates(self) -> list[Replica]:
        """The replicas a search may use now, round robin from a rotating start (probing stale ones first)."""
        now = time.monotonic()
        start = next(self._turn) % max(len(self.replicas), 1)
        ordered = self.replicas[start:] + self.replicas[:start]
        usable = []
        for replica in ordered:
            if replica.down_until > now:
                continue
            age = now - replica.probed_at
            if age > self.probe_interval_s or (not self._usable(replica, now) and age > REPROBE_UNUSABLE_S):
                await self.probe(replica)
            now = time.monotonic()
            if replica.down_until <= now and self._usable(replica, now):
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
                await self.probe(replica, read_primary=False)  # the write's own position is recorded
            pending = [r for r in pending if r.down_until <= time.monotonic() and r.replayed < lsn]
            if pending:
                await asyncio.sleep(POLL_S)


async def open_replicas(
    urls: Sequence[str],
    *,
    primary: asyncpg.Pool,
    max_size: int,
    max_lag_s: float,
    acquire_timeout_s: float,
    vector_schema: str,
    command_timeout_s: float | None,
    statement_cache_size: int,
) -> ReplicaSet:
    """Pools (opened lazily: a replica that is down does not stop the store from starting) for `urls`; their lag is
    measured against `primary` (the store's read pool on the primary)."""
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
    return ReplicaSet(replicas, primary, max_lag_s, acquire_timeout_s)


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
    at = time.monotonic()
    async with pools.transaction(primary, acquire_timeout_s, "reading the primary's WAL position", READ) as conn:
        lsn = int(await conn.fetchval(PRIMARY_LSN_SQL))
    replica_set.record_primary(at, lsn)
    await replica_set.wait_replayed(lsn)
