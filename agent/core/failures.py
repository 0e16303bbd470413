"""What the interfaces (CLI, chat, HTTP API) tell a person about a failure: one classification of the product's
error types into a stable `kind` and a one-line message. Only product error types are classified: each layer
translates the errors of the libraries below it at its own boundary (the store asyncpg's, the embedder gRPC's,
`agent.core.answer` pydantic-ai's), so nothing here imports a driver or walks a traceback.

The CLI prints `error: <message>`; the HTTP API maps `kind` to a status code (`agent.http.errors.STATUS_OF_KIND`) and
answers `{"error": kind, "detail": message}`. Exceptions not listed here are bugs: `describe` returns None for them
and the interface decides (the CLI shows a traceback with `--debug`, the HTTP API answers 500 `internal_error`).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from pydantic import ValidationError

from agent.config.settings import SettingsError, describe_validation_error
from agent.core.errors import (
    AgentError,
    AnswerLimitError,
    InputError,
    IssuerUnavailableError,
    LLMUnavailableError,
    OverloadedError,
    QuotaExceededError,
)
from tools.errors import (
    EmbedderError,
    EmbedderOverloadedError,
    StoreBusyError,
    StoreError,
    StoreQueryError,
    StoreUnavailableError,
)
from tools.ingest import IngestError
from tools.scope import ScopeError


@dataclass(frozen=True)
class Failure:
    """A classified failure.

    Attributes:
        kind: stable machine-readable name (`bad_request`, `llm_unavailable`, `postgres_unavailable`, ...).
        message: readable text for the person running the command (one line for the listed types, except service
            start-up failures, which add the service log's tail).
        retryable: a dependency is down or overloaded; the same request may succeed later.
        retry_after_s: when a retry may succeed, seconds, where the failure knows it (admission control's refusal,
            the LLM server's own `Retry-After` on a 429); None otherwise.
    """

    kind: str
    message: str
    retryable: bool = False
    retry_after_s: float | None = None


KNOWN_ERRORS: tuple[type[Exception], ...] = (
    AgentError,
    EmbedderError,
    StoreError,
    OSError,
    ValidationError,
    SettingsError,
    InputError,
    IngestError,
    ScopeError,
    LookupError,
    ExceptionGroup,
)
"""The exception types `describe` may classify (a subclass it does not know, e.g. `KeyError`, gives None)."""


def _one_line(text: str) -> str:
    return " ".join(text.split())


def describe(exc: BaseException) -> Failure | None:
    """Classify `exc`; None when it is not one of the product's error types (a bug).

    Known: `agent.core.errors.AgentError` (its `kind`; an answer timeout is `timeout`; `overloaded`, admission control's
    refusal, and `quota_exceeded`, an API key over its quota, are retryable after their `retry_after_s`),
    `agent.core.errors.InputError` and
    `tools.ingest.IngestError`, `tools.scope.ScopeError` (`bad_request`: the product's checked inputs), `EmbedderError`
    (`retrieval_unavailable`, or `embedder_overloaded` for a full Triton queue), the store's errors (a Postgres that
    is down: `postgres_unavailable`; no free pooled connection: `postgres_busy`; a failed statement:
    `postgres_error`; any other `StoreError`: `store_error`), the settings' pydantic `ValidationError`,
    `LookupError` raised as such (a model without a tokenizer), `OSError` (missing files, unreachable sockets),
    `TimeoutError`. Any other `ValueError` is a bug (None). The local stack's `infra.processes.ServiceError` is the
    CLI's own (`agent.cli`), since only the CLI manages the stack.
    """
    if isinstance(exc, BaseExceptionGroup):  # from task groups: the first classified inner error
        for inner in exc.exceptions:
            if (failure := describe(inner)) is not None:
                return failure
        return None
    if isinstance(exc, OverloadedError | QuotaExceededError):
        return Failure(exc.kind, _one_line(str(exc)), retryable=True, retry_after_s=exc.retry_after_s)
    if isinstance(exc, AnswerLimitError) and exc.limit == "timeout":
        return Failure("timeout", _one_line(str(exc)), retryable=True)
    if isinstance(exc, AgentError):
        retryable = isinstance(exc, LLMUnavailableError | IssuerUnavailableError)
        return Failure(exc.kind, _one_line(str(exc)), retryable, getattr(exc, "retry_after_s", None))
    if isinstance(exc, EmbedderOverloadedError):
        return Failure("embedder_overloaded", _one_line(str(exc)), retryable=True)
    if isinstance(exc, EmbedderError):
        return Failure("retrieval_unavailable", _one_line(str(exc)), retryable=True)
    if isinstance(exc, StoreBusyError):  # the store's messages say what failed and what to do
        return Failure("postgres_busy", _one_line(str(exc)), retryable=True)
    if isinstance(exc, StoreUnavailableError):
        return Failure("postgres_unavailable", _one_line(str(exc)), retryable=True)
    if isinstance(exc, StoreQueryError):
        return Failure("postgres_error", _one_line(str(exc)))
    if isinstance(exc, StoreError):
        return Failure("store_error", _one_line(str(exc)), retryable=True)
    if isinstance(exc, ValidationError):
        return Failure("invalid_settings", _one_line(describe_validation_error(exc)))
    if isinstance(exc, SettingsError):
        return Failure("invalid_settings", _one_line(str(exc)))
    if isinstance(exc, TimeoutError | asyncio.TimeoutError):
        return Failure("timeout", _one_line(str(exc)) or "timed out", retryable=True)
    if isinstance(exc, InputError | IngestError | ScopeError):
        return Failure("bad_request", _one_line(str(exc)))
    if type(exc) is LookupError:
        return Failure("config_error", _one_line(str(exc)))
    if isinstance(exc, OSError):
        return Failure("os_error", _one_line(f"{type(exc).__name__}: {exc}"))
    return None
