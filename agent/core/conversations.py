"""A question asked inside a stored conversation: its earlier turns become the answer's history (pydantic-ai
messages) and its search query is `agent.core.followup.search_query` of the earlier questions (condensed, or rewritten
by the LLM with `FOLLOWUP_QUERY=rewrite`; see that module). `RagApp.ask(request, conversation=...)` uses it and
stores the finished turn.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace
from uuid import UUID

from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, UserPromptPart

from agent.core.answer import AnswerRequest
from agent.core.citations import CITATION_MARKER
from agent.core.errors import AgentError
from tools.conversations import ConversationTurn

_MARKERS = re.compile(rf"\s*(?:{CITATION_MARKER.pattern})", CITATION_MARKER.flags)


class ConversationNotFoundError(AgentError):
    """No conversation with this id (never created, deleted, or owned by another API key); HTTP 404."""

    kind = "conversation_not_found"

    def __init__(self, conversation_id: UUID, when: str = "") -> None:
        self.conversation_id = conversation_id
        super().__init__(f"conversation {conversation_id} does not exist{when}; start one with POST /v1/conversations")


def history_messages(turns: Sequence[ConversationTurn]) -> list[ModelMessage]:
    """User/assistant message pairs of `turns`, oldest first. Citation markers are removed from the answers: passage
    numbers are renumbered every turn, so an old `[1]` would point at a new passage."""
    messages: list[ModelMessage] = []
    for turn in turns:
        messages.append(ModelRequest(parts=[UserPromptPart(turn.question)]))
        messages.append(ModelResponse(parts=[TextPart(_MARKERS.sub("", turn.answer).strip())]))
    return messages


def follow_up(request: AnswerRequest, turns: Sequence[ConversationTurn], max_turns: int) -> AnswerRequest:
    """`request` asked after `turns` (oldest first): the last `max_turns` of them (`CHAT_HISTORY_TURNS`; 0: none)
    as its history (in place of the request's own), and their questions as its `earlier_questions` (the answer
    searches with `agent.core.followup.search_query` of them and the question).

    Returns:
        `request` unchanged when no turn is kept.
    """
    kept = list(turns)[max(0, len(turns) - max_turns) :] if max_turns > 0 else []
    if not kept:
        return request
    earlier = tuple(t.question for t in kept)
    return replace(request, history=history_messages(kept), earlier_questions=earlier)
