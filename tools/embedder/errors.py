"""The translation of tritonclient's errors into the embedder's (`tools.errors`: `EmbedderError`,
`EmbedderOverloadedError`; here `EmbedderStubFailedError`, which only the embedder's own clients raise and act on):
the one place that reads tritonclient's `InferenceServerException`; nothing above `tools.embedder` sees gRPC's or
tritonclient's types."""

from __future__ import annotations

from tritonclient.utils import InferenceServerException

from tools.errors import EmbedderError

_TRANSIENT = {"StatusCode.UNAVAILABLE", "StatusCode.RESOURCE_EXHAUSTED"}
_OVERLOAD_MESSAGES = ("Exceeds maximum queue size", "Request timeout expired")
"""Triton's messages (status UNAVAILABLE) for a request refused by the model's queue policy: the queue is full
(`max_queue_size`), or the request waited longer than its queue timeout (`default_timeout_microseconds` or the
request's own `timeout`)."""


class EmbedderStubFailedError(EmbedderError):
    """A Python-backend model's stub failed on a server: nothing that server answers for the model is used again.

    Triton's Python backend gives up on a batch when the stub process has not marked itself healthy within 1 s while
    Triton waits for its answer (python_backend `src/stub_launcher.cc`, `ReceiveMessageFromStub`; the stub marks
    itself every 300 ms from a thread of its own), and answers the batch's requests with INTERNAL "Stub process
    '...' is not healthy.". If the stub was only starved of CPU, it later sends that batch's answers, and Triton hands
    them to the next batch: reproduced with a stub stopped 2.5 s, the next request of 2 texts got 64 embeddings
    back, and then Triton aborted. Only the local stack runs the Python backend (`infra/backends/onnxruntime`); the
    compiled onnxruntime backend of a GPU server has no stub. Remedy: restart that Triton.
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


def is_stub_failure(exc: BaseException) -> bool:
    """True when `exc` is Triton's INTERNAL "Stub process '...' is not healthy." of a Python-backend model whose stub
    missed a health check or exited (`tools.embedder.recovery`)."""
    return (
        isinstance(exc, InferenceServerException)
        and exc.status() == "StatusCode.INTERNAL"
        and "Stub process" in (exc.message() or "")
        and "is not healthy" in (exc.message() or "")
    )


def describe(exc: InferenceServerException) -> str:
    """A short line for messages: the gRPC status without its prefix (or "deadline exceeded") and Triton's text."""
    status = exc.status() or ""
    if status == "StatusCode.DEADLINE_EXCEEDED":
        return f"deadline exceeded ({exc.message()})"
    return f"{status.removeprefix('StatusCode.') or 'error'}: {exc.message()}"
