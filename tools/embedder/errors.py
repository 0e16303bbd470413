"""The embedder's errors, and the translation of tritonclient's errors into them (the one place that reads
tritonclient's `InferenceServerException`; nothing above `tools.embedder` sees gRPC's or tritonclient's types)."""

from __future__ import annotations

from tritonclient.utils import InferenceServerException

_TRANSIENT = {"StatusCode.UNAVAILABLE", "StatusCode.RESOURCE_EXHAUSTED"}
_OVERLOAD_MESSAGES = ("Exceeds maximum queue size", "Request timeout expired")
"""Triton's messages (status UNAVAILABLE) for a request refused by the model's queue policy: the queue is full
(`max_queue_size`), or the request waited longer than its queue timeout (`default_timeout_microseconds` or the
request's own `timeout`)."""


class EmbedderError(RuntimeError):
    """Embedding failed: bad input, Triton unreachable or not ready, a timeout, or a bad model output."""


class EmbedderOverloadedError(EmbedderError):
    """Triton (or this client) refused the request for lack of capacity; trying again later may succeed.

    Raised without retrying when Triton's queue for the model is full or the request outwaited its queue timeout
    (the model's `dynamic_batching.default_queue_policy`), and when this client waited `timeout_s` for a free
    in-flight slot. An HTTP API answers it with 503 Service Unavailable and a `Retry-After` header.
    """


def is_overload(exc: BaseException) -> bool:
    """True when `exc` is Triton refusing a request for lack of capacity (queue full or queue timeout)."""
    return (
        isinstance(exc, InferenceServerException)
        and exc.status() == "StatusCode.UNAVAILABLE"
        and any(m in (exc.message() or "") for m in _OVERLOAD_MESSAGES)
    )


def is_transient(exc: BaseException) -> bool:
    """True for a failure worth retrying: UNAVAILABLE or RESOURCE_EXHAUSTED that is not an overload refusal."""
    return isinstance(exc, InferenceServerException) and exc.status() in _TRANSIENT and not is_overload(exc)


def describe(exc: InferenceServerException) -> str:
    """A short line for messages: the gRPC status without its prefix (or "deadline exceeded") and Triton's text."""
    status = exc.status() or ""
    if status == "StatusCode.DEADLINE_EXCEEDED":
        return f"deadline exceeded ({exc.message()})"
    return f"{status.removeprefix('StatusCode.') or 'error'}: {exc.message()}"
