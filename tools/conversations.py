"""Conversations as the stores keep them: the records (`Conversation`, `ConversationTurn`, `ConversationPage`), the
`ConversationLog` protocol that `tools.store.conversations.ConversationStore` (Postgres) and
`tools.in_memory_conversations.InMemoryConversations` (tests) implement, and the keyset cursor of their listings.

Ownership: a conversation has a nullable `owner` (the id of the API key that made it). Every method takes `owner`:
None reads and changes every conversation (no key configured, or the admin key); a key id limits it to that key's
conversations, and an id owned by another key is reported as absent.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol
from uuid import UUID

from tools.access import UNRESTRICTED, Access
from tools.errors import StoreError

MAX_TITLE_CHARS = 200
"""Longest conversation title, characters."""
Citations = Sequence[dict[str, Any]]
"""The citations of one answer, as stored with its turn (JSON objects)."""
AUTO_TITLE_CHARS = 80
"""A conversation created without a title is named after its first question, cut to this many characters."""
MAX_PAGE = 1000
"""Most conversations one listing page may hold."""


@dataclass(frozen=True)
class ConversationTurn:
    """One finished turn: the question, the answer as given (citation markers included), its citations (JSON objects
    of `agent.core.results.Citation`), whether it was a refusal, and when it was stored (UTC).

    Attributes:
        n: position in the conversation, from 1, in the order the questions arrived (`ConversationLog.reserve_turn`),
            whatever order their answers finished in; the number of a question whose answer failed or was cancelled
            stays unused.
    """

    n: int
    question: str
    answer: str
    citations: list[dict[str, Any]]
    refused: bool
    created_at: datetime


@dataclass(frozen=True)
class Conversation:
    """One conversation.

    Attributes:
        id: random UUID (version 4).
        title: given at creation, else the first question cut to `AUTO_TITLE_CHARS`; empty before the first turn.
        owner: the API key id that owns it; None: made without a key or with the admin key.
        created_at, updated_at: UTC; `updated_at` moves with every stored turn.
        turn_count: turns stored.
        turns: the turns read with it, oldest first (all of them, the last few, or none: see the method).
    """

    id: UUID
    title: str
    owner: str | None
    created_at: datetime
    updated_at: datetime
    turn_count: int
    turns: tuple[ConversationTurn, ...] = ()


@dataclass(frozen=True)
class ConversationPage:
    """One page of conversations, most recently updated first.

    Attributes:
        conversations: at most the page size asked for, without their turns.
        total: conversations visible to the owner when the page was read.
        next_cursor: opaque cursor of the next page; None on the last page.
    """

    conversations: list[Conversation]
    total: int
    next_cursor: str | None


class ConversationLog(Protocol):
    """Stored conversations and their turns. `owner` limits every method to one key's conversations (None: all)."""

    async def create(self, title: str = "", owner: str | None = None) -> Conversation:
        """A new, empty conversation."""
        ...

    async def get(
        self,
        conversation_id: UUID,
        *,
        last_turns: int | None = None,
        owner: str | None = None,
        access: Access = UNRESTRICTED,
    ) -> Conversation | None:
        """The conversation with its turns (only the last `last_turns` when given); None when absent. A turn citing
        a chunk `access` may not read is left out (its answer was written from it)."""
        ...

    async def page(self, limit: int = 50, cursor: str | None = None, owner: str | None = None) -> ConversationPage:
        """One page, most recently updated first, after `cursor` (a previous page's `next_cursor`)."""
        ...

    async def add_turn(
        self,
        conversation_id: UUID,
        question: str,
        answer: str,
        citations: Citations = (),
        refused: bool = False,
        owner: str | None = None,
    ) -> ConversationTurn | None:
        """Append one finished turn (`reserve_turn` then `fill_turn`). None when the conversation is absent (nothing
        stored). Shared by every log that subclasses this protocol."""
        n = await self.reserve_turn(conversation_id, question, owner)
        return None if n is None else await self.fill_turn(conversation_id, n, answer, citations, refused)

    async def reserve_turn(self, conversation_id: UUID, question: str, owner: str | None = None) -> int | None:
        """Take the next turn number (after every finished and reserved one) for `question`, which has just arrived;
        the turn is invisible (not read, not counted) until `fill_turn`. None when the conversation is absent."""
        ...

    async def fill_turn(
        self, conversation_id: UUID, n: int, answer: str, citations: Citations = (), refused: bool = False
    ) -> ConversationTurn | None:
        """Store the answer of reserved turn `n`, move `updated_at`, and name an untitled conversation after its first
        question, all at once. None when the conversation (or the reservation) is gone: nothing is stored."""
        ...

    async def release_turn(self, conversation_id: UUID, n: int) -> None:
        """Drop reserved turn `n` whose answer failed or was cancelled (a finished turn is kept); its number stays
        unused."""
        ...

    async def delete(self, conversation_id: UUID, owner: str | None = None) -> bool:
        """Delete the conversation and its turns; False when it was absent."""
        ...


def auto_title(question: str) -> str:
    """The title of a conversation named after its first question: the question on one line, at most
    `AUTO_TITLE_CHARS` characters (`…` marks a cut)."""
    line = " ".join(question.split())
    return line if len(line) <= AUTO_TITLE_CHARS else line[: AUTO_TITLE_CHARS - 1] + "…"


def check_page(limit: int, title: str | None = None) -> None:
    """Raise StoreError for a `limit` outside 1..`MAX_PAGE` or a title over `MAX_TITLE_CHARS` characters."""
    if not 1 <= limit <= MAX_PAGE:
        raise StoreError(f"limit={limit}; expected 1..{MAX_PAGE}")
    if title is not None and len(title) > MAX_TITLE_CHARS:
        raise StoreError(f"title of {len(title)} characters; expected at most {MAX_TITLE_CHARS}")


def encode_cursor(conversation: Conversation) -> str:
    """The opaque cursor of the page after `conversation` in (updated_at, id) descending order: URL-safe base64 of
    `<updated_at ISO 8601>|<id>`, no padding."""
    raw = f"{conversation.updated_at.isoformat()}|{conversation.id}"
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, UUID]:
    """(updated_at, id) of a cursor of `encode_cursor`.

    Raises:
        StoreError: anything else (names the cursor).
    """
    try:
        raw = base64.b64decode(cursor + "=" * (-len(cursor) % 4), altchars=b"-_", validate=True).decode()
        stamp, _, ident = raw.partition("|")
        after = (datetime.fromisoformat(stamp), UUID(ident))
    except (binascii.Error, UnicodeDecodeError, ValueError) as exc:
        raise StoreError(f"cursor={cursor!r} is not a cursor this service issued; pass a `next_cursor` back") from exc
    if after[0].tzinfo is None:
        raise StoreError(f"cursor={cursor!r} is not a cursor this service issued; pass a `next_cursor` back")
    return after
