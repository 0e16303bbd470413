"""The conversation routes: create, list (newest first, keyset pages), read (with its turns) and delete stored
conversations. A question is asked inside one with `POST /v1/ask` or `/v1/ask/stream` and its `conversation_id`
(`agent.http.ask`). Unknown ids are 404 `conversation_not_found`.

Owners: a conversation belongs to the API key that created it (`CallerIdentity.owner`; none when created with the
admin key or without keys). A key holder lists, reads, deletes and asks in only its own conversations: another key's
conversation is the same 404 `conversation_not_found` as a missing one, and `total` counts only its own. The admin
sees every conversation. A question asked in a conversation searches the asking caller's collections.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field, field_validator

from agent.http.ask import no_nul
from agent.http.deps import CALLER, Caller, Rag
from agent.http.errors import ERROR_RESPONSES, ErrorBody
from tools.conversations import MAX_PAGE, MAX_TITLE_CHARS, Conversation, ConversationTurn

router = APIRouter(dependencies=[CALLER], responses=ERROR_RESPONSES)
_NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"model": ErrorBody, "description": "`conversation_not_found`."}}


class ConversationIn(BaseModel):
    """Body of `POST /v1/conversations` (optional)."""

    title: Annotated[
        str,
        Field(max_length=MAX_TITLE_CHARS, description="Default: the first question, cut to 80 characters."),
    ] = ""

    @field_validator("title")
    @classmethod
    def _title(cls, value: str) -> str:
        return no_nul(value, "title")


class TurnOut(BaseModel):
    """One stored turn of a conversation."""

    n: int = Field(description="Position in the conversation, from 1.")
    question: str
    answer: str = Field(description="As answered, citation markers included.")
    citations: list[dict[str, Any]] = Field(description="The answer's citations (`AskResult.citations`).")
    refused: bool
    created_at: datetime

    @classmethod
    def of(cls, turn: ConversationTurn) -> TurnOut:
        """The JSON form of `turn`."""
        return cls(**vars(turn))


class ConversationOut(BaseModel):
    """A conversation without its turns."""

    id: UUID
    title: str
    created_at: datetime
    updated_at: datetime = Field(description="When the last turn was stored (or the conversation created).")
    turn_count: int

    @classmethod
    def of(cls, conversation: Conversation) -> ConversationOut:
        """The JSON form of `conversation` (its turns left out)."""
        return cls(
            id=conversation.id,
            title=conversation.title,
            created_at=conversation.created_at,
            updated_at=conversation.updated_at,
            turn_count=conversation.turn_count,
        )


class ConversationWithTurns(ConversationOut):
    """`GET /v1/conversations/{id}`: the conversation and every turn, oldest first."""

    turns: list[TurnOut]


class ConversationList(BaseModel):
    """`GET /v1/conversations`: one page, most recently updated first."""

    conversations: list[ConversationOut]
    total: int = Field(description="Conversations stored (when the page was read).")
    next_cursor: str | None = Field(description="Pass as `cursor` for the next page; null on the last page.")


class ConversationDeleted(BaseModel):
    """`DELETE /v1/conversations/{id}`: the deleted id."""

    deleted: UUID


@router.post("/v1/conversations", response_model=ConversationOut, status_code=201)
async def create_conversation(rag: Rag, caller: Caller, body: ConversationIn | None = None) -> ConversationOut:
    """Start a conversation owned by the caller's key; pass its `id` as `conversation_id` to `POST /v1/ask` or
    `/v1/ask/stream`."""
    title = "" if body is None else body.title
    return ConversationOut.of(await rag.create_conversation(title, caller.owner))


@router.get("/v1/conversations", response_model=ConversationList)
async def list_conversations(
    rag: Rag,
    caller: Caller,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE, description="Conversations per page.")] = 50,
    cursor: Annotated[str | None, Query(description="`next_cursor` of the previous page.")] = None,
) -> ConversationList:
    """One page of the caller's conversations (the admin: all), most recently updated first, their total, and the
    cursor of the next page."""
    page = await rag.conversation_page(limit, cursor, caller.owner)
    return ConversationList(
        conversations=[ConversationOut.of(c) for c in page.conversations],
        total=page.total,
        next_cursor=page.next_cursor,
    )


@router.get("/v1/conversations/{conversation_id}", response_model=ConversationWithTurns, responses=_NOT_FOUND)
async def get_conversation(conversation_id: UUID, rag: Rag, caller: Caller) -> ConversationWithTurns:
    """The caller's conversation and all its turns, oldest first (question, answer, citations, refused,
    created_at)."""
    conversation = await rag.conversation(conversation_id, owner=caller.owner, access=caller.access)
    out = ConversationOut.of(conversation)
    return ConversationWithTurns(**out.model_dump(), turns=[TurnOut.of(t) for t in conversation.turns])


@router.delete("/v1/conversations/{conversation_id}", response_model=ConversationDeleted, responses=_NOT_FOUND)
async def delete_conversation(conversation_id: UUID, rag: Rag, caller: Caller) -> ConversationDeleted:
    """Delete the caller's conversation and its turns."""
    await rag.delete_conversation(conversation_id, caller.owner)
    return ConversationDeleted(deleted=conversation_id)
