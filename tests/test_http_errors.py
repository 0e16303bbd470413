"""The HTTP layer's mapping from typed errors to status codes and JSON bodies. Pure logic, no server."""

from __future__ import annotations

import pytest

from agent.errors import AgentError, AnswerLimitError, LLMConfigError, LLMResponseError, LLMUnavailableError
from agent.http_api import error_body
from tools.embedder import EmbedderError
from tools.store import StoreError


@pytest.mark.parametrize(
    ("exc", "status", "kind"),
    [
        (AnswerLimitError("tokens", "token budget hit"), 422, "limit_exceeded"),
        (LLMResponseError("no choices"), 502, "llm_bad_response"),
        (LLMUnavailableError("connection refused"), 503, "llm_unavailable"),
        (LLMConfigError("no tool calling"), 503, "llm_misconfigured"),
        (AgentError("other"), 500, "agent_error"),
        (ValueError("question is blank"), 422, "bad_request"),
        (EmbedderError("Triton down"), 503, "retrieval_unavailable"),
        (StoreError("Postgres down"), 503, "retrieval_unavailable"),
    ],
)
def test_each_error_type_has_its_status_and_kind(exc: Exception, status: int, kind: str) -> None:
    assert error_body(exc) == (status, {"error": kind, "detail": str(exc)})


def test_unexpected_errors_are_not_swallowed() -> None:
    with pytest.raises(KeyError):
        error_body(KeyError("bug"))
