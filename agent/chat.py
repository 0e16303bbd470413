"""`rag chat`: an interactive session over one `RagApp`.

Each answer streams token by token; tool activity (`search_documents`, `get_document`) is shown as it happens;
the validated sources follow each answer. Earlier turns (question and answer text, citation markers removed) are
sent with each question, at most `CHAT_HISTORY_TURNS` of them. Ctrl-C cancels the answer being written, not the
session; an empty line or Ctrl-D ends it. Errors of one answer (a hit limit, an unreachable LLM or
Postgres) are printed as one readable line and the session goes on. Model and document text is printed as plain
text (never parsed as Rich markup).
"""

from __future__ import annotations

import asyncio
import re
import signal
from collections import deque

from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, UserPromptPart
from rich.console import Console
from rich.text import Text

from agent.answer import AnswerRequest
from agent.app import RagApp
from agent.citations import CITATION_MARKER
from agent.events import AgentEvent, AnswerRestart, TextDelta, ToolCall, ToolResult
from agent.failures import describe
from agent.results import AskResult
from agent.settings import Policy

_MARKERS = re.compile(rf"\s*(?:{CITATION_MARKER.pattern})", CITATION_MARKER.flags)


class ChatHistory:
    """The last `max_turns` (question, answer) pairs as pydantic-ai messages; citation markers are removed from
    stored answers because passage numbers are renumbered every turn."""

    def __init__(self, max_turns: int) -> None:
        self.turns: deque[tuple[str, str]] = deque(maxlen=max_turns) if max_turns > 0 else deque(maxlen=0)

    def add(self, question: str, result: AskResult) -> None:
        """Remember one finished turn (refusals included)."""
        if self.turns.maxlen:
            self.turns.append((question, _MARKERS.sub("", result.answer).strip()))

    def messages(self) -> list[ModelMessage]:
        """User/assistant message pairs, oldest first."""
        out: list[ModelMessage] = []
        for question, answer in self.turns:
            out.append(ModelRequest(parts=[UserPromptPart(question)]))
            out.append(ModelResponse(parts=[TextPart(answer)]))
        return out


def print_sources(console: Console, result: AskResult) -> None:
    """Notes on an incomplete answer (cut at the output limit; passages left out to fit the context window), the
    citations of `result` (one line each), or why there are none, then the timings."""
    if result.truncated:
        console.print(Text("(answer cut short: the model reached its output limit, LLM_MAX_TOKENS)", style="yellow"))
    if result.dropped_passages:
        note = f"({len(result.dropped_passages)} lower-ranked passages left out to fit the LLM's context window)"
        console.print(Text(note, style="dim"), soft_wrap=True)
    if result.citations:
        console.print("\n[bold]Sources[/]")
        for c in result.citations:
            console.print(
                f"  [{c.passage}] doc {c.doc_id} ({c.chunk_id}, score {c.score:.4f}) {c.title}"
                + (f" — {c.location}" if c.location else ""),
                highlight=False,
                markup=False,
                soft_wrap=True,
            )
    elif result.refused:
        console.print("\n[dim]no sources: no retrieved passage is relevant enough[/]")
    else:
        console.print("\n[dim]no sources cited[/]")
    timings = ", ".join(f"{k} {v:.0f} ms" for k, v in result.timings_ms.items())
    console.print(Text(timings, style="dim"), soft_wrap=True)


def show_event(console: Console, event: AgentEvent) -> None:
    """Print one streaming event: text as it comes, tool activity dimmed on its own line."""
    if isinstance(event, TextDelta):
        console.print(event.text, end="", highlight=False, markup=False, soft_wrap=True)
    elif isinstance(event, ToolCall):
        args = ", ".join(f"{k}={v!r}" for k, v in event.args.items())
        console.print(Text(f"→ {event.tool}({args})", style="dim"), highlight=False, soft_wrap=True)
    elif isinstance(event, ToolResult):
        console.print(Text(f"← {event.summary}", style="dim"), highlight=False, soft_wrap=True)
    elif isinstance(event, AnswerRestart):
        console.print("\n[dim](draft discarded)[/]")


async def turn(
    rag: RagApp, console: Console, history: ChatHistory, question: str, top_k: int | None, policy: Policy | None
) -> AskResult | None:
    """Answer one question with streaming output; None when cancelled with Ctrl-C."""
    loop = asyncio.get_running_loop()
    request = AnswerRequest(
        question, top_k=top_k, policy=policy, history=history.messages(), on_event=lambda e: show_event(console, e)
    )
    task = asyncio.ensure_future(rag.ask(request))
    loop.add_signal_handler(signal.SIGINT, task.cancel)  # Ctrl-C cancels this answer only
    try:
        result = await task
    except asyncio.CancelledError:
        console.print("\n[dim]answer cancelled[/]")
        return None
    finally:
        loop.remove_signal_handler(signal.SIGINT)
    console.print()
    print_sources(console, result)
    history.add(question, result)
    return result


async def run_chat(rag: RagApp, console: Console, top_k: int | None = None, policy: Policy | None = None) -> None:
    """The read–answer loop until an empty line or end of input."""
    history = ChatHistory(rag.settings.chat_history_turns)
    chosen = policy or rag.settings.agent_policy
    console.print(f"[dim]policy {chosen}; empty line or Ctrl-D quits, Ctrl-C cancels an answer[/]")
    while True:
        try:
            question = await asyncio.to_thread(console.input, "\n[bold cyan]you>[/] ")
        except EOFError:
            return
        if not question.strip():
            return
        try:
            await turn(rag, console, history, question, top_k, policy)
        except Exception as exc:
            failure = describe(exc)
            if failure is None:
                raise
            console.print(
                Text.assemble("\n", ("error: ", "bold red"), failure.message), highlight=False, soft_wrap=True
            )
