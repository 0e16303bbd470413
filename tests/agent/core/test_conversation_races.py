"""Concurrent questions in one conversation, against both conversation logs (the Postgres `ConversationStore`, stack
tier, and the in-memory double): turns keep the order the questions arrived in although their answers finish in
reverse order; a delete while an answer is in flight leaves nothing of the conversation and the answer is not stored
(`ConversationNotFoundError`); a failed or cancelled answer leaves no half-written turn.

The model is a pydantic-ai FunctionModel held by one `asyncio.Event` per question, so the test decides when each
answer finishes (no sleeps)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from uuid import UUID

import pytest
from pydantic_ai.messages import ModelMessage, ModelRequest, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from agent.config.settings import Settings
from agent.core.app import RagApp
from agent.core.conversations import ConversationNotFoundError
from agent.core.wiring import Services
from evals.retrieval_eval import ensure_database
from tests.agent_corpus import COVERED, DOCUMENTS
from tools.conversations import ConversationLog
from tools.in_memory import InMemoryCollection
from tools.in_memory_conversations import InMemoryConversations
from tools.store import VectorStore
from tools.store.conversations import ConversationStore

N = 4


class Gated:
    """A FunctionModel whose answer to the question tagged `#i` waits for `release[i]`; `entered[i]` is set when
    that question reached the model. `fail[i]` makes that answer raise instead."""

    def __init__(self) -> None:
        self.entered = [asyncio.Event() for _ in range(N)]
        self.release = [asyncio.Event() for _ in range(N)]
        self.fail: set[int] = set()
        self.model = FunctionModel(stream_function=self.stream)

    async def stream(self, messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        last = messages[-1]
        assert isinstance(last, ModelRequest)
        prompt = " ".join(p.content for p in last.parts if isinstance(p, UserPromptPart) and isinstance(p.content, str))
        i = next(i for i in range(N) if f"#{i}" in prompt)
        self.entered[i].set()
        await self.release[i].wait()
        if i in self.fail:
            raise RuntimeError(f"scripted failure of answer {i}")
        yield f"Answer {i} [1]."


def question(i: int) -> str:
    return f"{COVERED} #{i}"


@pytest.fixture(params=["memory", pytest.param("postgres", marks=pytest.mark.stack)])
async def log(request: pytest.FixtureRequest) -> AsyncIterator[ConversationLog]:
    if request.param == "memory":
        yield InMemoryConversations()
        return
    url = await ensure_database(request.getfixturevalue("postgres_url"), "test_conversation_races")
    async with VectorStore(url, "all-minilm-l6-v2", 384) as store:
        await store.pool.execute("DELETE FROM conversations")
        yield ConversationStore(store)


async def rows_of(log: ConversationLog, conversation_id: UUID) -> int:
    """Every turn row the log keeps for the conversation, finished or not (what a crash would leave behind)."""
    if isinstance(log, ConversationStore):
        sql = "SELECT count(*) FROM conversation_turns WHERE conversation_id = $1"
        return int(await log.store.pool.fetchval(sql, conversation_id))
    assert isinstance(log, InMemoryConversations)
    return len(log._turns.get(conversation_id, []))


def rag_over(log: ConversationLog, model: Gated) -> RagApp:
    collection = InMemoryCollection(DOCUMENTS)
    services = Services(collection, collection, model.model, conversations=log)
    settings = {"refusal_min_score": 0.3, "answer_max_in_progress": N, "agent_policy": "always"}
    return RagApp(Settings.model_validate(settings), services)


async def test_concurrent_questions_keep_the_order_they_arrived_in(log: ConversationLog) -> None:
    model = Gated()
    rag = rag_over(log, model)
    conversation = await rag.create_conversation()
    asks = []
    for i in range(N):  # question i has reached the model before question i + 1 is asked
        asks.append(asyncio.create_task(rag.ask(question(i), conversation=conversation)))
        await model.entered[i].wait()
    for i in reversed(range(N)):  # the answers finish last-asked first
        model.release[i].set()
        await asks[i]
    stored = await rag.conversation(conversation.id)
    assert [(t.question, t.answer) for t in stored.turns] == [(question(i), f"Answer {i} [1].") for i in range(N)]
    assert [t.n for t in stored.turns] == sorted(t.n for t in stored.turns) and stored.turn_count == N
    assert stored.title == question(0)  # named after its first question, not the first answer to finish


async def test_a_delete_during_an_answer_leaves_nothing(log: ConversationLog) -> None:
    model = Gated()
    rag = rag_over(log, model)
    conversation = await rag.create_conversation()
    ask = asyncio.create_task(rag.ask(question(0), conversation=conversation))
    await model.entered[0].wait()
    await rag.delete_conversation(conversation.id)
    model.release[0].set()
    with pytest.raises(ConversationNotFoundError):
        await ask
    assert await rows_of(log, conversation.id) == 0
    with pytest.raises(ConversationNotFoundError):
        await rag.conversation(conversation.id)


async def test_a_failed_or_cancelled_answer_leaves_no_half_written_turn(log: ConversationLog) -> None:
    model = Gated()
    model.fail.add(1)
    rag = rag_over(log, model)
    conversation = await rag.create_conversation()
    asks = []
    for i in range(3):
        asks.append(asyncio.create_task(rag.ask(question(i), conversation=conversation)))
        await model.entered[i].wait()
    model.release[1].set()
    with pytest.raises(RuntimeError, match="scripted failure"):
        await asks[1]
    asks[2].cancel()
    with pytest.raises(asyncio.CancelledError):
        await asks[2]
    in_flight = await rag.conversation(conversation.id)
    assert in_flight.turns == () and in_flight.turn_count == 0  # an unfinished answer is never read as a turn
    model.release[0].set()
    await asks[0]
    stored = await rag.conversation(conversation.id)
    assert [t.question for t in stored.turns] == [question(0)] and stored.turn_count == 1
    assert await rows_of(log, conversation.id) == 1  # the failed and the cancelled question left nothing
