"""Events one answer emits while it runs, for chat interfaces and the HTTP stream (SSE).

A consumer appends `TextDelta.text` to the answer it shows, clears it on `AnswerRestart` (the model began a new
response: after a tool call, when text shown turns out to be reasoning, or when the agent replaces an unusable
draft by a refusal), and shows tool activity
from `ToolCall` / `ToolResult`; `Queued` says the answer waits for a slot, and where it stands. The final, validated
answer is the `AskResult` the call returns; streamed text already has reasoning tags and citation markers naming
no retrieved passage removed.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from agent.core.results import SupportReport


class TextDelta(BaseModel):
    """New visible answer text."""

    type: Literal["text"] = "text"
    text: str


class AnswerRestart(BaseModel):
    """Discard the answer text shown so far; `reason` says why: `new_response` (the model began another response),
    `revised` (text shown turned out to be reasoning: a `</think>` arrived whose `<think>` the chat template opened
    in the prompt; or the support check rewrote the answer) or `refusal` (the answer is replaced by the refusal)."""

    type: Literal["restart"] = "restart"
    reason: str


class ToolCall(BaseModel):
    """The agent calls a tool (`search_documents`, `get_document`) with these arguments."""

    type: Literal["tool_call"] = "tool_call"
    tool: str
    args: dict[str, Any]


class ToolResult(BaseModel):
    """A tool finished; `summary` is one line for display (e.g. passages found and their numbers)."""

    type: Literal["tool_result"] = "tool_result"
    tool: str
    summary: str


class Queued(BaseModel):
    """The answer waits for a slot (admission control, `agent.core.admission`); `position` 1 is next. Sent when it joins
    the queue and each time its position changes (up as slots free; down when another key holding fewer slots is
    served first); nothing else happens before it is admitted."""

    type: Literal["queued"] = "queued"
    position: int


class SupportChecked(BaseModel):
    """The support check finished (`SUPPORT_CHECK`, `agent.core.support`): every sentence of the answer with its
    label and the passage sentence it rests on. Sent once, after the answer's last text (which the check may have
    revised: then an `AnswerRestart` with reason `revised` and the checked text came first)."""

    type: Literal["support"] = "support"
    support: SupportReport


AgentEvent = Annotated[
    TextDelta | AnswerRestart | ToolCall | ToolResult | Queued | SupportChecked, Field(discriminator="type")
]
