"""Typed errors of the answering agent: what callers (CLI, chat, HTTP API, services) catch instead of tracebacks.

Every class carries a message written for the person running the service; `AgentError.kind` is a stable
machine-readable name (the HTTP API returns it as `error` and maps it to a status code itself). `InputError` is the
product's one bad-input error.
"""

from __future__ import annotations

from typing import Literal

LimitKind = Literal["requests", "tool_calls", "tokens", "timeout"]


class AgentError(RuntimeError):
    """Base class: an answer could not be produced. `kind` names the failure; `str(exc)` is the readable message."""

    kind = "agent_error"


class AnswerLimitError(AgentError):
    """An answer hit one of its limits: LLM requests, tool calls, the token budget, or the wall-clock timeout.

    Attributes:
        limit: which one (`requests`, `tool_calls`, `tokens`, `timeout`).
    """

    kind = "limit_exceeded"

    def __init__(self, limit: LimitKind, message: str) -> None:
        self.limit = limit
        super().__init__(message)


class LLMUnavailableError(AgentError):
    """The LLM server could not be reached or kept failing (connection refused, 5xx, timeouts) after the bounded
    retries."""

    kind = "llm_unavailable"


class LLMResponseError(AgentError):
    """The LLM server answered with something unusable (no choices, a rejected request, malformed output)."""

    kind = "llm_bad_response"


class LLMConfigError(AgentError):
    """The LLM server is set up in a way the agent cannot use (e.g. started without tool calling)."""

    kind = "llm_misconfigured"


class InputError(ValueError):
    """A request's input that the product checks itself is invalid (a blank question, `top_k` < 1, a document
    without an id or with a NUL character, nothing to delete); the message names the input and what was expected.

    The one input error of the product: interfaces answer it as a client error (HTTP 422 `bad_request`). Any other
    `ValueError` raised inside the product is a bug. A `ValueError` subclass, so callers that catch `ValueError` for
    bad input keep working.
    """

    kind = "bad_request"


class LLMRateLimitedError(LLMUnavailableError):
    """The LLM server kept refusing the request for its rate limit (HTTP 429) after the bounded retries.

    Attributes:
        retry_after_s: seconds the server asked to wait (its `Retry-After` / `retry-after-ms`), None when it did not
            say; the HTTP API passes it on as its own `Retry-After`.
    """

    kind = "llm_rate_limited"

    def __init__(self, message: str, retry_after_s: float | None = None) -> None:
        self.retry_after_s = retry_after_s
        super().__init__(message)


class OverloadedError(AgentError):
    """The process refused the answer before doing any work: its admission queue is full, the wait could not be
    promised within `ANSWER_QUEUE_DEADLINE_S`, or the answer waited in the queue twice that deadline (a stalled
    service; `agent.core.admission`).

    Attributes:
        retry_after_s: when a retry may be admitted, seconds (from the measured service rate; the HTTP API sends it
            as `Retry-After`).
        reason: `queue_full`, `expected_wait` or `deadline` (the `reason` label of `rag_admission_rejections_total`).
    """

    kind = "overloaded"

    def __init__(self, message: str, retry_after_s: float, reason: str) -> None:
        self.retry_after_s = retry_after_s
        self.reason = reason
        super().__init__(message)


QuotaLimit = Literal["requests_per_minute", "tokens_per_day"]


class QuotaExceededError(AgentError):
    """An API key is over one of its quotas (`agent.core.quotas`): refused before any work, no LLM token spent.

    Attributes:
        limit: which quota (`requests_per_minute`, `tokens_per_day`; the `limit` label of
            `rag_key_quota_refusals_total`).
        retry_after_s: when the key may try again, seconds (the HTTP API sends it as `Retry-After`).
    """

    kind = "quota_exceeded"

    def __init__(self, message: str, limit: QuotaLimit, retry_after_s: float) -> None:
        self.limit = limit
        self.retry_after_s = retry_after_s
        super().__init__(message)


class IssuerUnavailableError(AgentError):
    """The OpenID Connect issuer's discovery document or signing keys (JWKS) could not be read, or do not fit the
    settings (`agent.core.oidc`): a token cannot be checked, so the request is refused as unavailable (503), never as
    unauthorized."""

    kind = "issuer_unavailable"
