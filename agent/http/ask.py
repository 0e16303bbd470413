"""The answering routes: `POST /v1/ask` (one JSON `AskResult`) and `POST /v1/ask/stream` (Server-Sent Events).

Both take a place in admission control (`agent.http.deps.Admitted`) before the response starts: a refusal is 503
`overloaded` with `Retry-After`. A client that disconnects cancels its answer, queued or running (Starlette cancels a
stream by itself; `/v1/ask` watches for the disconnect).

Conversations: a body with `conversation_id` (from `POST /v1/conversations`) asks a follow-up: the conversation's last
`CHAT_HISTORY_TURNS` turns are the answer's history, the search query is `agent.core.followup.search_query` of their
questions, and the finished answer is stored as the conversation's next turn. An unknown id, or the id of another API
key's conversation, is 404 `conversation_not_found`, answered before the response starts (also on the stream).
Without `conversation_id` a question is a one-off, as before: nothing is stored and the response's `conversation_id`
is null.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable
from dataclasses import replace
from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Depends, Request, Response
from fastapi.sse import EventSourceResponse, ServerSentEvent
from pydantic import BaseModel, Field, field_validator, model_validator

from agent.config.settings import Policy
from agent.core.answer import AnswerRequest
from agent.core.results import AskResult, SupportMode
from agent.http.deps import CALLER, Admitted, Caller, Rag
from agent.http.errors import ERROR_RESPONSES, ApiError, ErrorBody, error_body, failure_of
from agent.http.streams import until_disconnected
from tools.conversations import Conversation
from tools.scope import SearchScope

router = APIRouter(dependencies=[CALLER], responses=ERROR_RESPONSES)


def no_nul(value: str, name: str) -> str:
    """`value`, or ValueError (a validation error of the field `name`) when it holds a NUL character."""
    if "\x00" in value:
        raise ValueError(f"{name} holds a NUL character (\\u0000); expected text without NUL")
    return value


class AskRequest(BaseModel):
    """Body of `POST /v1/ask` and `POST /v1/ask/stream`."""

    question: Annotated[str, Field(min_length=1, max_length=4000, description="The question, non-blank, no NUL.")]
    top_k: Annotated[int | None, Field(ge=1, le=100, description="Passages retrieved up front (`always`).")] = None
    policy: Policy | None = Field(default=None, description="Default: AGENT_POLICY.")
    filter: dict[str, Any] | None = Field(
        default=None,
        description="Search only documents matching every key (`tools.scope` grammar): a metadata key equals the "
        'value, or one of a list\'s values (JSON equality: 2019 is not "2019"); `source`, `ingested_after`, '
        "`ingested_before` (ISO 8601) filter those columns.",
        examples=[{"team": "bio", "year": [2019, 2020]}],
    )
    collection: str | None = Field(default=None, description="Search only this collection (default: all).")
    collections: Annotated[
        list[str] | None,
        Field(
            min_length=1,
            max_length=100,
            description="Search only these collections (default: all of the API key's; with `collection`, all the "
            "ones named); one outside the key's is 403 `forbidden_collection` (`GET /v1/collections` lists the "
            "key's).",
        ),
    ] = None
    support: SupportMode | None = Field(
        default=None,
        description="The support check of this answer: `flag` (every sentence labelled, unsupported ones marked), "
        "`strict` (unsupported sentences removed), `off`; default: SUPPORT_CHECK. The labels are the response's "
        "`support` (and the stream's `support` event).",
    )
    conversation_id: UUID | None = Field(
        default=None,
        description="Ask inside this stored conversation (`POST /v1/conversations`): earlier turns are the history, "
        "the answer is stored as its next turn. Absent: a one-off question, nothing stored.",
    )

    @field_validator("question")
    @classmethod
    def _question(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("question is blank; expected a non-blank question")
        return no_nul(value, "question")

    @model_validator(mode="after")
    def _scope(self) -> AskRequest:
        self.scope()  # a bad filter or collection is a 422 naming the key
        return self

    def scope(self) -> SearchScope | None:
        """The search scope of `filter`, `collection` and `collections`; None when none is given.

        Raises:
            ValueError (`tools.scope.ScopeError`): names the bad key or collection.
        """
        named = ([self.collection] if self.collection else []) + list(self.collections or ())
        if self.filter is None and not named:
            return None
        # the routes narrow it to the caller's collections (`Caller.narrow`)
        return SearchScope.from_filter(self.filter, sorted(set(named)) or None)

    def to_request(self) -> AnswerRequest:
        """The `AnswerRequest` of this body."""
        return AnswerRequest(
            self.question, top_k=self.top_k, policy=self.policy, scope=self.scope(), support=self.support
        )


class AskResponse(AskResult):
    """An `AskResult` and the conversation it was stored in."""

    conversation_id: UUID | None = Field(
        default=None, description="The conversation the turn was stored in; null for a one-off question."
    )


def response_of(result: AskResult, conversation: Conversation | None) -> AskResponse:
    """The response body (and the stream's `result` event) of `result`, asked in `conversation` (or not)."""
    return AskResponse.model_validate(
        result.model_dump() | {"conversation_id": None if conversation is None else conversation.id}
    )


async def conversation_of(body: AskRequest, rag: Rag, caller: Caller) -> Conversation | None:
    """The caller's conversation the body names (a key holder's own, the admin's any), with its last
    `CHAT_HISTORY_TURNS` turns, read before the response starts; None without `conversation_id`.

    Raises:
        agent.core.conversations.ConversationNotFoundError: unknown id, or another key's conversation (404
            `conversation_not_found`, the same answer).
    """
    if body.conversation_id is None:
        return None
    # a key holder's own conversations only: another key's is not found, exactly like a missing one
    return await rag.conversation(
        body.conversation_id, last_turns=rag.settings.chat_history_turns, owner=caller.owner, access=caller.access
    )


InConversation = Annotated[Conversation | None, Depends(conversation_of)]
"""A route parameter of this type receives the conversation the request's body names (None: a one-off question)."""


async def cancelled_on_disconnect(request: Request, work: Awaitable[AskResult]) -> AskResult | Response:
    """Await `work`, cancelling it when the client disconnects (Starlette cancels only streaming responses): a
    question waiting for a slot leaves the queue, a running answer stops using the LLM. Returns a bare 499 (nginx's
    "client closed request"; nobody receives it) in that case."""
    task = asyncio.ensure_future(work)
    disconnected = False

    async def watch() -> None:
        nonlocal disconnected
        while (await request.receive())["type"] != "http.disconnect":
            pass
        disconnected = True
        task.cancel()

    watcher = asyncio.create_task(watch())
    try:
        return await task
    except asyncio.CancelledError:
        if not disconnected:
            raise  # the server itself is cancelling this request (e.g. the end of the shutdown drain)
        return Response(status_code=499)
    finally:
        watcher.cancel()


_NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorBody, "description": "`conversation_not_found`: unknown `conversation_id`."}
}


