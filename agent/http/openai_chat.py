"""The OpenAI-compatible routes: `POST /v1/chat/completions` and `GET /v1/models` (`GET /v1/models/{model}`), so that
the official `openai` SDK and chat UIs work against `rag serve` unmodified.

- Models (`MODELS`): `triton-rag` answers with the server's `AGENT_POLICY`; `triton-rag-always` and
  `triton-rag-agentic` choose the policy. Any other model is a 404 `model_not_found` (as OpenAI answers).
- A conversation: the last message is the question; earlier user and assistant turns (the last `CHAT_HISTORY_TURNS`
  of them, citation markers removed from answers, as `rag chat` sends them) and every system / developer message
  become `AnswerRequest.history`; retrieval searches with `agent.core.followup.search_query` of the earlier user
  turns and the question (`AnswerRequest.earlier_questions`).
- The answer is `/v1/ask`'s: same refusal, limits, admission control (a refusal is a 503 before any stream starts),
  callers (the admin key, or an API key's holder: the search covers only its collections, and naming another
  collection is a 403 `forbidden_collection`) and errors (statuses, `Retry-After`), in OpenAI's error shape
  (`agent.http.openai_errors`).
- Streaming (`stream: true`): a first chunk with the role at once, then the answer's text in one content chunk once
  it is validated, then a chunk with `finish_reason`, `citations`, `refused` and `cached`, a usage chunk when
  `stream_options.include_usage`, and `data: [DONE]`. The text is held until the answer is final because the agent
  may still replace what it wrote (a restart after a tool call, reasoning revealed by a late `</think>`, a refusal)
  and a Chat Completions stream cannot take text back; `/v1/ask/stream` streams token by token with its restarts.
  Keep-alive comments (`: ping`) flow while the answer runs; an error after the first chunk is a last event
  `data: {"error": {...}}`, which the SDK raises as `APIError`.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Annotated, Literal

import anyio
from fastapi import APIRouter, Path, Request, Response
from fastapi.sse import KEEPALIVE_COMMENT, EventSourceResponse, format_sse_event
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, SystemPromptPart, TextPart, UserPromptPart
from pydantic_ai.settings import ModelSettings

from agent.config.settings import Policy, Settings
from agent.core.answer import AnswerRequest
from agent.core.citations import CITATION_MARKER
from agent.core.feedback import COMPLETION_PREFIX
from agent.core.results import AskResult, new_answer_id
from agent.http.admission_gate import request_ticket
from agent.http.ask import cancelled_on_disconnect, no_nul
from agent.http.deps import CALLER, AppSettings, Caller, CallerIdentity, Rag
from agent.http.openai_errors import OpenAIError, OpenAIRoute, openai_error_of
from agent.http.openai_schema import (
    MAX_QUESTION_CHARS,
    AssistantMessage,
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChatMessage,
    Choice,
    ChunkChoice,
    ModelCard,
    ModelList,
    Usage,
)
from agent.http.streams import until_disconnected
from tools.scope import ScopeError, SearchScope, check_collection

MODELS: dict[str, Policy | None] = {"triton-rag": None, "triton-rag-always": "always", "triton-rag-agentic": "agentic"}
"""The served model ids and the retrieval policy of each (None: the server's `AGENT_POLICY`)."""

KEEPALIVE_S = 15.0
"""Seconds between keep-alive comments while a streamed answer runs (FastAPI's own SSE interval), so that proxies
with an idle timeout keep the connection."""

STARTED = int(time.time())
"""Unix time this server process started, seconds (the models' `created`)."""

_MARKERS = re.compile(rf"\s*(?:{CITATION_MARKER.pattern})", CITATION_MARKER.flags)

router = APIRouter(dependencies=[CALLER], route_class=OpenAIRoute, tags=["OpenAI-compatible"])


def policy_of(model: str) -> Policy | None:
    """The retrieval policy of `model` (`MODELS`).

    Raises:
        OpenAIError: 404 `model_not_found` for a model this server does not serve.
    """
    if model not in MODELS:
        message = f"The model {model!r} does not exist; this server serves {', '.join(MODELS)}"
        raise OpenAIError(404, message, "model_not_found", "model")
    return MODELS[model]


def _bad(message: str, param: str) -> OpenAIError:
    return OpenAIError(422, message, "bad_request", param)


def conversation(messages: list[ChatMessage], max_turns: int) -> tuple[str, list[str], list[ModelMessage]]:
    """The question (the last message), the earlier user turns' texts (oldest first) and the history of `messages`.

    The history holds every system / developer message first (in order, as instructions after the service's own),
    then the last `max_turns` user turns with the assistant answers that follow them, answers without citation
    markers (passage numbers start again at 1 every turn). Left out: messages without text (an assistant turn that
    only called tools), `tool` / `function` messages, and the parts of earlier messages that are not text.

    Raises:
        OpenAIError: 422 naming `messages` when the last message is not a non-blank user message of text parts, at
            most `MAX_QUESTION_CHARS` characters without NUL.
    """
    *earlier, last = messages
    where = f"messages[{len(messages) - 1}]"
    if last.role in ("tool", "function"):
        no_tools = f"{where}.role is {last.role!r}: this service calls no client tools; expected the user's question"
        raise _bad(no_tools, f"{where}.role")
    if last.role != "user":
        raise _bad(f"{where}.role is {last.role!r}; expected the last message to be the user's question", where)
    if other := last.non_text_parts():
        only_text = f"{where}.content has parts of type {', '.join(map(repr, other))}: only text parts are supported"
        raise _bad(only_text, f"{where}.content")
    question = last.text()
    if not question.strip():
        raise _bad(f"{where}.content is blank; expected a non-blank question", f"{where}.content")
    if len(question) > MAX_QUESTION_CHARS:
        too_long = f"{where}.content has {len(question)} characters; expected at most {MAX_QUESTION_CHARS}"
        raise _bad(too_long, f"{where}.content")
    try:
        no_nul(question, f"{where}.content")
    except ValueError as exc:
        raise _bad(str(exc), f"{where}.content") from None
    instructions = [m.text() for m in earlier if m.role in ("system", "developer") and m.text().strip()]
    dialogue = [m for m in earlier if m.role in ("user", "assistant") and m.text().strip()]
    user_at = [i for i, m in enumerate(dialogue) if m.role == "user"]
    kept = dialogue[user_at[-max_turns] :] if 0 < max_turns <= len(user_at) else dialogue if max_turns else []
    history: list[ModelMessage] = []
    if instructions:
        history.append(ModelRequest(parts=[SystemPromptPart(text) for text in instructions]))
    for message in kept:
        if message.role == "user":
            history.append(ModelRequest(parts=[UserPromptPart(message.text())]))
        else:
            history.append(ModelResponse(parts=[TextPart(_MARKERS.sub("", message.text()).strip())]))
    return question, [m.text() for m in dialogue if m.role == "user"], history


def llm_settings(body: ChatCompletionRequest, settings: Settings) -> ModelSettings | None:
    """The LLM request settings the body asks for; `max_tokens` is capped at `LLM_MAX_TOKENS` (the context window is
    fitted for that many output tokens). `top_p: 0` (OpenAI's minimum: only the most likely token) is sent as
    greedy decoding, `temperature: 0` without `top_p`, since vLLM refuses a `top_p` that is not above 0."""
    chosen = ModelSettings()
    max_tokens = body.max_completion_tokens or body.max_tokens
    if max_tokens is not None:
        chosen["max_tokens"] = min(max_tokens, settings.llm_max_tokens)
    if body.temperature is not None:
        chosen["temperature"] = body.temperature
    if body.top_p == 0:
        chosen["temperature"] = 0.0
    elif body.top_p is not None:
        chosen["top_p"] = body.top_p
    if body.seed is not None:
        chosen["seed"] = body.seed
    if body.stop:
        chosen["stop_sequences"] = body.stop
    if body.presence_penalty is not None:
        chosen["presence_penalty"] = body.presence_penalty
    if body.frequency_penalty is not None:
        chosen["frequency_penalty"] = body.frequency_penalty
    return chosen or None


def scope_of(body: ChatCompletionRequest, caller: CallerIdentity) -> SearchScope:
    """The search scope of the extension fields `filter` and `collection` / `collections` (everything when absent),
    narrowed to the caller's collections as `/v1/ask` narrows it (`CallerIdentity.narrow`).

    Raises:
        OpenAIError: 422 naming the field for an invalid filter or collection name, or both collection fields.
        agent.http.errors.ApiError: 403 `forbidden_collection` (OpenAI's shape, code `forbidden_collection`) for a
            named collection outside the caller's key.
    """
    if body.filter is None and body.collection is None and body.collections is None:
        return caller.narrow(None)
    if body.collection is not None and body.collections is not None:
        raise _bad("both collection and collections given; expected one of them", "collection")
    collections = [body.collection] if body.collection is not None else body.collections
    try:
        for name in collections or ():
            check_collection(name)
    except ScopeError as exc:
        raise _bad(str(exc), "collection" if body.collection is not None else "collections") from None
    try:
        asked = SearchScope.from_filter(body.filter, collections)
    except ScopeError as exc:
        raise _bad(str(exc), "filter") from None
    return caller.narrow(asked)


def answer_request(body: ChatCompletionRequest, settings: Settings, caller: CallerIdentity) -> AnswerRequest:
    """The `AnswerRequest` of a chat completion body, searching within the caller's collections.

    Raises:
        OpenAIError: 404 for an unknown model, 422 for a bad conversation or scope.
        agent.http.errors.ApiError: 403 `forbidden_collection` for a named collection outside the caller's key.
    """
    policy = policy_of(body.model)
    question, earlier, history = conversation(body.messages, settings.chat_history_turns)
    return AnswerRequest(
        question,
        policy=policy,
        history=history,
        earlier_questions=tuple(earlier),
        scope=scope_of(body, caller),
        model_settings=llm_settings(body, settings),
        answer_id=new_answer_id(),
        owner=caller.owner,
    )


def usage_of(result: AskResult) -> Usage:
    """The completion's `usage` from the answer's token usage."""
    prompt, completion = result.usage.input_tokens, result.usage.output_tokens
    return Usage(prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion)


def completion_of(result: AskResult, completion_id: str, created: int, model: str) -> ChatCompletion:
    """The `chat.completion` of an answer."""
    return ChatCompletion(
        id=completion_id,
        created=created,
        model=model,
        choices=[Choice(message=AssistantMessage(content=result.answer), finish_reason=_finish(result))],
        usage=usage_of(result),
        citations=result.citations,
        refused=result.refused,
        support=result.support,
        cached=result.cached,
    )


def _finish(result: AskResult) -> Literal["stop", "length"]:
    return "length" if result.truncated else "stop"


@router.get("/v1/models", response_model=ModelList)
async def list_models() -> ModelList:
    """The served model ids (`MODELS`)."""
    return ModelList(data=[ModelCard(id=model, created=STARTED) for model in MODELS])


@router.get("/v1/models/{model}", response_model=ModelCard)
async def get_model(model: Annotated[str, Path()]) -> ModelCard:
    """One served model; 404 `model_not_found` for any other id."""
    policy_of(model)
    return ModelCard(id=model, created=STARTED)


@router.post("/v1/chat/completions", response_model=ChatCompletion)
async def chat_completions(
    body: ChatCompletionRequest, rag: Rag, settings: AppSettings, caller: Caller, request: Request
) -> Response | ChatCompletion:
    """Answer the conversation's last user message with cited sources from the caller's collections: a
    `chat.completion`, or with `stream: true` a stream of `chat.completion.chunk` events (module docstring).

    Its place in admission control is taken before the body is read (`agent.http.admission_gate`; refused: 503
    with Retry-After); the whole request is then checked (body, model, conversation, scope) before the answer
    starts, so that a bad request is a 4xx whenever the server has room."""
    question = answer_request(body, settings, caller)
    # the completion id names the answer, so that a rating can refer to it (`POST /v1/feedback`)
    completion_id, created = f"{COMPLETION_PREFIX}{question.answer_id}", int(time.time())
    ticket = request_ticket(rag.admission, request.scope)  # taken before the body was read (the admission gate)
    if body.stream:
        include_usage = body.stream_options is not None and body.stream_options.include_usage
        chunks = ChunkStream(completion_id, created, body.model)
        events = chunks.events(lambda: rag.ask(question, admission=ticket), include_usage, ticket.close)
        # no caching, transforming or buffering by a proxy in front (`EventStreamHeaders`)
        return EventSourceResponse(until_disconnected(request, events))
    try:
        result = await cancelled_on_disconnect(request, rag.ask(question, admission=ticket))
    finally:
        ticket.close()
    if isinstance(result, Response):
        return result
    return completion_of(result, completion_id, created, body.model)


async def _cancelled(task: asyncio.Future[AskResult]) -> None:
    """Cancel `task` and wait until it has ended (its LLM request closed, its admission slot given back)."""
    if task.done():
        return
    task.cancel()
    with anyio.CancelScope(shield=True), contextlib.suppress(asyncio.CancelledError, Exception):
        await task


class ChunkStream:
    """The Server-Sent Events of one streamed completion (`id`, `created` and `model` on every chunk)."""

    def __init__(self, completion_id: str, created: int, model: str) -> None:
        self.completion_id, self.created, self.model = completion_id, created, model

    def chunk(self, choices: list[ChunkChoice], **extra: object) -> bytes:
        """One `data: {chunk}` event."""
        fields = {"id": self.completion_id, "created": self.created, "model": self.model, "choices": choices}
        return format_sse_event(data_str=ChatCompletionChunk.model_validate(fields | extra).model_dump_json())

    async def events(
        self, answer: Callable[[], Awaitable[AskResult]], include_usage: bool, done: Callable[[], None] = lambda: None
    ) -> AsyncIterator[bytes]:
        """The role chunk at once; keep-alive comments every `KEEPALIVE_S` while `answer()` runs; then its text,
        the finishing chunk (`finish_reason`, `citations`, `refused`, `cached`), the usage chunk when
        `include_usage`, and `data: [DONE]`. A failure of the answer is the last event, `data: {"error": {...}}`.
        Closing the stream (a client that goes away) cancels the answer and waits for it to end; `done()` is called
        once the answer has ended, however (the admission ticket's close)."""
        try:
            yield self.chunk([ChunkChoice(delta={"role": "assistant", "content": ""})])
            task = asyncio.ensure_future(answer())
            try:
                while not (await asyncio.wait({task}, timeout=KEEPALIVE_S))[0]:
                    yield KEEPALIVE_COMMENT
                result = task.result()
            except Exception as exc:  # noqa: BLE001 - the stream has started: every failure is its last event
                yield format_sse_event(data_str=openai_error_of(exc).model_dump_json())
                return
            finally:
                await _cancelled(task)
        finally:
            done()
        if result.answer:
            yield self.chunk([ChunkChoice(delta={"content": result.answer})])
        finished = ChunkChoice(delta={}, finish_reason=_finish(result))
        yield self.chunk(
            [finished], citations=result.citations, refused=result.refused, cached=result.cached, support=result.support
        )
        if include_usage:
            yield self.chunk([], usage=usage_of(result))
        yield format_sse_event(data_str="[DONE]")
