"""Follow-up questions in a stored conversation, without servers: `RagApp` over the in-memory collection, the
in-memory conversation log and a scripted pydantic-ai FunctionModel. A follow-up that names nothing ("and what about
its side effects?") is searched with the subject of the earlier turn (`agent.core.followup.search_query`), the
earlier turns reach the model as history (bounded by CHAT_HISTORY_TURNS, citation markers removed), and the turn is
stored. The same against Postgres: test_conversations_store.py; over HTTP: test_conversations_http.py."""

from __future__ import annotations

from datetime import UTC, datetime
from uuid import uuid4

import pytest
from pydantic_ai.messages import ModelRequest, ModelResponse

from agent.core.answer import AnswerRequest
from agent.core.conversations import ConversationNotFoundError, follow_up, history_messages
from agent.core.errors import InputError
from tests.conversation_rig import FOLLOW_UP, SUBJECT, Model, app, texts
from tools.conversations import ConversationTurn, auto_title
from tools.in_memory_conversations import InMemoryConversations


async def test_follow_up_is_searched_with_the_subject_of_the_earlier_turn() -> None:
    model = Model()
    rag, _ = app(model)
    conversation = await rag.create_conversation()
    first = await rag.ask(SUBJECT, conversation=conversation)
    assert first.searches == [SUBJECT] and not first.refused
    second = await rag.ask(FOLLOW_UP, conversation=await rag.conversation(conversation.id))
    assert len(second.searches) == 1 and second.searches[0].startswith(FOLLOW_UP)
    assert "Vitamin B12" in second.searches[0]  # the subject of turn 1 is in the follow-up's search query
    assert not second.refused and [c.doc_id for c in second.citations] == ["b12"]
    history = texts(model.seen[1])
    assert history[:2] == [("user", SUBJECT), ("model", "It raises it.")]  # the marker [1] is gone
    assert FOLLOW_UP in history[-1][1]
    stored = await rag.conversation(conversation.id)
    assert [(t.n, t.question) for t in stored.turns] == [(1, SUBJECT), (2, FOLLOW_UP)]
    assert stored.turns[1].answer == "It raises it [1]." and stored.turns[1].citations[0]["doc_id"] == "b12"
    assert stored.title == SUBJECT and stored.turn_count == 2


async def test_the_same_follow_up_without_the_conversation_is_refused() -> None:
    model = Model()
    rag, _ = app(model)
    alone = await rag.ask(FOLLOW_UP)
    assert alone.refused and alone.searches == [FOLLOW_UP] and model.seen == []


async def test_history_and_query_keep_only_the_last_chat_history_turns() -> None:
    model = Model()
    rag, _ = app(model, chat_history_turns=1)
    conversation = await rag.create_conversation("bounded")
    for question in ("Folate intake and homocysteine", SUBJECT):
        await rag.ask(question, conversation=await rag.conversation(conversation.id))
    result = await rag.ask(FOLLOW_UP, conversation=await rag.conversation(conversation.id))
    assert "Folate" not in result.searches[0] and "Vitamin B12" in result.searches[0]
    assert next(text for role, text in texts(model.seen[-1]) if role == "user") == SUBJECT
    assert (await rag.conversation(conversation.id)).title == "bounded"  # a given title stays


async def test_no_history_turns_means_one_off_questions() -> None:
    model = Model()
    rag, _ = app(model, chat_history_turns=0)
    conversation = await rag.create_conversation()
    await rag.ask(SUBJECT, conversation=conversation)
    result = await rag.ask(FOLLOW_UP, conversation=await rag.conversation(conversation.id))
    assert result.refused and result.searches == [FOLLOW_UP]
    assert (await rag.conversation(conversation.id)).turn_count == 2  # the refusal is a turn too


async def test_a_conversation_deleted_before_the_question_is_not_answered_nor_written_to() -> None:
    model = Model()
    rag, conversations = app(model)
    conversation = await rag.create_conversation()
    await rag.delete_conversation(conversation.id)
    with pytest.raises(ConversationNotFoundError, match="does not exist"):
        await rag.ask(SUBJECT, conversation=conversation)
    assert model.seen == []  # refused when the question arrived, before any LLM work (a delete while the answer
    # runs: test_conversation_races.py)
    assert await conversations.get(conversation.id) is None
    with pytest.raises(ConversationNotFoundError, match=str(conversation.id)):
        await rag.conversation(conversation.id)
    with pytest.raises(ConversationNotFoundError):
        await rag.delete_conversation(uuid4())


async def test_conversation_input_is_checked() -> None:
    rag, _ = app(Model())
    with pytest.raises(InputError, match="title"):
        await rag.create_conversation("x" * 201)
    with pytest.raises(InputError, match="cursor"):
        await rag.conversation_page(cursor="not-a-cursor")
    with pytest.raises(InputError, match="limit"):
        await rag.conversation_page(limit=0)


def test_follow_up_request_and_history_messages() -> None:
    turns = [ConversationTurn(i, f"q{i}", f"a{i} [1].", [], False, datetime.now(UTC)) for i in range(1, 4)]
    request = AnswerRequest("and then?")
    assert follow_up(request, turns, 0) is request and follow_up(request, [], 3) is request
    two = follow_up(request, turns, 2)
    assert two.earlier_questions == ("q2", "q3") and two.question == "and then?" and two.retrieval_query is None
    assert [type(m) for m in two.history] == [ModelRequest, ModelResponse, ModelRequest, ModelResponse]
    assert texts(list(two.history)) == [("user", "q2"), ("model", "a2."), ("user", "q3"), ("model", "a3.")]
    assert texts(history_messages(turns[:1])) == [("user", "q1"), ("model", "a1.")]
    fewer = follow_up(request, turns[:2], 3)  # fewer turns than the budget: all of them
    assert fewer.earlier_questions == ("q1", "q2") and len(fewer.history) == 4


def test_auto_title_is_one_line_and_bounded() -> None:
    assert auto_title("  What   raises\nhomocysteine? ") == "What raises homocysteine?"
    long = auto_title("word " * 40)
    assert len(long) == 80 and long.endswith("…")


async def test_in_memory_pages_are_newest_first_and_scoped_by_owner() -> None:
    log = InMemoryConversations()
    made = [await log.create(f"c{i}", owner="k1" if i % 2 else None) for i in range(5)]
    await log.add_turn(made[0].id, "q", "a")  # c0 becomes the most recently updated
    first = await log.page(limit=2)
    assert [c.title for c in first.conversations] == ["c0", "c4"] and first.total == 5 and first.next_cursor
    rest = await log.page(limit=10, cursor=first.next_cursor)
    assert [c.title for c in rest.conversations] == ["c3", "c2", "c1"] and rest.next_cursor is None
    mine = await log.page(owner="k1")
    assert [c.title for c in mine.conversations] == ["c3", "c1"] and mine.total == 2
    assert await log.get(made[0].id, owner="k1") is None and not await log.delete(made[0].id, owner="k1")
    assert await log.add_turn(made[0].id, "q", "a", owner="k1") is None
    assert await log.delete(made[1].id, owner="k1") and await log.get(made[1].id) is None
    both = await log.add_turn(made[2].id, "q1", "a1"), await log.add_turn(made[2].id, "q2", "a2")
    read = await log.get(made[2].id, last_turns=5)
    assert read is not None and [t.n for t in read.turns] == [t.n for t in both if t] == [1, 2]
