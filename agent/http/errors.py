"""The HTTP error contract: every error is an `ErrorBody` `{"error": kind, "detail": message}` with the status of its
kind (`STATUS_OF_KIND`); a retryable 503 or 429 carries `Retry-After`."""

from __future__ import annotations

import logging
import math
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException

from agent.core.failures import KNOWN_ERRORS, Failure, describe

RETRY_AFTER_S = 5
"""`Retry-After` seconds sent with a 503: about the time the local Postgres or Triton takes to come back after a
restart (~1 s and ~3 s on the project machine)."""

STATUS_OF_KIND: dict[str, int] = {
    "bad_request": 422,
    "limit_exceeded": 422,
    "not_found": 404,
    "document_not_found": 404,
    "conversation_not_found": 404,
    "answer_not_found": 404,
    "chunk_not_found": 404,
    "original_not_kept": 404,
    "page_not_found": 404,
    "grant_not_found": 404,
    "not_a_pdf": 422,
    "payload_too_large": 413,
    "unauthorized": 401,
    "quota_exceeded": 429,
    "forbidden_collection": 403,
    "method_not_allowed": 405,
    "timeout": 504,
    "overloaded": 503,
    "shutting_down": 503,
    "llm_bad_response": 502,
    "llm_unavailable": 503,
    "issuer_unavailable": 503,
    "llm_rate_limited": 503,
    "llm_misconfigured": 503,
    "retrieval_unavailable": 503,
    "embedder_overloaded": 503,
    "store_error": 503,
    "postgres_unavailable": 503,
    "postgres_busy": 503,
    "postgres_error": 500,
    "invalid_settings": 500,
    "config_error": 500,
    "os_error": 500,
    "internal_error": 500,
}
"""HTTP status of each failure kind (`agent.core.failures.Failure.kind`); a kind not listed is 500."""

KIND_OF_STATUS = {
    401: "unauthorized",
    404: "not_found",
    405: "method_not_allowed",
    411: "length_required",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "bad_request",
}
"""The kind of an HTTP error raised without one of its own (Starlette's 404/405, the upload route's 411/413/415)."""

log = logging.getLogger("agent.http")


def error_json(status: int, kind: str, detail: str, headers: dict[str, str] | None = None) -> JSONResponse:
    """The API's error response: `{"error": kind, "detail": detail}` with `status`."""
    return JSONResponse({"error": kind, "detail": detail}, status_code=status, headers=headers)


class ApiError(HTTPException):
    """An HTTP error of a route with its own kind (e.g. 403 `forbidden_collection`): answered as `ErrorBody`
    `{"error": kind, "detail": detail}` with `status`."""

    def __init__(self, status: int, kind: str, detail: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(status, detail, headers)
        self.kind = kind


class ErrorBody(BaseModel):
    """The body of every error response and of the stream's `error` event."""

    error: str = Field(description="Stable kind, e.g. `bad_request`, `llm_unavailable`, `postgres_unavailable`.")
    detail: str = Field(description="Readable message.")


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody, "description": description}
    for status, description in (
        (401, "Missing, wrong or revoked API key (`API_KEY` is set or API keys exist), or a refused sign-in token."),
        (403, "`forbidden_collection`: a collection named in the request is not one of the API key's."),
        (422, "Bad input or a hit answer limit."),
        (429, "`quota_exceeded`: the API key is over its requests per minute or tokens per day; see `Retry-After`."),
        (502, "The LLM answered with something unusable."),
        (
            503,
            "Overloaded (`overloaded`: admission control refused the answer) or a dependency (Triton, Postgres, the "
            "LLM) is down or overloaded; see `Retry-After`.",
        ),
        (504, "The answer timed out."),
    )
}
"""The error responses of the API's routes, for the OpenAPI schema."""


def error_response(failure: Failure) -> JSONResponse:
    """The JSON response of `failure`: status from `STATUS_OF_KIND`, `Retry-After` when it is retryable and 503 or 429
    (the failure's own `retry_after_s` rounded up to whole seconds when it has one, else `RETRY_AFTER_S`)."""
    status = STATUS_OF_KIND.get(failure.kind, 500)
    retry_after = RETRY_AFTER_S if failure.retry_after_s is None else max(1, math.ceil(failure.retry_after_s))
    headers = {"Retry-After": str(retry_after)} if status in (429, 503) and failure.retryable else None
    return JSONResponse(error_body(failure).model_dump(), status_code=status, headers=headers)


def error_body(failure: Failure) -> ErrorBody:
    """The `ErrorBody` of `failure` (also the data of the stream's `error` event)."""
    return ErrorBody(error=failure.kind, detail=failure.message)


def failure_of(exc: Exception) -> Failure:
    """`agent.core.failures.describe(exc)`, or `internal_error` (logged with its traceback) for an unknown exception."""
    failure = describe(exc)
    if failure is None:
        log.exception("unexpected error", exc_info=exc)
        return Failure("internal_error", f"unexpected {type(exc).__name__}; see the server log")
    return failure


def unreadable_body(exc: HTTPException) -> Failure | None:
    """The `bad_request` failure (422, like malformed JSON) of FastAPI's 400 for a body it could not parse at all
    (bytes that are not UTF-8, naming the byte); None for any other HTTP error."""
    cause = exc.__cause__
    if exc.status_code != 400 or cause is None:
        return None
    if isinstance(cause, UnicodeDecodeError):
        return Failure("bad_request", f"body: not valid UTF-8 at byte {cause.start} ({cause.reason}); expected JSON")
    return Failure("bad_request", f"body: cannot be parsed ({type(cause).__name__}: {cause}); expected JSON")


def _validation_detail(exc: RequestValidationError) -> str:
    """The errors of `exc`, each once: a body that a route and one of its dependencies both declare is validated
    (and reported) by each."""
    parts: dict[str, None] = {}
    for error in exc.errors():
        where = ".".join(str(part) for part in error.get("loc", ()))
        message = str(error.get("msg", "invalid")).removeprefix("Value error, ")
        parts[f"{where}: {message}" if where else message] = None
    return "; ".join(parts)


def install_error_handlers(app: FastAPI) -> None:
    """Give every error of `app` the `ErrorBody` shape: product errors, validation errors, HTTP errors, bugs."""

    async def on_validation(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        return error_response(Failure("bad_request", _validation_detail(exc)))

    async def on_http(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, HTTPException)
        if (unreadable := unreadable_body(exc)) is not None:
            return error_response(unreadable)
        kind = KIND_OF_STATUS.get(exc.status_code, f"http_{exc.status_code}")
        if isinstance(exc, ApiError):
            kind = exc.kind
        body = ErrorBody(error=kind, detail=str(exc.detail))
        return JSONResponse(body.model_dump(), status_code=exc.status_code, headers=exc.headers)

    async def on_error(request: Request, exc: Exception) -> JSONResponse:
        return error_response(failure_of(exc))

    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(HTTPException, on_http)
    for known in KNOWN_ERRORS:  # answered by Starlette's ExceptionMiddleware, like any handled error
        app.add_exception_handler(known, on_error)
    app.add_exception_handler(Exception, on_error)  # a bug: answered, then re-raised to the server log
