"""OpenAI's error shape on the OpenAI-compatible routes (`/v1/chat/completions`, `/v1/models`):
`{"error": {"message", "type", "param", "code"}}` with the same status codes and `Retry-After` as `/v1/ask`.

- `code` is the kind `/v1/ask` would name (`bad_request`, `unauthorized`, `overloaded`, `llm_unavailable`, ...), or
  `model_not_found` for a model this server does not serve; `type` is OpenAI's class of the status
  (`OPENAI_TYPE_OF_STATUS`); `param` names the request field at fault when one is (validation errors).
- Errors raised inside these routes (validation, the API key, admission control, the answer) are shaped by
  `OpenAIRoute`, the routes' class; answers given before routing (the guards' 401/413/400, 405, the drain's 503) are
  rewritten by `OpenAIErrorShape`, a pure ASGI middleware, from the app's `{"error": kind, "detail": ...}`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from fastapi.sse import format_sse_event
from pydantic import BaseModel
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agent.http.errors import STATUS_OF_KIND, ApiError, error_response, failure_of, unreadable_body
from agent.http.shutdown import CUT_DETAIL, sse_error_ending

OPENAI_PATHS = ("/v1/chat/completions", "/v1/models")
"""Paths (and, for `/v1/models`, the paths under it) whose errors take OpenAI's shape."""

OPENAI_TYPE_OF_STATUS = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "invalid_request_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
}
"""OpenAI's error `type` of a status (its API reference, "Error codes"); any other status >= 500 is `server_error`."""

KIND_OF_STATUS = {401: "unauthorized", 404: "not_found", 405: "method_not_allowed", 422: "bad_request"}
"""The `code` of an HTTP error raised without a kind of its own on these routes."""


class OpenAIErrorDetail(BaseModel):
    """The `error` object of OpenAI's error body."""

    message: str
    type: str
    param: str | None = None
    code: str | None = None


class OpenAIErrorBody(BaseModel):
    """OpenAI's error body, on the OpenAI-compatible routes and in their streams (`data: {"error": {...}}`)."""

    error: OpenAIErrorDetail


