"""API keys tied to a group on a real Postgres: an `api_keys` table of the version before groups gains
`group_name` (set-up idempotent, old keys kept), a key tied to a group may name no collection, and the table itself
refuses a key with neither."""

from __future__ import annotations

import asyncpg
import pytest

from tools.access import AccessError
from tools.scope import ScopeError
from tools.store.keys import open_keys

OLD_TABLE = """
CREATE TABLE api_keys (
    id bigserial PRIMARY KEY,
    name text NOT NULL DEFAULT '',
    hash text NOT NULL UNIQUE,
    collections text[] NOT NULL CHECK (cardinality(collections) >= 1),
    created_at timestamptz NOT NULL DEFAULT now(),
    revoked_at timestamptz,
    requests_per_minute integer CHECK (requests_per_minute >= 1),
    tokens_per_day bigint CHECK (tokens_per_day >= 1)
)
"""


async def test_an_older_keys_table_gains_groups_and_keeps_its_keys(fresh_db: str) -> None:
    conn = await asyncpg.connect(fresh_db)
    try:
        await conn.execute(OLD_TABLE)
        await conn.execute("INSERT INTO api_keys (hash, collections) VALUES ('h', '{default}')")
    finally:
        await conn.close()
    async with open_keys(fresh_db) as keys:
        await keys.setup()  # again: idempotent
        [old] = await keys.list()
        assert (old.collections, old.group) == (("default",), None) and old.to_json()["group"] is None
        tied, token = await keys.create([], "eng bot", group=" eng ")
        assert (tied.collections, tied.group) == ((), "eng")
        pinned, _ = await keys.create(["handbook"], group="eng")
        assert (pinned.collections, pinned.group) == (("handbook",), "eng")
        held = await keys.holder(token)
        assert held is not None and held.group == "eng"
        with pytest.raises(ScopeError):
            await keys.create([])
        with pytest.raises(AccessError):
            await keys.create([], group="\x01")
        assert [k.group for k in await keys.list()] == [None, "eng", "eng"]
    conn = await asyncpg.connect(fresh_db)
    try:
        with pytest.raises(asyncpg.CheckViolationError):  # neither collections nor a group: refused by the table
            await conn.execute("INSERT INTO api_keys (hash, collections) VALUES ('h2', '{}')")
    finally:
        await conn.close()
