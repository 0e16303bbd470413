"""`rag chat`: an interactive session over one `RagApp`.

Each answer streams token by token; tool activity (`search_documents`, `get_document`) is shown as it happens;
the validated sources follow each answer. The session is a stored conversation (Postgres, `RagApp.conversation`):
it is created with the first question, its id is printed, and `rag chat --conversation ID` resumes it. Each question
is asked inside it (`RagApp.ask(..., conversation=)`): the last `CHAT_HISTORY_TURNS` turns are its history (citation
markers removed), a follow-up is searched with `agent.core.followup.search_query` of their questions, and the turn is
stored. Ctrl-C cancels the answer being written (nothing is stored), not the session; an empty line or Ctrl-D ends
it. Errors of one answer (a hit limit, an unreachable LLM or Postgres) are printed as one readable line and the
session goes on. Model and document text is printed as plain text (never parsed as Rich markup).

Rating the last answer (`agent.core.feedback`): `/up [comment]`, `/down [comment]`, `/source <doc_id or chunk_id>`
(the source that should have answered; a down-vote unless the answer was rated up); the rating replaces an earlier one
of the same answer and keeps its comment and source unless new ones are given.
"""

from __future__ import annotations

import asyncio
import signal
from uuid import UUID

from rich.console import Console
from rich.text import Text

from agent.cli.support_view import print_support
from agent.config.settings import Policy
from agent.core.answer import AnswerRequest
from agent.core.app import RagApp
from agent.core.events import AgentEvent, AnswerRestart, TextDelta, ToolCall, ToolResult
from agent.core.failures import describe
from agent.core.feedback import AnswerNotFoundError
from agent.core.results import AskResult
from tools.conversations import Conversation
from tools.scope import SearchScope


def print_sources(console: Console, result: AskResult) -> None:
    """Notes on an incomplete answer (cut at the output limit; passages left out to fit the context window), the
    citations of `result` (one line each), or why there are none, then the timings (and whether the answer came
    from the answer cache)."""
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
    print_support(console, result)
    timings = ", ".join(f"{k} {v:.0f} ms" for k, v in result.timings_ms.items())
    if result.cached:
        timings = f"from the answer cache (ANSWER_CACHE): {timings}"
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
    rag: RagApp,
    console: Console,
    conversation: Conversation,
    question: str,
    top_k: int | None,
    policy: Policy | None,
    scope: SearchScope | None = None,
) -> AskResult | None:
    """Answer one question asked in `conversation` (with its last turns), searching only `scope` (None: all), with
    streaming output, and store the turn; None when cancelled with Ctrl-C (nothing stored)."""
    loop = asyncio.get_running_loop()
    request = AnswerRequest(
        question, top_k=top_k, policy=policy, scope=scope, on_event=lambda e: show_event(console, e)
    )
    task = asyncio.ensure_future(rag.ask(request, conversation=conversation))
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
    return result


def show_earlier_turns(console: Console, conversation: Conversation) -> None:
    """Print a resumed conversation's id, size and the turns read with it (questions and answers, plain text)."""
    note = f"resuming conversation {conversation.id}: {conversation.title} ({conversation.turn_count} turns)"
    console.print(Text(note, style="dim"), highlight=False, soft_wrap=True)  # the title is plain text, not markup
    for earlier in conversation.turns:
        console.print(Text.assemble(("you> ", "bold cyan"), earlier.question), highlight=False, soft_wrap=True)
        console.print(earlier.answer, highlight=False, markup=False, soft_wrap=True)


async def next_turn_conversation(rag: RagApp, console: Console, conversation_id: UUID | None) -> Conversation:
    """The conversation the next question is asked in, with its last `CHAT_HISTORY_TURNS` turns: a new one
    (its id printed) when `conversation_id` is None.

    Raises:
        agent.core.conversations.ConversationNotFoundError: the conversation was deleted meanwhile.
    """
    if conversation_id is None:
        created = await rag.create_conversation()
        note = f"conversation {created.id} (resume it with: rag chat --conversation {created.id})"
        console.print(Text(note, style="dim"), highlight=False, soft_wrap=True)  # one line: copyable
        return created
    return await rag.conversation(conversation_id, last_turns=rag.settings.chat_history_turns)


RATE_HELP = "/up [comment], /down [comment], /source <doc_id> rate the last answer"


async def rate_command(rag: RagApp, console: Console, line: str, last: AskResult | None) -> bool:
    """Handle a rating command (`/up`, `/down`, `/source`, module docstring) about `last`; False when `line` is not
    one (it is a question)."""
    command, _, rest = line.strip().partition(" ")
    if command not in ("/up", "/down", "/source"):
        return False
    rest = rest.strip()
    if last is None:
        console.print("[dim]no answer to rate yet[/]")
        return True
    if command == "/source" and not rest:
        console.print("[dim]usage: /source <doc_id or chunk_id>[/]")
        return True
    try:
        if command == "/source":
            earlier = None
            try:
                earlier = (await rag.feedback.rating(last.answer_id)).rating
            except AnswerNotFoundError:
                earlier = None
            rated = await rag.rate(last.answer_id, earlier or "down", right_source=rest)
        else:
            rated = await rag.rate(last.answer_id, "up" if command == "/up" else "down", comment=rest or None)
    except Exception as exc:
        failure = describe(exc)
        if failure is None:
            raise
        console.print(Text.assemble(("error: ", "bold red"), failure.message), highlight=False, soft_wrap=True)
        return True
    note = f"rated {rated.rating}" + (f", right source {rated.right_source}" if rated.right_source else "")
    console.print(Text(f"{note} (answer {rated.answer_id})", style="dim"), highlight=False, soft_wrap=True)
    return True


async def run_chat(
    rag: RagApp,
    console: Console,
    top_k: int | None = None,
    policy: Policy | None = None,
    conversation_id: UUID | None = None,
    scope: SearchScope | None = None,
) -> UUID | None:
    """The read–answer loop until an empty line or end of input, in the stored conversation `conversation_id`
    (resumed: its last turns are printed) or in a new one created with the first question; every question searches
    only `scope` (None: all).

    Returns:
        The conversation's id (None when no question was asked in a new session).

    Raises:
        agent.core.conversations.ConversationNotFoundError: `conversation_id` does not exist (before any question).
    """
    chosen = policy or rag.settings.agent_policy
    if conversation_id is not None:
        resumed = await rag.conversation(conversation_id, last_turns=rag.settings.chat_history_turns)
        show_earlier_turns(console, resumed)
    console.print(f"[dim]policy {chosen}; empty line or Ctrl-D quits, Ctrl-C cancels an answer; {RATE_HELP}[/]")
    last: AskResult | None = None
    while True:
        try:
            question = await asyncio.to_thread(console.input, "\n[bold cyan]you>[/] ")
        except EOFError:
            return conversation_id
        if not question.strip():
            return conversation_id
        if await rate_command(rag, console, question, last):
            continue
        try:
            conversation = await next_turn_conversation(rag, console, conversation_id)
            conversation_id = conversation.id
            last = await turn(rag, console, conversation, question, top_k, policy, scope) or last
        except Exception as exc:
            failure = describe(exc)
            if failure is None:
                raise
            console.print(
                Text.assemble("\n", ("error: ", "bold red"), failure.message), highlight=False, soft_wrap=True
            )
