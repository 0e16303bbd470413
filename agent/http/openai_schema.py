"""The wire types of the OpenAI-compatible routes: the Chat Completions request, the `chat.completion` response and
its `chat.completion.chunk` stream, the model list; field names and values as in OpenAI's API reference
(platform.openai.com/docs/api-reference/chat), plus the documented extension fields (`filter`, `collection` /
`collections` in; `citations`, `refused` out).

Every field OpenAI documents is checked against OpenAI's ranges (the `CreateChatCompletionRequest` schema of
github.com/openai/openai-openapi: `seed` a signed 64-bit integer, `temperature` 0-2, `top_p` 0-1, penalties -2..2,
`stop` one string or up to 4, `top_logprobs` 0-20, `logit_bias` values -100..100), and a stop sequence must not be
empty (the LLM server refuses one), so that a bad value is a 422 naming it before any work. Request fields this
service cannot honour (several choices, log probabilities, a JSON response format, a forced tool call, output other
than text) are a 422 naming the field; other unknown fields are accepted and ignored (`IGNORED_NOTE`).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from agent.core.results import Citation, SupportReport

IGNORED_NOTE = (
    "tools (with tool_choice auto or none), parallel_tool_calls, logit_bias (checked), metadata, store, service_tier, "
    "reasoning_effort, verbosity, prediction, prompt_cache_key, safety_identifier, functions, function_call and any "
    "other field not listed"
)
"""The request fields that are accepted and ignored (none changes what a client may rely on: the answer is text)."""

MAX_QUESTION_CHARS = 4000
"""Longest last user message, characters (`/v1/ask`'s `question` limit)."""


class ContentPart(BaseModel):
    """One part of a message's content. Text parts (`type` `text`, and `refusal` in assistant messages) are read;
    other parts (images, audio, files) are refused in the question and left out of earlier messages."""

    model_config = ConfigDict(extra="allow")

    type: str
    text: str | None = None
    refusal: str | None = None

    @property
    def is_text(self) -> bool:
        """True for a text or refusal part."""
        return self.type in ("text", "refusal")


class ChatMessage(BaseModel):
    """One message of `messages`: `system` / `developer` (instructions), `user` or `assistant`; `content` is a
    string, a list of parts, or null (an assistant turn that only called tools). `tool` and `function` messages
    (another model's tool calls, as chat front ends keep them in a conversation) are left out of the history; as
    the last message they are refused: this service calls no client tools."""

    model_config = ConfigDict(extra="allow")

    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[ContentPart] | None = None
    name: str | None = None

    def text(self) -> str:
        """The message's text: the content string, or its text parts joined with newlines (other parts left
        out)."""
        if self.content is None or isinstance(self.content, str):
            return self.content or ""
        return "\n".join(part.text or part.refusal or "" for part in self.content if part.is_text)

    def non_text_parts(self) -> list[str]:
        """The types of the content parts that are not text, in order."""
        return [part.type for part in self.content or () if not isinstance(part, str) and not part.is_text]


class StreamOptions(BaseModel):
    """`stream_options`: `include_usage` adds a last chunk with the answer's token usage and empty `choices`."""

    model_config = ConfigDict(extra="allow")

    include_usage: bool = False


Penalty = Annotated[float, Field(ge=-2, le=2)]
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
"""OpenAI's range of `seed` (a signed 64-bit integer; vLLM's too)."""
LogitBias = Annotated[int, Field(ge=-100, le=100)]
MAX_STOP_SEQUENCES = 4


class ChatCompletionRequest(BaseModel):
    """Body of `POST /v1/chat/completions`.

    Used: `model`, `messages`, `stream`, `stream_options.include_usage`, `max_tokens` / `max_completion_tokens`,
    `temperature`, `top_p`, `seed`, `stop`, `presence_penalty`, `frequency_penalty` (sent to the LLM with every
    request of the answer), `user` (accepted; not used), and the extensions `filter` and `collection` /
    `collections` (the search scope, `tools.scope`). Accepted and ignored: see `IGNORED_NOTE`.
    """

    model_config = ConfigDict(extra="allow")

    model: str = Field(description="A model id of `GET /v1/models`.")
    messages: list[ChatMessage] = Field(min_length=1, description="The conversation; the last message is the user's.")
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    max_tokens: int | None = Field(
        default=None, ge=1, description="Output tokens per LLM request; at most LLM_MAX_TOKENS are used."
    )
    max_completion_tokens: int | None = Field(default=None, ge=1, description="Same as `max_tokens`; wins over it.")
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, ge=0, le=1)
    seed: int | None = Field(default=None, ge=INT64_MIN, le=INT64_MAX, description="A signed 64-bit integer.")
    stop: list[str] | None = Field(
        default=None, description="One stop sequence or a list of up to 4, none empty; an empty list: none."
    )
    presence_penalty: Penalty | None = None
    frequency_penalty: Penalty | None = None
    user: str | None = Field(default=None, max_length=256, description="End-user id; accepted, not used.")
    n: int | None = Field(default=None, description="Choices to return; only 1.")
    logprobs: bool | None = None
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    logit_bias: dict[str, LogitBias] | None = Field(default=None, description="Checked (-100..100), not used.")
    response_format: dict[str, Any] | None = None
    tool_choice: str | dict[str, Any] | None = None
    modalities: list[str] | None = None
    filter: dict[str, Any] | None = Field(
        default=None, description="Extension: the search filter (`tools.scope` grammar: source, ingested_after, ...)."
    )
    collection: str | None = Field(default=None, description="Extension: the one collection to search.")
    collections: list[str] | None = Field(default=None, description="Extension: the collections to search.")

    @field_validator("stop", mode="before")
    @classmethod
    def _one_stop_is_a_list(cls, value: object) -> object:
        return [value] if isinstance(value, str) else value

    @field_validator("stop")
    @classmethod
    def _stop(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and len(value) > MAX_STOP_SEQUENCES:
            raise ValueError(f"{len(value)} stop sequences; expected at most {MAX_STOP_SEQUENCES}")
        for i, sequence in enumerate(value or ()):
            if not sequence:
                raise ValueError(f"stop[{i}] is empty; expected a non-empty stop sequence")
        return value or None

    @field_validator("n")
    @classmethod
    def _one_choice(cls, value: int | None) -> int | None:
        if value not in (None, 1):
            raise ValueError(f"n={value}: this service returns one choice; expected 1")
        return value

    @field_validator("logprobs", "top_logprobs")
    @classmethod
    def _no_logprobs(cls, value: bool | int | None) -> bool | int | None:
        if value:
            raise ValueError("log probabilities are not available from this service; expected false or none")
        return value

    @field_validator("response_format")
    @classmethod
    def _text_format(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None and value.get("type", "text") != "text":
            raise ValueError(f"type {value.get('type')!r}: answers are cited text; expected type 'text'")
        return value

    @field_validator("tool_choice")
    @classmethod
    def _no_forced_tool(cls, value: str | dict[str, Any] | None) -> str | dict[str, Any] | None:
        if value not in (None, "auto", "none"):
            raise ValueError("this service calls no client tools; expected 'auto', 'none' or no tool_choice")
        return value

    @field_validator("modalities")
    @classmethod
    def _text_modality(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and set(value) - {"text"}:
            raise ValueError(f"{value}: answers are text; expected ['text']")
        return value


class Usage(BaseModel):
    """Token usage of the answer: every LLM request of it summed (tool-calling answers make several)."""

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class AssistantMessage(BaseModel):
    """The answer: its text with `[n]` citation markers (`n` is a citation's `passage`)."""

    role: Literal["assistant"] = "assistant"
    content: str
    refusal: None = Field(default=None, description="Always null: a refusal to answer is text (`refused`).")


class Choice(BaseModel):
    """The one choice of a completion."""

    index: int = 0
    message: AssistantMessage
    finish_reason: Literal["stop", "length"] = Field(description="`length`: the model hit its output limit.")
    logprobs: None = None


class Extensions(BaseModel):
    """The extension fields of a completion (and of a stream's finishing chunk)."""

    citations: list[Citation] = Field(
        description="Extension: the sources the answer cites, as in `/v1/ask` (`passage` is the `[n]` of the text)."
    )
    refused: bool = Field(
        description="Extension: true when no stored passage was relevant enough; the text says so, with no citation."
    )
    cached: bool = Field(
        default=False,
        description="Extension: true when the answer came from the answer cache (no LLM request: `usage` is zero).",
    )
    support: SupportReport | None = Field(
        default=None,
        description="Extension: per-sentence citations: each sentence of the text with its label (SUPPORT, "
        "CONTRADICT, NOT_ENOUGH_INFO), its span in the text and the passage sentence it rests on, as in `/v1/ask`; "
        "null when SUPPORT_CHECK is off.",
    )


class ChatCompletion(Extensions):
    """The `chat.completion` object of a non-streamed answer, with the extensions `citations`, `refused`, `cached`
    and `support`."""

    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int = Field(description="Unix time of the request, seconds.")
    model: str
    choices: list[Choice]
    usage: Usage
    system_fingerprint: None = None


class ChunkChoice(BaseModel):
    """The one choice of a chunk: `delta` holds `role` (first chunk) or `content` (new text)."""

    index: int = 0
    delta: dict[str, str]
    finish_reason: Literal["stop", "length"] | None = None
    logprobs: None = None


class ChatCompletionChunk(BaseModel):
    """One `chat.completion.chunk` of a streamed answer; the chunk with `finish_reason` also carries the extensions
    `citations`, `refused`, `cached` and `support`, and the usage chunk (`stream_options.include_usage`) has empty
    `choices`."""

    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChunkChoice]
    usage: Usage | None = None
    citations: list[Citation] | None = None
    refused: bool | None = None
    cached: bool | None = None
    support: SupportReport | None = None
    system_fingerprint: None = None


class ModelCard(BaseModel):
    """One model of `GET /v1/models`."""

    id: str
    object: Literal["model"] = "model"
    created: int = Field(description="Unix time this server started, seconds.")
    owned_by: str = "triton-rag"


class ModelList(BaseModel):
    """`GET /v1/models`."""

    object: Literal["list"] = "list"
    data: list[ModelCard]
