"""Answer records and their ratings in Postgres: `PostgresFeedback`, the `tools.feedback.FeedbackLog` over a connected
`VectorStore`'s pool, on the `answer_records` and `feedback` tables (created by the store's schema set-up,
`tools.store.schema.FEEDBACK_SQL`).

- `remember` inserts the record with the current version of each collection of its scope (`collection_versions`,
  every collection when unscoped) in the same statement, then deletes records older than the retention (their ratings
  go with them, `ON DELETE CASCADE`).
- `rate` upserts the answer's one rating (a None comment or right source keeps the earlier one), only when the
  owner's record exists.

Every operation is one transaction on the store's primary read pool (not the write pool, which queues behind the
documents' write lock during an ingest); Postgres' failures come out as the store's errors.
"""

from __future__ import annotations

import json
from contextlib import AbstractAsyncContextManager
from datetime import date
from typing import TYPE_CHECKING
from uuid import UUID

import asyncpg

from tools.access import UNRESTRICTED, Access
from tools.feedback import AnswerRecord, DayCount, FeedbackQuery, Rated, Rating
from tools.store import pools
from tools.store.records import Conn

if TYPE_CHECKING:
    from tools.store.vector_store import VectorStore

REMEMBER_SQL = """
INSERT INTO answer_records (answer_id, owner, collections, record)
SELECT $1::uuid, $2::text, $3::text[], $4::jsonb || jsonb_build_object('corpus_version', (
    SELECT coalesce(jsonb_object_agg(collection, version), '{}'::jsonb) FROM collection_versions
    WHERE $5::text[] IS NULL OR collection = ANY ($5::text[])
))
ON CONFLICT (answer_id) DO NOTHING
"""
"""$1 answer id, $2 owner, $3 the collections the answer covered, $4 the record, $5 the scope's collections (NULL:
unscoped, every collection's version)."""
EXPIRE_SQL = "DELETE FROM answer_records WHERE created_at < now() - make_interval(days => $1::int)"

_OWNED = "($2::text IS NULL OR r.owner = $2::text)"
RATE_SQL = f"""
INSERT INTO feedback (answer_id, rating, comment, right_source)
SELECT r.answer_id, $3, $4, $5 FROM answer_records r WHERE r.answer_id = $1::uuid AND {_OWNED}
ON CONFLICT (answer_id) DO UPDATE SET rating = EXCLUDED.rating,
    comment = coalesce(EXCLUDED.comment, feedback.comment),
    right_source = coalesce(EXCLUDED.right_source, feedback.right_source),
    rated_at = now()
RETURNING answer_id
"""
_RATED = """
SELECT f.answer_id::text AS answer_id, f.rating, f.comment, f.right_source, f.rated_at,
       r.record::text AS record, r.created_at
FROM feedback f JOIN answer_records r ON r.answer_id = f.answer_id
"""
GET_SQL = f"{_RATED} WHERE f.answer_id = $1::uuid AND {_OWNED}"
RECORD_SQL = f"""
SELECT r.record::text AS record, r.created_at FROM answer_records r WHERE r.answer_id = $1::uuid AND {_OWNED}
"""
FIND_SQL = f"""{_RATED}
WHERE ($1::text IS NULL OR r.owner = $1::text)
  AND ($2::text IS NULL OR f.rating = $2::text)
  AND ($3::timestamptz IS NULL OR f.rated_at >= $3::timestamptz)
  AND ($4::text IS NULL OR $4::text = ANY (r.collections))
ORDER BY f.rated_at DESC, f.answer_id DESC LIMIT $5
"""
DELETE_SQL = f"DELETE FROM answer_records r WHERE r.answer_id = $1::uuid AND {_OWNED} RETURNING r.answer_id"
COUNTS_SQL = """
SELECT (f.rated_at AT TIME ZONE 'UTC')::date AS day,
       count(*) FILTER (WHERE f.rating = 'up') AS up, count(*) FILTER (WHERE f.rating = 'down') AS down
FROM feedback f JOIN answer_records r ON r.answer_id = f.answer_id
WHERE ($1::text IS NULL OR r.owner = $1::text) AND f.rated_at >= ($2::date)::timestamp AT TIME ZONE 'UTC'
GROUP BY day ORDER BY day
"""


