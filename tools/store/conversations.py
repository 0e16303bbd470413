"""Conversations in Postgres: `ConversationStore`, the `tools.conversations.ConversationLog` over a connected
`VectorStore`'s pool, on the `conversations` and `conversation_turns` tables (created by the store's schema set-up,
`tools.store.schema.CONVERSATIONS_SQL`).

Every operation is one transaction on the store's primary read pool (never a replica: a turn just stored must be read
back by the next question) and not on the write pool, whose connections queue behind the documents' write lock
during an ingest: a conversation write is a few single-row statements.

A turn is numbered when its question arrives and filled when its answer is done: `reserve_turn` inserts a row without
an answer (`answer IS NULL`: reserved, never read nor counted) numbered after the last row, holding the conversation's
row lock, so concurrent questions get consecutive numbers in the order they arrived; `fill_turn` writes the answer
into that row and `release_turn` deletes it when the answer failed. Deleting a conversation deletes its turns, the
reserved ones included (`ON DELETE CASCADE`), in the same statement; `fill_turn` takes the conversation's row lock
first, so a delete racing it leaves either the whole conversation or nothing. A reserved row whose process died before
answering stays invisible until its conversation is deleted.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any
from uuid import UUID

import asyncpg

from tools.access import UNRESTRICTED, Access
from tools.conversations import (
    Citations,
    Conversation,
    ConversationLog,
    ConversationPage,
    ConversationTurn,
    auto_title,
    check_page,
    decode_cursor,
    encode_cursor,
)
from tools.store import pools
from tools.store.records import Conn

if TYPE_CHECKING:
    from tools.store.vector_store import VectorStore

_COLUMNS = """
c.id, c.owner, c.title, c.created_at, c.updated_at,
(SELECT count(*) FROM conversation_turns t WHERE t.conversation_id = c.id AND t.answer IS NOT NULL) AS turn_count
"""
_TURN = "n, question, answer, citations::text AS citations, refused, created_at"


def _owned(param: str) -> str:
    """The condition that limits `conversations c` to the owner in parameter `param` (NULL: every owner)."""
    return f"({param}::text IS NULL OR c.owner = {param})"


READ = "BEGIN READ ONLY"
SNAPSHOT = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"


def _conversation(row: asyncpg.Record, turns: Sequence[ConversationTurn] = ()) -> Conversation:
    times = row["created_at"], row["updated_at"]
    return Conversation(row["id"], row["title"], row["owner"], *times, int(row["turn_count"]), tuple(turns))


def _turn(row: asyncpg.Record) -> ConversationTurn:
    citations: list[dict[str, Any]] = json.loads(row["citations"])
    return ConversationTurn(row["n"], row["question"], row["answer"], citations, row["refused"], row["created_at"])


class ConversationStore(ConversationLog):
    """`ConversationLog` in Postgres over `store`'s pool (the store must be connected before the first call).

    Raises (every method): the store's errors (`StoreUnavailableError`, `StoreBusyError`, `StoreQueryError`), or
    `StoreError` for bad input as documented.
    """

    def __init__(self, store: VectorStore) -> None:
        self.store = store

    def _transaction(self, action: str, begin: str = "BEGIN") -> AbstractAsyncContextManager[Conn]:
        return pools.transaction(self.store.pool, self.store.acquire_timeout_s, action, begin)

    async def create(self, title: str = "", owner: str | None = None) -> Conversation:
        """A new, empty conversation with a random UUID.

        Raises:
            StoreError: a title over `tools.conversations.MAX_TITLE_CHARS` characters.
        """
        check_page(1, title)
        async with self._transaction("creating a conversation") as conn:
            row = await conn.fetchrow(
                "INSERT INTO conversations (title, owner) VALUES ($1, $2) "
                "RETURNING id, owner, title, created_at, updated_at, 0 AS turn_count",
                title,
                owner,
            )
        assert row is not None
        return _conversation(row)

    async def get(
        self,
        conversation_id: UUID,
        *,
        last_turns: int | None = None,
        owner: str | None = None,
        access: Access = UNRESTRICTED,
    ) -> Conversation | None:
        """The conversation with its turns, oldest first (only the last `last_turns` when given; 0: none), in one
        snapshot; None when absent or owned by another key. A restricted `access` reads under row-level security
        (`tools.store.access`): a turn citing a chunk it may not read is left out."""
        restricted = access.set_local_sql()
        begin = f"{SNAPSHOT}; {restricted}" if restricted else SNAPSHOT
        async with self._transaction("reading a conversation", begin) as conn:
            row = await conn.fetchrow(
                f"SELECT {_COLUMNS} FROM conversations c WHERE c.id = $1 AND {_owned('$2')}", conversation_id, owner
            )
            if row is None:
                return None
            turns = await _turns(conn, conversation_id, last_turns)
        return _conversation(row, turns)

    async def page(self, limit: int = 50, cursor: str | None = None, owner: str | None = None) -> ConversationPage:
        """One page, most recently updated first (ties by id), with the total, in one snapshot: one index range scan
        on (updated_at, id) from the cursor.

        Raises:
            StoreError: `limit` outside 1..`MAX_PAGE`, or a cursor this service did not issue.
        """
        check_page(limit)
        after = None if cursor is None else decode_cursor(cursor)
        async with self._transaction("listing conversations", SNAPSHOT) as conn:
            if after is None:
                rows = await conn.fetch(
                    f"SELECT {_COLUMNS} FROM conversations c WHERE {_owned('$1')} "
                    "ORDER BY c.updated_at DESC, c.id DESC LIMIT $2",
                    owner,
                    limit + 1,
                )
            else:
                rows = await conn.fetch(
                    f"SELECT {_COLUMNS} FROM conversations c WHERE {_owned('$1')} "
                    "AND (c.updated_at, c.id) < ($2, $3) ORDER BY c.updated_at DESC, c.id DESC LIMIT $4",
                    owner,
                    after[0],
                    after[1],
                    limit + 1,
                )
            total = await conn.fetchval(f"SELECT count(*) FROM conversations c WHERE {_owned('$1')}", owner)
        listed = [_conversation(r) for r in rows[:limit]]
        return ConversationPage(listed, int(total), encode_cursor(listed[-1]) if len(rows) > limit else None)

    async def reserve_turn(self, conversation_id: UUID, question: str, owner: str | None = None) -> int | None:
        """Insert a reserved (answerless, invisible) turn for `question`, numbered after every row of the
        conversation, in one transaction holding the conversation's row lock.

        Returns:
            Its number; None when the conversation is absent or another key's (nothing stored).
        """
        async with self._transaction("reserving a conversation turn") as conn:
            found = await conn.fetchval(
                f"SELECT c.id FROM conversations c WHERE c.id = $1 AND {_owned('$2')} FOR NO KEY UPDATE",
                conversation_id,
                owner,
            )
            if found is None:
                return None
            n = await conn.fetchval(
                """
                INSERT INTO conversation_turns (conversation_id, n, question, answer)
                SELECT $1, coalesce(max(n), 0) + 1, $2, NULL FROM conversation_turns WHERE conversation_id = $1
                RETURNING n
                """,
                conversation_id,
                question,
            )
        return int(n)

    async def fill_turn(
        self, conversation_id: UUID, n: int, answer: str, citations: Citations = (), refused: bool = False
    ) -> ConversationTurn | None:
        """Write the answer into reserved turn `n`, move `updated_at` and name an untitled conversation after its
        first question, in one transaction that takes the conversation's row lock first (a delete waits for it, or
        it finds nothing).

        Returns:
            The stored turn; None when the conversation or the reservation is gone (nothing stored).
        """
        async with self._transaction("storing a conversation turn") as conn:
            title = await conn.fetchval(
                "SELECT title FROM conversations WHERE id = $1 FOR NO KEY UPDATE", conversation_id
            )
            if title is None:
                return None
            row = await conn.fetchrow(
                f"""
                UPDATE conversation_turns SET answer = $3, citations = $4::jsonb, refused = $5,
                    created_at = clock_timestamp()
                WHERE conversation_id = $1 AND n = $2 AND answer IS NULL RETURNING {_TURN}
                """,
                conversation_id,
                n,
                answer,
                json.dumps(list(citations)),
                refused,
            )
            if row is None:
                return None
            if not title:
                first = await conn.fetchval(
                    "SELECT question FROM conversation_turns WHERE conversation_id = $1 ORDER BY n LIMIT 1",
                    conversation_id,
                )
                title = auto_title(first)
            await conn.execute(
                "UPDATE conversations SET updated_at = clock_timestamp(), title = $2 WHERE id = $1",
                conversation_id,
                title,
            )
        return _turn(row)

    async def release_turn(self, conversation_id: UUID, n: int) -> None:
        """Delete reserved turn `n` (nothing when it is finished or gone)."""
        async with self._transaction("releasing a reserved conversation turn") as conn:
            await conn.execute(
                "DELETE FROM conversation_turns WHERE conversation_id = $1 AND n = $2 AND answer IS NULL",
                conversation_id,
                n,
            )

    async def delete(self, conversation_id: UUID, owner: str | None = None) -> bool:
        """Delete the conversation and its turns in one statement; False when absent or owned by another key."""
        async with self._transaction("deleting a conversation (nothing was deleted)") as conn:
            deleted = await conn.fetchval(
                f"DELETE FROM conversations c WHERE c.id = $1 AND {_owned('$2')} RETURNING c.id", conversation_id, owner
            )
        return deleted is not None


async def _turns(conn: Conn, conversation_id: UUID, last_turns: int | None) -> list[ConversationTurn]:
    """The finished turns of a conversation, oldest first; only the last `last_turns` when given."""
    if last_turns is not None and last_turns <= 0:
        return []
    rows = await conn.fetch(
        f"""
        SELECT {_TURN} FROM conversation_turns
        WHERE conversation_id = $1 AND answer IS NOT NULL ORDER BY n DESC LIMIT $2
        """,
        conversation_id,
        last_turns,
    )
    return [_turn(r) for r in reversed(rows)]
