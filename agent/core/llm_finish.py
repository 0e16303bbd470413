"""How an LLM response ended, beyond a complete answer: cut at the output budget, cut short, or rate limited.

- `finish_reason: "length"`: the model stopped at `max_tokens` (`LLM_MAX_TOKENS`). The answer is kept and flagged
  (`AskResult.truncated`), since its text is valid as far as it goes.
- An answer whose stream ended without any finish reason (the server stopped, or the connection was cut before the
  final chunk and `[DONE]`): the text is incomplete in an unknown way, so it is an error; the server or the
  connection failed, not the request, so asking again may work (`LLMUnavailableError`, 503 `llm_unavailable` with
  `Retry-After`). pydantic-ai fills in `stop` for a missing finish reason; the one the server sent is in the
  response's `provider_details["finish_reason"]` (pydantic-ai 2.62, `models/openai.py`). vLLM, Triton's OpenAI
  frontend and OpenAI send one on the last chunk of every stream.
- HTTP 429 that persisted through the OpenAI SDK's retries: `LLMRateLimitedError` (503 `llm_rate_limited`) with the
  server's `Retry-After`, which the HTTP API passes on.
"""

from __future__ import annotations

from pydantic_ai.exceptions import ModelRateLimitError
from pydantic_ai.messages import ModelResponse

from agent.core.errors import LLMRateLimitedError, LLMUnavailableError


def is_truncated(response: ModelResponse) -> bool:
    """True when the model stopped at its output token limit (OpenAI `finish_reason: "length"`)."""
    return response.finish_reason == "length"


def require_finish_reason(response: ModelResponse) -> None:
    """Check that the server ended `response` with a finish reason of its own: pydantic-ai's OpenAI model gave the
    response a finish reason (its own `stop` when the server sent none), so it reads them; the server's own is then
    in `provider_details`. Models that report no finish reason at all (pydantic-ai's test doubles) are not checked.

    Raises:
        LLMUnavailableError: the server sent none: the answer stream was cut short (retryable).
    """
    if response.finish_reason is not None and not (response.provider_details or {}).get("finish_reason"):
        raise LLMUnavailableError(
            "the LLM server's answer stream ended without a finish reason: the answer was cut short (did the server "
            "stop or the connection drop?)"
        )


def rate_limit_error(exc: Exception) -> LLMRateLimitedError | None:
    """`LLMRateLimitedError` for a rate-limited request (HTTP 429 after the SDK's retries), with `retry_after_s`
    (seconds, from the server's `Retry-After` / `retry-after-ms`, read by pydantic-ai's `ModelAPIError.retry_after`);
    None for any other error."""
    if not isinstance(exc, ModelRateLimitError):
        return None
    wait = f"; it asked to retry after {exc.retry_after:g} s" if exc.retry_after is not None else ""
    return LLMRateLimitedError(f"the LLM server is rate limiting requests (HTTP 429){wait}", exc.retry_after)