@router.post("/v1/ask", response_model=AskResponse, responses=_NOT_FOUND)
async def ask(
    body: AskRequest, rag: Rag, caller: Caller, conversation: InConversation, ticket: Admitted, request: Request
) -> AskResponse | Response:
    """Answer one question from the caller's collections; the JSON `AskResult` (answer, citations, timings_ms,
    refused, policy, searches) and the `conversation_id` it was stored in (null without one)."""
    asked = body.to_request()
    scoped = replace(asked, scope=caller.narrow(asked.scope), owner=caller.owner)
    result = await cancelled_on_disconnect(request, rag.ask(scoped, admission=ticket, conversation=conversation))
    return result if isinstance(result, Response) else response_of(result, conversation)


@router.post("/v1/ask/stream", response_class=EventSourceResponse, responses=_NOT_FOUND)
async def ask_stream(
    body: AskRequest, rag: Rag, caller: Caller, conversation: InConversation, ticket: Admitted, request: Request
) -> AsyncIterator[ServerSentEvent]:
    """Stream one answer as Server-Sent Events: `queued` (with the position, while it waits for a slot), `text`,
    `restart`, `tool_call`, `tool_result`, then `result` (the `AskResult` and `conversation_id`) or `error`;
    closing the stream, or the client going away, cancels the answer."""
    try:
        asked = body.to_request()
        scoped = replace(asked, scope=caller.narrow(asked.scope), owner=caller.owner)
    except ApiError as exc:  # a collection outside the caller's key
        yield ServerSentEvent(event="error", data=ErrorBody(error=exc.kind, detail=str(exc.detail)).model_dump())
        return
    try:
        answer = rag.ask_stream(scoped, admission=ticket, conversation=conversation)
        async for item in until_disconnected(request, answer):
            if isinstance(item, AskResult):
                yield ServerSentEvent(event="result", data=response_of(item, conversation).model_dump(mode="json"))
            else:
                yield ServerSentEvent(event=item.type, data=item.model_dump())
    except Exception as exc:  # noqa: BLE001 - the stream has started: report every failure as an error event
        yield ServerSentEvent(event="error", data=error_body(failure_of(exc)).model_dump())