def _record(row: asyncpg.Record) -> AnswerRecord:
    return AnswerRecord.model_validate(json.loads(row["record"]) | {"created_at": row["created_at"]})


def _rated(row: asyncpg.Record) -> Rated:
    return Rated(
        answer_id=row["answer_id"],
        rating=row["rating"],
        comment=row["comment"],
        right_source=row["right_source"],
        rated_at=row["rated_at"],
        record=_record(row),
    )


class PostgresFeedback:
    """Answer records and ratings over a connected `VectorStore`'s primary read pool (module docstring).

    Raises (every method): the store's errors (`StoreUnavailableError`, `StoreBusyError`, `StoreQueryError`).
    """

    def __init__(self, store: VectorStore) -> None:
        self.vectors = store

    def _transaction(self, action: str, access: Access = UNRESTRICTED) -> AbstractAsyncContextManager[Conn]:
        restricted = access.set_local_sql()
        begin = f"BEGIN READ ONLY; {restricted}" if restricted else "BEGIN"
        return pools.transaction(self.vectors.pool, self.vectors.acquire_timeout_s, action, begin)

    async def remember(self, record: AnswerRecord, retention_days: int) -> None:
        """Store `record` with the scope's corpus versions; delete records older than `retention_days`."""
        body = record.model_dump(mode="json", exclude={"created_at", "corpus_version"})
        scope = sorted(set(record.collections)) if record.scoped else None
        async with self._transaction("storing an answer record") as conn:
            await conn.execute(
                REMEMBER_SQL, UUID(record.answer_id), record.owner, record.collections, json.dumps(body), scope
            )
            await conn.execute(EXPIRE_SQL, retention_days)

    async def rate(
        self, answer_id: str, owner: str | None, rating: Rating, comment: str | None, right_source: str | None
    ) -> Rated | None:
        async with self._transaction("rating an answer") as conn:
            if await conn.fetchval(RATE_SQL, UUID(answer_id), owner, rating, comment, right_source) is None:
                return None
            row = await conn.fetchrow(GET_SQL, UUID(answer_id), owner)
        assert row is not None
        return _rated(row)

    async def get(self, answer_id: str, owner: str | None, *, access: Access = UNRESTRICTED) -> Rated | None:
        async with self._transaction("reading a rating", access) as conn:
            row = await conn.fetchrow(GET_SQL, UUID(answer_id), owner)
        return None if row is None else _rated(row)

    async def record(self, answer_id: str, owner: str | None, *, access: Access = UNRESTRICTED) -> AnswerRecord | None:
        async with self._transaction("reading an answer record", access) as conn:
            row = await conn.fetchrow(RECORD_SQL, UUID(answer_id), owner)
        return None if row is None else _record(row)

    async def find(self, query: FeedbackQuery) -> list[Rated]:
        async with self._transaction("listing ratings", query.access) as conn:
            rows = await conn.fetch(FIND_SQL, query.owner, query.rating, query.since, query.collection, query.limit)
        return [_rated(row) for row in rows]

    async def delete(self, answer_id: str, owner: str | None) -> bool:
        async with self._transaction("deleting an answer record") as conn:
            return await conn.fetchval(DELETE_SQL, UUID(answer_id), owner) is not None

    async def counts(self, owner: str | None, since: date) -> list[DayCount]:
        async with self._transaction("counting ratings") as conn:
            rows = await conn.fetch(COUNTS_SQL, owner, since)
        return [DayCount(row["day"], int(row["up"]), int(row["down"])) for row in rows]
