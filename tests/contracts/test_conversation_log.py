"""`tools.conversations.ConversationLog`: the in-memory double and the Postgres store answer alike (turn order,
reservations, titles, pages, owners, deletes, bad input)."""

from __future__ import annotations

import asyncio
from uuid import uuid4

import pytest

from tests.contracts.ports import stored_chunk
from tools.access import NOBODY, UNRESTRICTED, caller_access
from tools.conversations import ConversationLog
from tools.errors import StoreError

CITATION = {"doc_id": "b12", "chunk_id": "b12#0", "score": 0.5, "passage": 1, "title": "Vitamin B12", "section": []}


async def test_turns_are_numbered_in_order_and_name_an_untitled_conversation(conversation_log: ConversationLog) -> None:
    made = await conversation_log.create()
    assert (made.title, made.turn_count, made.owner, made.turns) == ("", 0, None, ())
    first = await conversation_log.add_turn(made.id, "What raises homocysteine?", "B12 deficiency [1].", [CITATION])
    second = await conversation_log.add_turn(made.id, "and folate?", "Not covered.", refused=True)
    assert first is not None and second is not None and (first.n, second.n) == (1, 2)
    read = await conversation_log.get(made.id)
    assert read is not None and read.title == "What raises homocysteine?" and read.turn_count == 2
    assert [(t.n, t.question, t.answer, t.refused) for t in read.turns] == [
        (1, "What raises homocysteine?", "B12 deficiency [1].", False),
        (2, "and folate?", "Not covered.", True),
    ]
    assert list(read.turns[0].citations) == [CITATION] and read.updated_at >= made.updated_at
    last = await conversation_log.get(made.id, last_turns=1)
    assert last is not None and [t.n for t in last.turns] == [2] and last.turn_count == 2
    none = await conversation_log.get(made.id, last_turns=0)
    assert none is not None and none.turns == ()


async def test_a_given_title_is_kept(conversation_log: ConversationLog) -> None:
    made = await conversation_log.create("Vitamins")
    await conversation_log.add_turn(made.id, "What raises homocysteine?", "B12 deficiency.")
    read = await conversation_log.get(made.id)
    assert read is not None and read.title == "Vitamins"


async def test_a_reserved_turn_is_invisible_until_filled_and_its_number_is_not_reused(
    conversation_log: ConversationLog,
) -> None:
    made = await conversation_log.create()
    first = await conversation_log.reserve_turn(made.id, "first?")
    second = await conversation_log.reserve_turn(made.id, "second?")
    assert (first, second) == (1, 2)
    read = await conversation_log.get(made.id)
    assert read is not None and read.turns == () and read.turn_count == 0
    filled = await conversation_log.fill_turn(made.id, 2, "two")
    assert filled is not None and (filled.n, filled.question, filled.answer) == (2, "second?", "two")
    await conversation_log.release_turn(made.id, 1)
    third = await conversation_log.reserve_turn(made.id, "third?")
    assert third == 3
    assert await conversation_log.fill_turn(made.id, 1, "released") is None
    read = await conversation_log.get(made.id)
    assert read is not None and [t.n for t in read.turns] == [2] and read.title == "first?"  # the first question asked


async def test_concurrent_appends_get_distinct_numbers_in_order(conversation_log: ConversationLog) -> None:
    made = await conversation_log.create()
    turns = await asyncio.gather(*(conversation_log.add_turn(made.id, f"q{i}", f"a{i}") for i in range(8)))
    assert sorted(t.n for t in turns if t is not None) == list(range(1, 9))
    read = await conversation_log.get(made.id)
    assert read is not None and [t.n for t in read.turns] == list(range(1, 9))
    assert all(t.answer == "a" + t.question[1:] for t in read.turns)


async def test_absent_conversations_store_nothing(conversation_log: ConversationLog) -> None:
    missing = uuid4()
    assert await conversation_log.get(missing) is None
    assert await conversation_log.add_turn(missing, "q", "a") is None
    assert await conversation_log.reserve_turn(missing, "q") is None
    assert await conversation_log.fill_turn(missing, 1, "a") is None
    assert await conversation_log.delete(missing) is False
    await conversation_log.release_turn(missing, 1)  # nothing to release: no error
    assert (await conversation_log.page()).total == 0


