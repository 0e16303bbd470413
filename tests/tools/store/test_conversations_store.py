"""Conversations in the real Postgres (`tools.store.conversations.ConversationStore`): tables made by the store's
schema set-up, turns numbered in order (also when appended concurrently), citations kept as JSON, newest-first keyset
pages, owner scoping, deleting a conversation deletes its turns; and a follow-up through `RagApp` stored there."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from uuid import uuid4

import asyncpg
import pytest

from agent.config.settings import Settings
from agent.core.app import RagApp
from agent.core.wiring import Services
from evals.retrieval_eval import ensure_database
from tests.agent_corpus import DOCUMENTS
from tests.conversation_rig import FOLLOW_UP, SUBJECT, Model
from tools.errors import StoreError
from tools.in_memory import InMemoryCollection
from tools.store import VectorStore
from tools.store.conversations import ConversationStore

pytestmark = pytest.mark.stack

DIM = 384
CITATION = {"doc_id": "b12", "chunk_id": "b12#0", "score": 0.5, "passage": 1, "title": "Vitamin B12", "section": []}


@pytest.fixture
async def store(postgres_url: str) -> AsyncIterator[VectorStore]:
    url = await ensure_database(postgres_url, "test_conversations")
    async with VectorStore(url, "all-minilm-l6-v2", DIM) as store:
        conn = await asyncpg.connect(url)
        try:
            await conn.execute("DELETE FROM conversations")
        finally:
            await conn.close()
        yield store


async def count_turns(store: VectorStore) -> int:
    return int(await store.pool.fetchval("SELECT count(*) FROM conversation_turns"))


async def test_turns_are_numbered_stored_and_read_back(store: VectorStore) -> None:
    log = ConversationStore(store)
    made = await log.create()
    assert made.title == "" and made.turn_count == 0 and made.owner is None and made.created_at == made.updated_at
    first = await log.add_turn(made.id, "What raises homocysteine?", "B12 deficiency does [1].", [CITATION])
    second = await log.add_turn(made.id, "and its side effects?", "The documents do not cover it.", refused=True)
    assert first is not None and second is not None and (first.n, second.n) == (1, 2)
    read = await log.get(made.id)
    assert read is not None and read.turn_count == 2 and read.title == "What raises homocysteine?"
    assert read.updated_at > made.updated_at and read.updated_at.utcoffset() == timedelta(0)
    assert [(t.n, t.question, t.refused) for t in read.turns] == [
        (1, "What raises homocysteine?", False),
        (2, "and its side effects?", True),
    ]
    assert read.turns[0].citations == [CITATION] and read.turns[1].citations == []
    last = await log.get(made.id, last_turns=1)
    assert last is not None and [t.n for t in last.turns] == [2] and last.turn_count == 2
    none = await log.get(made.id, last_turns=0)
    assert none is not None and none.turns == ()
    assert await log.get(uuid4()) is None and await log.add_turn(uuid4(), "q", "a") is None


async def test_concurrent_turns_get_consecutive_numbers(store: VectorStore) -> None:
    log = ConversationStore(store)
    made = await log.create("busy")
    turns = await asyncio.gather(*(log.add_turn(made.id, f"q{i}", f"a{i}") for i in range(12)))
    assert sorted(t.n for t in turns if t is not None) == list(range(1, 13))
    read = await log.get(made.id)
    assert read is not None and read.turn_count == 12 and read.title == "busy"


async def test_deleting_a_conversation_deletes_its_turns(store: VectorStore) -> None:
    log = ConversationStore(store)
    kept, gone = await log.create("kept"), await log.create("gone")
    for conversation in (kept, gone):
        await log.add_turn(conversation.id, "q", "a")
        await log.add_turn(conversation.id, "q2", "a2")
    assert await count_turns(store) == 4
    assert await log.delete(gone.id) and not await log.delete(gone.id)
    assert await log.get(gone.id) is None and await count_turns(store) == 2
    read = await log.get(kept.id)
    assert read is not None and read.turn_count == 2


async def test_pages_are_newest_first_with_a_total_and_owner_scope(store: VectorStore) -> None:
    log = ConversationStore(store)
    made = [await log.create(f"c{i}", owner="key-1" if i % 2 else None) for i in range(5)]
    await log.add_turn(made[0].id, "q", "a")  # c0 becomes the most recently updated
    first = await log.page(limit=2)
    assert [c.title for c in first.conversations] == ["c0", "c4"] and first.total == 5 and first.next_cursor
    rest = await log.page(limit=10, cursor=first.next_cursor)
    assert [c.title for c in rest.conversations] == ["c3", "c2", "c1"] and rest.next_cursor is None
    assert rest.conversations[0].turns == () and first.conversations[0].turn_count == 1
    mine = await log.page(owner="key-1")
    assert [c.title for c in mine.conversations] == ["c3", "c1"] and mine.total == 2
    assert await log.get(made[0].id, owner="key-1") is None  # another key's conversation is absent
    assert await log.add_turn(made[0].id, "q", "a", owner="key-1") is None
    assert not await log.delete(made[0].id, owner="key-1")
    assert await log.delete(made[1].id, owner="key-1") and await log.get(made[1].id) is None
    with pytest.raises(StoreError, match="cursor"):
        await log.page(cursor="bm90IGEgY3Vyc29y")
    with pytest.raises(StoreError, match="limit"):
        await log.page(limit=0)


async def test_schema_set_up_creates_missing_conversation_tables(store: VectorStore) -> None:
    conn = await asyncpg.connect(store.dsn)
    try:
        await conn.execute("DROP TABLE conversation_turns; DROP TABLE conversations")
    finally:
        await conn.close()
    async with VectorStore(store.dsn, "all-minilm-l6-v2", DIM) as again:  # an older store, migrated at connect
        made = await ConversationStore(again).create()
        assert await ConversationStore(again).add_turn(made.id, "q", "a") is not None


async def test_a_follow_up_through_the_app_is_stored_in_postgres(store: VectorStore) -> None:
    model = Model()
    collection = InMemoryCollection(DOCUMENTS)
    services = Services(collection, collection, model.model, conversations=ConversationStore(store))
    rag = RagApp(Settings.model_validate({"refusal_min_score": 0.3}), services)
    conversation = await rag.create_conversation()
    await rag.ask(SUBJECT, conversation=conversation)
    result = await rag.ask(FOLLOW_UP, conversation=await rag.conversation(conversation.id, last_turns=3))
    assert "Vitamin B12" in result.searches[0] and not result.refused
    stored = await rag.conversation(conversation.id)
    assert [t.question for t in stored.turns] == [SUBJECT, FOLLOW_UP]
    assert stored.turns[1].citations[0]["doc_id"] == "b12"