class OpenAIError(Exception):
    """An error these routes answer as it is: `status` with `message`, `code` and `param` in OpenAI's shape."""

    def __init__(self, status: int, message: str, code: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.code, self.param = status, message, code, param


def is_openai_path(path: str) -> bool:
    """True for `/v1/chat/completions`, `/v1/models` and the paths under `/v1/models/`."""
    return path in OPENAI_PATHS or path.startswith("/v1/models/")


def openai_error_body(status: int, message: str, code: str | None, param: str | None = None) -> OpenAIErrorBody:
    """The body of an error with `status` (its `type` from `OPENAI_TYPE_OF_STATUS`)."""
    kind = OPENAI_TYPE_OF_STATUS.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return OpenAIErrorBody(error=OpenAIErrorDetail(message=message, type=kind, param=param, code=code))


def openai_error_of(exc: Exception) -> OpenAIErrorBody:
    """The body of a failure raised while answering (the data of a stream's error event): its kind as `code`."""
    failure = failure_of(exc)
    return openai_error_body(STATUS_OF_KIND.get(failure.kind, 500), failure.message, failure.kind)


def stream_ending(path: str) -> bytes:
    """The last bytes of an event stream on `path` cut by the end of `rag serve`'s drain (`agent.http.shutdown`): on the
    OpenAI-compatible routes an error chunk (`data: {"error": {...}}`, code `shutting_down`, a retryable 503) and
    `data: [DONE]`; elsewhere `agent.http.shutdown.sse_error_ending`."""
    if not is_openai_path(path):
        return sse_error_ending(path)
    body = openai_error_body(STATUS_OF_KIND["shutting_down"], CUT_DETAIL, "shutting_down")
    return format_sse_event(data_str=body.model_dump_json()) + format_sse_event(data_str="[DONE]")


def _param(loc: Sequence[int | str]) -> str | None:
    """`messages[2].content` of the location `("body", "messages", 2, "content")`."""
    parts = list(loc[1:] if loc and loc[0] == "body" else loc)
    name = ""
    for part in parts:
        name += f"[{part}]" if isinstance(part, int) else (f".{part}" if name else str(part))
    return name or None


def _validation_response(exc: RequestValidationError) -> JSONResponse:
    errors = exc.errors()
    messages = []
    for error in errors:
        where = _param(error.get("loc", ()))
        message = str(error.get("msg", "invalid")).removeprefix("Value error, ")
        messages.append(f"{where}: {message}" if where else message)
    param = _param(errors[0].get("loc", ())) if errors else None
    body = openai_error_body(422, "; ".join(messages), "bad_request", param)
    return JSONResponse(body.model_dump(), status_code=422)


def openai_response(response: Response) -> Response:
    """`response` with its `{"error": kind, "detail": ...}` body (the app's error shape) in OpenAI's shape, same
    status and headers; any other response unchanged."""
    if response.status_code < 400 or not isinstance(response, JSONResponse):
        return response
    body = json.loads(bytes(response.body))
    if not isinstance(body, dict) or not isinstance(body.get("error"), str):
        return response
    shaped = openai_error_body(response.status_code, str(body.get("detail", "")), body["error"])
    headers = {k: v for k, v in response.headers.items() if k.lower() not in ("content-length", "content-type")}
    return JSONResponse(shaped.model_dump(), status_code=response.status_code, headers=headers)


class OpenAIRoute(APIRoute):
    """The route class of the OpenAI-compatible routes: every error raised while handling a request (validation,
    the API key dependency, admission control, the answer, a bug) answers in OpenAI's shape, with the status and
    `Retry-After` `/v1/ask` would give (`agent.http.errors`)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def route(request: Request) -> Response:
            try:
                return await handler(request)
            except OpenAIError as exc:
                body = openai_error_body(exc.status, exc.message, exc.code, exc.param)
                return JSONResponse(body.model_dump(), status_code=exc.status)
            except RequestValidationError as exc:
                return _validation_response(exc)
            except HTTPException as exc:
                if (unreadable := unreadable_body(exc)) is not None:  # as malformed JSON: 422 `bad_request`
                    return openai_response(error_response(unreadable))
                kind = exc.kind if isinstance(exc, ApiError) else KIND_OF_STATUS.get(exc.status_code, "")
                kind = kind or f"http_{exc.status_code}"
                body = openai_error_body(exc.status_code, str(exc.detail), kind)
                return JSONResponse(body.model_dump(), status_code=exc.status_code, headers=exc.headers)
            except Exception as exc:  # noqa: BLE001 - product errors and bugs (logged by failure_of) alike
                return openai_response(error_response(failure_of(exc)))

        return route


class OpenAIErrorShape:
    """ASGI middleware: on the OpenAI-compatible paths, an error response in the app's shape (`{"error": kind,
    "detail": ...}`, JSON, status >= 400) from the layers before the route (API key and body guards, the drain,
    405) is rewritten to OpenAI's shape; every other response passes through untouched, streams included."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not is_openai_path(scope["path"]):
            await self.app(scope, receive, send)
            return
        start: Message | None = None
        chunks: list[bytes] = []

        async def rewrite(message: Message) -> None:
            nonlocal start
            if message["type"] == "http.response.start":
                headers = dict((k.decode("latin-1").lower(), v) for k, v in message.get("headers", []))
                if message["status"] >= 400 and headers.get("content-type", b"").startswith(b"application/json"):
                    start = message  # held until the whole (small) error body is here
                    return
            elif message["type"] == "http.response.body" and start is not None:
                chunks.append(message.get("body", b""))
                if message.get("more_body", False):
                    return
                await _send_rewritten(send, start, b"".join(chunks))
                return
            await send(message)

        await self.app(scope, receive, rewrite)


async def _send_rewritten(send: Send, start: Message, body: bytes) -> None:
    raw_headers = [(k, v) for k, v in start.get("headers", []) if k.lower() not in (b"content-length", b"content-type")]
    headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in raw_headers}
    try:
        original = JSONResponse(json.loads(body), status_code=start["status"], headers=headers)
    except ValueError:  # not JSON after all: sent as it came
        await send(start)
        await send({"type": "http.response.body", "body": body})
        return
    shaped = openai_response(original)
    await send({"type": "http.response.start", "status": shaped.status_code, "headers": shaped.raw_headers})
    await send({"type": "http.response.body", "body": bytes(shaped.body)})