async def test_pages_are_newest_first_and_reach_every_conversation(conversation_log: ConversationLog) -> None:
    made = [await conversation_log.create(f"c{i}") for i in range(5)]
    await conversation_log.add_turn(made[0].id, "q", "a")  # the oldest is now the most recently updated
    seen, cursor = [], None
    while True:
        page = await conversation_log.page(limit=2, cursor=cursor)
        assert page.total == 5 and len(page.conversations) <= 2
        seen += [c.title for c in page.conversations]
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert seen == ["c0", "c4", "c3", "c2", "c1"]


async def test_an_owner_sees_only_its_own(conversation_log: ConversationLog) -> None:
    mine = await conversation_log.create("mine", owner="key-a")
    theirs = await conversation_log.create("theirs", owner="key-b")
    assert mine.owner == "key-a"
    assert await conversation_log.get(theirs.id, owner="key-a") is None
    assert await conversation_log.add_turn(theirs.id, "q", "a", owner="key-a") is None
    assert await conversation_log.reserve_turn(theirs.id, "q", owner="key-a") is None
    assert await conversation_log.delete(theirs.id, owner="key-a") is False
    page = await conversation_log.page(owner="key-a")
    assert [c.title for c in page.conversations] == ["mine"] and page.total == 1
    assert (await conversation_log.page()).total == 2  # no owner: all
    read = await conversation_log.get(theirs.id)
    assert read is not None and read.turn_count == 0


async def test_delete_removes_the_conversation_and_its_turns(conversation_log: ConversationLog) -> None:
    made = await conversation_log.create()
    await conversation_log.add_turn(made.id, "q", "a")
    reserved = await conversation_log.reserve_turn(made.id, "pending?")
    assert await conversation_log.delete(made.id) is True
    assert await conversation_log.get(made.id) is None
    assert reserved is not None and await conversation_log.fill_turn(made.id, reserved, "late") is None
    assert await conversation_log.delete(made.id) is False


@pytest.mark.parametrize("limit", [0, -1])
async def test_a_bad_page_limit_is_refused(conversation_log: ConversationLog, limit: int) -> None:
    with pytest.raises(StoreError):
        await conversation_log.page(limit=limit)


async def test_a_bad_cursor_is_refused(conversation_log: ConversationLog) -> None:
    with pytest.raises(StoreError):
        await conversation_log.page(cursor="not-a-cursor")


async def test_an_overlong_title_is_refused(conversation_log: ConversationLog) -> None:
    from tools.conversations import MAX_TITLE_CHARS

    with pytest.raises(StoreError):
        await conversation_log.create("x" * (MAX_TITLE_CHARS + 1))


async def test_a_turn_citing_a_chunk_the_reader_may_not_read_is_left_out(conversation_log: ConversationLog) -> None:
    secret = await stored_chunk(conversation_log, "secret", ["eng"])
    public = await stored_chunk(conversation_log, "open", [])
    made = await conversation_log.create()
    await conversation_log.add_turn(made.id, "open?", "Open [1].", [CITATION | {"doc_id": "open", "chunk_id": public}])
    await conversation_log.add_turn(made.id, "secret?", "Secret [1].", [CITATION | {"chunk_id": secret}])
    await conversation_log.add_turn(made.id, "gone?", "Deleted since [1].", [CITATION | {"chunk_id": "gone#0"}])
    await conversation_log.add_turn(made.id, "none?", "No citation.")
    for access, questions in (
        (NOBODY, ["open?", "gone?", "none?"]),
        (caller_access(["ops"]), ["open?", "gone?", "none?"]),
        (caller_access(["eng"]), ["open?", "secret?", "gone?", "none?"]),
        (UNRESTRICTED, ["open?", "secret?", "gone?", "none?"]),
    ):
        read = await conversation_log.get(made.id, access=access)
        assert read is not None and [t.question for t in read.turns] == questions
        assert read.turn_count == len(questions)
    last = await conversation_log.get(made.id, last_turns=2, access=NOBODY)
    assert last is not None and [t.question for t in last.turns] == ["gone?", "none?"]
