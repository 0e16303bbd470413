"""`rag chat` keeps its session as a stored conversation, without servers: `agent.cli.chat.run_chat` on a `RagApp` over
the in-memory collection, conversation log and a scripted FunctionModel, with the console's input scripted. The id
is printed, a follow-up is searched with the earlier turn's subject, and `--conversation ID` resumes it. The same
subprocess against the real stack: test_chat_conversation_stack.py."""

from __future__ import annotations

from uuid import UUID, uuid4

import pytest

from agent.cli.chat import run_chat
from agent.core.app import RagApp
from agent.core.conversations import ConversationNotFoundError
from tests.conversation_rig import FOLLOW_UP, SUBJECT, Model, app, texts
from tests.scripted_console import ScriptedConsole
from tools.scope import SearchScope


async def chat(rag: RagApp, lines: list[str], conversation: UUID | None = None) -> tuple[UUID | None, str]:
    console = ScriptedConsole(lines)
    cid = await run_chat(rag, console, conversation_id=conversation)
    return cid, console.buffer.getvalue()


async def test_chat_stores_its_conversation_and_resumes_it() -> None:
    model = Model()
    rag, _ = app(model)
    cid, first = await chat(rag, [SUBJECT, FOLLOW_UP, ""])
    assert cid is not None and f"conversation {cid} (resume it with: rag chat --conversation {cid})" in first
    follow_up_search = [line for line in first.splitlines() if "search_documents(query=" in line][1]
    assert FOLLOW_UP in follow_up_search and "Vitamin B12" in follow_up_search  # the condensed query
    assert texts(model.seen[1])[0] == ("user", SUBJECT)
    resumed_id, resumed = await chat(rag, ["and its causes?"], conversation=cid)
    assert resumed_id == cid and f"resuming conversation {cid}" in resumed and "(2 turns)" in resumed
    assert SUBJECT in resumed and "conversation " + str(cid) + " (resume" not in resumed  # no new conversation
    resumed_search = next(line for line in resumed.splitlines() if "search_documents(query=" in line)
    assert "and its causes?" in resumed_search and "Vitamin B12" in resumed_search  # turns 1-2 were loaded
    stored = await rag.conversation(cid)
    assert [t.question for t in stored.turns] == [SUBJECT, FOLLOW_UP, "and its causes?"]


async def test_resuming_an_unknown_conversation_fails_before_any_question() -> None:
    rag, _ = app(Model())
    with pytest.raises(ConversationNotFoundError):
        await chat(rag, [SUBJECT], conversation=uuid4())
    assert (await rag.conversation_page()).total == 0


async def test_a_session_without_questions_stores_nothing() -> None:
    rag, _ = app(Model())
    cid, _ = await chat(rag, [""])
    assert cid is None and (await rag.conversation_page()).total == 0


async def test_chat_searches_only_its_scope() -> None:
    """`rag chat --collection` / `--filter`: every question of the session searches only the scope."""
    rag, _ = app(Model())
    console = ScriptedConsole([SUBJECT, ""])
    await run_chat(rag, console, scope=SearchScope(collections=("elsewhere",)))
    narrowed = console.buffer.getvalue()
    assert "← 0 passages" in narrowed and "doc b12" not in narrowed  # the collection holds nothing: refused
    _, everywhere = await chat(rag, [SUBJECT, ""])
    assert "← 4 passages" in everywhere and "doc b12" in everywhere
