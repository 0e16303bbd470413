"""`InMemoryConversations`: the `tools.conversations.ConversationLog` of tests and of apps built without Postgres
(a `agent.core.wiring.Services` made by hand); the same behaviour as the Postgres store, kept in one process' memory."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from uuid import UUID, uuid4

from tools import conversations
from tools.access import UNRESTRICTED, Access
from tools.conversations import Citations, Conversation, ConversationLog, ConversationPage, ConversationTurn
from tools.records import cites_readable


class InMemoryConversations(ConversationLog):
    """Conversations in a dict; safe within one event loop (no method awaits between its reads and writes)."""

    def __init__(self) -> None:
        self.chunk_groups: dict[str, tuple[str, ...]] = {}
        """chunk id -> the groups of its document, for the chunks citations name (the store's `chunks.groups`);
        a chunk absent here is readable by everyone (public, or deleted since)."""
        self._conversations: dict[UUID, Conversation] = {}
        self._turns: dict[UUID, dict[int, ConversationTurn | str]] = {}
        """Per conversation, its turns by number: a finished turn, or the question of a reserved one."""

    def _finished(self, conversation_id: UUID) -> list[ConversationTurn]:
        slots = self._turns[conversation_id]
        return [t for _, t in sorted(slots.items()) if isinstance(t, ConversationTurn)]

    def _readable(self, turn: ConversationTurn, access: Access) -> bool:
        """Whether `access` may read every chunk `turn` cites (the store's `rag_citations_readable`)."""
        return cites_readable(turn.citations, self.chunk_groups, access)

    def _visible(self, conversation_id: UUID, owner: str | None) -> Conversation | None:
        conversation = self._conversations.get(conversation_id)
        if conversation is None or (owner is not None and conversation.owner != owner):
            return None
        return conversation

    async def create(self, title: str = "", owner: str | None = None) -> Conversation:
        """A new, empty conversation. Raises StoreError for a title over `MAX_TITLE_CHARS`."""
        conversations.check_page(1, title)
        now = datetime.now(UTC)
        conversation = Conversation(uuid4(), title, owner, now, now, 0)
        self._conversations[conversation.id] = conversation
        self._turns[conversation.id] = {}
        return conversation

    async def get(
        self,
        conversation_id: UUID,
        *,
        last_turns: int | None = None,
        owner: str | None = None,
        access: Access = UNRESTRICTED,
    ) -> Conversation | None:
        """The conversation with its finished turns (the last `last_turns` when given), those citing a chunk
        `access` may not read (`chunk_groups`) left out; None when absent."""
        conversation = self._visible(conversation_id, owner)
        if conversation is None:
            return None
        turns = [t for t in self._finished(conversation_id) if self._readable(t, access)]
        kept = turns if last_turns is None else turns[max(0, len(turns) - last_turns) :] if last_turns > 0 else []
        return replace(conversation, turns=tuple(kept), turn_count=len(turns))

    async def page(self, limit: int = 50, cursor: str | None = None, owner: str | None = None) -> ConversationPage:
        """One page, most recently updated first. Raises StoreError for a bad limit or cursor."""
        conversations.check_page(limit)
        after = None if cursor is None else conversations.decode_cursor(cursor)
        visible = sorted(
            (c for c in self._conversations.values() if owner is None or c.owner == owner),
            key=lambda c: (c.updated_at, c.id),
            reverse=True,
        )
        rest = [c for c in visible if after is None or (c.updated_at, c.id) < after]
        listed = rest[:limit]
        next_cursor = conversations.encode_cursor(listed[-1]) if len(rest) > limit else None
        return ConversationPage(listed, len(visible), next_cursor)

    async def reserve_turn(self, conversation_id: UUID, question: str, owner: str | None = None) -> int | None:
        """The next turn number, reserved for `question` (invisible until filled); None when absent."""
        if self._visible(conversation_id, owner) is None:
            return None
        slots = self._turns[conversation_id]
        n = max(slots, default=0) + 1
        slots[n] = question
        return n

    async def fill_turn(
        self, conversation_id: UUID, n: int, answer: str, citations: Citations = (), refused: bool = False
    ) -> ConversationTurn | None:
        """Store the answer of reserved turn `n`; None when the conversation or the reservation is gone."""
        conversation = self._conversations.get(conversation_id)
        slots = self._turns.get(conversation_id, {})
        question = slots.get(n)
        if conversation is None or not isinstance(question, str):
            return None
        now = datetime.now(UTC)
        turn = ConversationTurn(n, question, answer, [dict(c) for c in citations], refused, now)
        slots[n] = turn
        first = slots[min(slots)]
        title = conversation.title or conversations.auto_title(first if isinstance(first, str) else first.question)
        count = len(self._finished(conversation_id))
        self._conversations[conversation_id] = replace(conversation, title=title, updated_at=now, turn_count=count)
        return turn

    async def release_turn(self, conversation_id: UUID, n: int) -> None:
        """Drop reserved turn `n` (nothing when it is finished or gone)."""
        slots = self._turns.get(conversation_id, {})
        if isinstance(slots.get(n), str):
            del slots[n]

    async def delete(self, conversation_id: UUID, owner: str | None = None) -> bool:
        """Delete the conversation and its turns; False when it was absent."""
        if self._visible(conversation_id, owner) is None:
            return False
        del self._conversations[conversation_id], self._turns[conversation_id]
        return True
