"""`InMemoryConversations`: the `tools.conversations.ConversationLog` of tests and of apps built without Postgres
(a `agent.wiring.Services` made by hand); the same behaviour as the Postgres store, kept in one process' memory."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any
from uuid import UUID, uuid4

from tools.conversations import (
    Conversation,
    ConversationPage,
    ConversationTurn,
    auto_title,
    check_page,
    decode_cursor,
    encode_cursor,
)


class InMemoryConversations:
    """Conversations in a dict; safe within one event loop (no method awaits between its reads and writes)."""

    def __init__(self) -> None:
        self._conversations: dict[UUID, Conversation] = {}
        self._turns: dict[UUID, list[ConversationTurn]] = {}

    def _visible(self, conversation_id: UUID, owner: str | None) -> Conversation | None:
        conversation = self._conversations.get(conversation_id)
        if conversation is None or (owner is not None and conversation.owner != owner):
            return None
        return conversation

    async def create(self, title: str = "", owner: str | None = None) -> Conversation:
        """A new, empty conversation. Raises StoreError for a title over `MAX_TITLE_CHARS`."""
        check_page(1, title)
        now = datetime.now(UTC)
        conversation = Conversation(uuid4(), title, owner, now, now, 0)
        self._conversations[conversation.id] = conversation
        self._turns[conversation.id] = []
        return conversation

    async def get(
        self, conversation_id: UUID, *, last_turns: int | None = None, owner: str | None = None
    ) -> Conversation | None:
        """The conversation with its turns (the last `last_turns` when given); None when absent."""
        conversation = self._visible(conversation_id, owner)
        if conversation is None:
            return None
        turns = self._turns[conversation_id]
        kept = turns if last_turns is None else turns[max(0, len(turns) - last_turns) :] if last_turns > 0 else []
        return replace(conversation, turns=tuple(kept))

    async def page(self, limit: int = 50, cursor: str | None = None, owner: str | None = None) -> ConversationPage:
        """One page, most recently updated first. Raises StoreError for a bad limit or cursor."""
        check_page(limit)
        after = None if cursor is None else decode_cursor(cursor)
        visible = sorted(
            (c for c in self._conversations.values() if owner is None or c.owner == owner),
            key=lambda c: (c.updated_at, c.id),
            reverse=True,
        )
        rest = [c for c in visible if after is None or (c.updated_at, c.id) < after]
        listed = rest[:limit]
        next_cursor = encode_cursor(listed[-1]) if len(rest) > limit else None
        return ConversationPage(listed, len(visible), next_cursor)

    async def add_turn(
        self,
        conversation_id: UUID,
        question: str,
        answer: str,
        citations: Sequence[dict[str, Any]] = (),
        refused: bool = False,
        owner: str | None = None,
    ) -> ConversationTurn | None:
        """Append one turn; None when the conversation is absent."""
        conversation = self._visible(conversation_id, owner)
        if conversation is None:
            return None
        turns = self._turns[conversation_id]
        now = datetime.now(UTC)
        turn = ConversationTurn(len(turns) + 1, question, answer, [dict(c) for c in citations], refused, now)
        turns.append(turn)
        self._conversations[conversation_id] = replace(
            conversation, title=conversation.title or auto_title(question), updated_at=now, turn_count=len(turns)
        )
        return turn

    async def delete(self, conversation_id: UUID, owner: str | None = None) -> bool:
        """Delete the conversation and its turns; False when it was absent."""
        if self._visible(conversation_id, owner) is None:
            return False
        del self._conversations[conversation_id], self._turns[conversation_id]
        return True
