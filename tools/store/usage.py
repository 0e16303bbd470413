"""What each API key used, per UTC day, in the store's database: answer requests, LLM tokens, embedding and LLM time.

Table (created idempotently by `PostgresUsage.setup`, after `api_keys`, by `tools.store.keys.open_keys`):
`key_usage(key_id bigint REFERENCES api_keys, day date, requests bigint, prompt_tokens bigint, completion_tokens
bigint, embed_ms double precision, llm_ms double precision, PRIMARY KEY (key_id, day))`. One row per key and UTC day,
added to by one upsert per answered request (`record`). Postgres' failures come out as the store's errors, never
asyncpg's. The service's use of it (quotas, metrics, the meter of a request) is `agent.core.quotas`.
"""

from __future__ import annotations

from datetime import date
from typing import Any

from tools.records import Usage, UsageRow
from tools.store.pools import PooledTables

SCHEMA_SQL = """
CREATE TABLE IF NOT EXISTS key_usage (
    key_id bigint NOT NULL REFERENCES api_keys (id),
    day date NOT NULL,
    requests bigint NOT NULL DEFAULT 0,
    prompt_tokens bigint NOT NULL DEFAULT 0,
    completion_tokens bigint NOT NULL DEFAULT 0,
    embed_ms double precision NOT NULL DEFAULT 0,
    llm_ms double precision NOT NULL DEFAULT 0,
    PRIMARY KEY (key_id, day)
)
"""


def total(rows: list[UsageRow]) -> Usage:
    """The sum of the rows' usage."""
    summed = Usage()
    for row in rows:
        summed.requests += row.usage.requests
        summed.prompt_tokens += row.usage.prompt_tokens
        summed.completion_tokens += row.usage.completion_tokens
        summed.embed_ms += row.usage.embed_ms
        summed.llm_ms += row.usage.llm_ms
    return summed


def report_json(days: int, since: date, rows: list[UsageRow]) -> dict[str, Any]:
    """`{"days", "since": "YYYY-MM-DD", "usage": [UsageRow.to_json()], "totals": Usage.to_json()}`: the body of
    `GET /v1/usage` and `rag keys usage --json`."""
    return {
        "days": days,
        "since": since.isoformat(),
        "usage": [r.to_json() for r in rows],
        "totals": total(rows).to_json(),
    }


class PostgresUsage(PooledTables):
    """The `key_usage` table over an asyncpg pool (the keys' own, `tools.store.keys.PostgresKeys.pool`).

    Args: those of `tools.store.pools.PooledTables` (pool, acquire_timeout_s).
    """

    async def setup(self) -> None:
        """Create the table when missing (idempotent; `api_keys` must exist)."""
        async with self._tx("creating the key_usage table") as conn:
            await conn.execute(SCHEMA_SQL)

    async def record(self, key_id: int, day: date, used: Usage) -> None:
        """Add `used` to key `key_id`'s row of `day` (one upsert).

        Raises:
            StoreUnavailableError / StoreBusyError / StoreQueryError: Postgres failed (e.g. no such key).
        """
        async with self._tx("recording an API key's usage") as conn:
            await conn.execute(
                "INSERT INTO key_usage AS u (key_id, day, requests, prompt_tokens, completion_tokens, embed_ms, llm_ms)"
                " VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (key_id, day) DO UPDATE SET"
                " requests = u.requests + excluded.requests,"
                " prompt_tokens = u.prompt_tokens + excluded.prompt_tokens,"
                " completion_tokens = u.completion_tokens + excluded.completion_tokens,"
                " embed_ms = u.embed_ms + excluded.embed_ms, llm_ms = u.llm_ms + excluded.llm_ms",
                key_id,
                day,
                used.requests,
                used.prompt_tokens,
                used.completion_tokens,
                used.embed_ms,
                used.llm_ms,
            )

    async def tokens_on(self, key_id: int, day: date) -> int:
        """Prompt + completion tokens key `key_id` used on `day` (0 without a row)."""
        async with self._tx("reading an API key's usage", "BEGIN READ ONLY") as conn:
            value = await conn.fetchval(
                "SELECT prompt_tokens + completion_tokens FROM key_usage WHERE key_id = $1 AND day = $2", key_id, day
            )
        return int(value or 0)

    async def report(self, since: date, key_id: int | None = None) -> list[UsageRow]:
        """Every row from `since` on (of key `key_id` only, when given), by day then key id."""
        async with self._tx("reading API key usage", "BEGIN READ ONLY") as conn:
            rows = await conn.fetch(
                "SELECT u.*, k.name FROM key_usage u JOIN api_keys k ON k.id = u.key_id"
                " WHERE u.day >= $1 AND ($2::bigint IS NULL OR u.key_id = $2) ORDER BY u.day, u.key_id",
                since,
                key_id,
            )
        return [
            UsageRow(
                r["key_id"],
                r["name"],
                r["day"],
                Usage(r["requests"], r["prompt_tokens"], r["completion_tokens"], r["embed_ms"], r["llm_ms"]),
            )
            for r in rows
        ]
