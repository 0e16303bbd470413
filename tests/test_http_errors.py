"""The HTTP layer's mapping from typed errors to status codes and JSON bodies. Pure logic, no server."""

from __future__ import annotations

import json

import pytest

from agent.errors import AgentError, AnswerLimitError, LLMConfigError, LLMResponseError, LLMUnavailableError
from agent.failures import describe
from agent.http_api import error_response, failure_of
from tools.embedder import EmbedderError
from tools.store import StoreError


@pytest.mark.parametrize(
    ("exc", "status", "kind"),
    [
        (AnswerLimitError("tokens", "token budget hit"), 422, "limit_exceeded"),
        (AnswerLimitError("timeout", "answer took too long"), 504, "timeout"),
        (LLMResponseError("no choices"), 502, "llm_bad_response"),
        (LLMUnavailableError("connection refused"), 503, "llm_unavailable"),
        (LLMConfigError("no tool calling"), 503, "llm_misconfigured"),
        (AgentError("other"), 500, "agent_error"),
        (ValueError("question is blank"), 422, "bad_request"),
        (EmbedderError("Triton down"), 503, "retrieval_unavailable"),
        (StoreError("Postgres down"), 503, "store_error"),
    ],
)
def test_each_error_type_has_its_status_and_kind(exc: Exception, status: int, kind: str) -> None:
    response = error_response(failure_of(exc))
    assert response.status_code == status
    assert json.loads(bytes(response.body)) == {"error": kind, "detail": str(exc)}


def test_unexpected_errors_are_internal_errors_without_their_message() -> None:
    assert describe(KeyError("bug")) is None
    failure = failure_of(KeyError("secret detail"))
    assert failure.kind == "internal_error" and "secret detail" not in failure.message
    assert error_response(failure).status_code == 500
