"""The `key_usage` table and the keys' quota columns on a real Postgres: the upsert adds up a day's usage, the day's
tokens and the report read it back by day and key, and an `api_keys` table made before quotas gains the columns."""

from __future__ import annotations

from datetime import date

import asyncpg
import pytest

from tools.records import Usage
from tools.scope import ScopeError
from tools.store.keys import KEEP, open_keys

DAY = date(2026, 3, 1)


async def test_usage_adds_up_per_key_and_day_and_reads_back(fresh_db: str) -> None:
    async with open_keys(fresh_db) as keys:
        (a, _), (b, _) = await keys.create(["default"], "a"), await keys.create(["default"], "b")
        usage = keys.usage
        await usage.record(a.id, DAY, Usage(1, 100, 20, 3.5, 40.0))
        await usage.record(a.id, DAY, Usage(1, 50, 5, 1.5, 10.0))
        await usage.record(b.id, DAY, Usage(1, 7, 3))
        await usage.record(a.id, date(2026, 3, 2), Usage(1, 1, 1))
        assert await usage.tokens_on(a.id, DAY) == 175
        assert await usage.tokens_on(a.id, date(2026, 2, 28)) == 0
        rows = await usage.report(DAY)
        assert [(r.key_id, r.key_name, r.day, r.usage) for r in rows] == [
            (a.id, "a", DAY, Usage(2, 150, 25, 5.0, 50.0)),
            (b.id, "b", DAY, Usage(1, 7, 3)),
            (a.id, "a", date(2026, 3, 2), Usage(1, 1, 1)),
        ]
        assert [r.key_id for r in await usage.report(DAY, b.id)] == [b.id]
        assert await usage.report(date(2026, 3, 3)) == []


async def test_quotas_are_set_kept_and_cleared(fresh_db: str) -> None:
    async with open_keys(fresh_db) as keys:
        key, _ = await keys.create(["default"], "q", requests_per_minute=5)
        assert (key.requests_per_minute, key.tokens_per_day) == (5, None)
        kept = await keys.update_limits(key.id, KEEP, 1000)
        assert kept is not None and (kept.requests_per_minute, kept.tokens_per_day) == (5, 1000)
        cleared = await keys.update_limits(key.id, None)
        assert cleared is not None and (cleared.requests_per_minute, cleared.tokens_per_day) == (None, 1000)
        assert await keys.update_limits(999, 1) is None
        with pytest.raises(ScopeError, match="requests_per_minute=0"):
            await keys.update_limits(key.id, 0)
        assert [(k.id, k.tokens_per_day) for k in await keys.list()] == [(key.id, 1000)]


async def test_a_keys_table_made_before_quotas_gains_their_columns(fresh_db: str) -> None:
    conn = await asyncpg.connect(fresh_db)
    try:
        await conn.execute(
            "CREATE TABLE api_keys (id bigserial PRIMARY KEY, name text NOT NULL DEFAULT '', hash text NOT NULL UNIQUE,"
            " collections text[] NOT NULL, created_at timestamptz NOT NULL DEFAULT now(), revoked_at timestamptz)"
        )
        await conn.execute("INSERT INTO api_keys (hash, collections) VALUES ('h', '{default}')")
    finally:
        await conn.close()
    for _ in range(2):  # idempotent
        async with open_keys(fresh_db) as keys:
            [old] = await keys.list()
            assert (old.requests_per_minute, old.tokens_per_day) == (None, None)
    async with open_keys(fresh_db) as keys:
        assert (await keys.update_limits(old.id, 3, 4)) is not None
        await keys.usage.record(old.id, DAY, Usage(1))
