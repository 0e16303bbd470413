"""A small scripted OpenAI-compatible chat server for behaviours only Triton's OpenAI frontend (or a failing server)
shows: each request pops the next scripted reply; every request body is recorded.

Replies (`Reply`): text (streamed as SSE chunks when the request asks for `stream`), a tool call, empty `choices`,
an HTTP error with a body and headers, or a delay; a text reply may end with another finish reason (`length`), or
be cut short (a stream with neither a finish reason nor `[DONE]`), and may wait for a gate the test opens. `GET
/v1/models` reports `max_model_len` (as vLLM does) when the state sets it. Like Triton's frontend, a request
without `max_tokens` gets at most 16 output tokens (here: words) — the quirk the `triton` profile guards against.

Started by `FakeOpenAIServer` (uvicorn in a thread on a free port, `ThreadedServer`), used as a context manager.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from infra.threaded_server import ThreadedServer as ThreadedServer  # where the tests import it from

TRITON_DEFAULT_MAX_TOKENS = 16
"""Output tokens Triton's OpenAI frontend generates when a request has no `max_tokens`."""

VLLM_NO_TOOLS_ERROR = {
    "error": {
        "message": '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set',
        "type": "BadRequestError",
        "param": None,
        "code": 400,
    }
}
"""vLLM 0.32's 400 body for `tools` with tool_choice `auto` on a server started without tool calling
(vllm/renderers/online_renderer.py)."""


TRITON_UNKNOWN_MODEL_ERROR = {"detail": "Unknown model: llama-3.1-8b-instruct"}
"""Triton's OpenAI frontend (r26.07) for a model name it does not serve: HTTP 400, FastAPI's `detail` body
(openai_frontend/engine/triton_engine.py raises ClientError, frontend/fastapi/routers/chat.py answers 400)."""

TRITON_NO_TOOLS_ERROR = {"detail": '"auto" tool choice requires --tool-call-parser to be set'}
"""Triton's OpenAI frontend (r26.07) for `tools` with tool_choice `auto` on a server started without
`--tool-call-parser`: HTTP 400."""


@dataclass
class Reply:
    """One scripted reply: `text`, or a `tool_call` (name, arguments dict), or `empty_choices`, or an HTTP
    `status` with `body` and `headers`; `delay_s` waits before answering.

    Attributes:
        usage: False leaves token usage out (as some servers do), even when a stream asks for it.
        finish_reason: of a text reply (`stop`, or `length` for an answer cut at max_tokens).
        cut_short: a streamed text reply ends after its text with neither a finish reason nor `[DONE]`.
        arrived: set when the request has arrived (before any wait).
        gate: the reply waits until the test sets it (a deterministic hold, e.g. an answer stream kept open).
    """

    text: str | None = None
    tool_call: tuple[str, dict[str, Any]] | None = None
    empty_choices: bool = False
    status: int = 200
    body: dict[str, Any] | None = None
    headers: dict[str, str] | None = None
    delay_s: float = 0.0
    usage: bool = True
    finish_reason: str = "stop"
    cut_short: bool = False
    arrived: threading.Event = field(default_factory=threading.Event)
    gate: threading.Event | None = None


@dataclass
class FakeState:
    """Script and record shared between the test and the server thread."""

    script: list[Reply] = field(default_factory=list)
    default: Reply = field(default_factory=lambda: Reply(text="The passages say so [1]."))
    requests: list[dict[str, Any]] = field(default_factory=list)
    max_model_len: int | None = None


def _chunk(delta: dict[str, Any], finish: str | None = None, model: str = "fake") -> str:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    body = {"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": model, "choices": [choice]}
    return f"data: {json.dumps(body)}\n\n"


def build_app(state: FakeState) -> FastAPI:
    """The fake server: `POST /v1/chat/completions`, `GET /v1/models`."""
    app = FastAPI()

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        model: dict[str, Any] = {"id": "fake", "object": "model"}
        if state.max_model_len is not None:
            model["max_model_len"] = state.max_model_len
        return {"object": "list", "data": [model]}

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        body = await request.json()
        state.requests.append(body)
        reply = state.script.pop(0) if state.script else state.default
        reply.arrived.set()
        if reply.gate is not None:
            await asyncio.to_thread(reply.gate.wait)
        if reply.delay_s:
            await asyncio.sleep(reply.delay_s)
        if reply.status != 200:
            body = reply.body or {"error": {"message": "scripted error"}}
            return JSONResponse(body, status_code=reply.status, headers=reply.headers)
        text = reply.text or ""
        if "max_tokens" not in body:  # Triton's frontend default
            text = " ".join(text.split(" ")[:TRITON_DEFAULT_MAX_TOKENS])
        model = body.get("model", "fake")
        if not body.get("stream"):
            message: dict[str, Any] = {"role": "assistant", "content": text}
            if reply.tool_call is not None:
                name, args = reply.tool_call
                message = {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": "call_1", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
                    ],
                }
            finish = reply.finish_reason if reply.tool_call is None else "tool_calls"
            choices = [] if reply.empty_choices else [{"index": 0, "message": message, "finish_reason": finish}]
            usage = {"prompt_tokens": 10, "completion_tokens": len(text.split()), "total_tokens": 10}
            completion = {"id": "c1", "object": "chat.completion", "created": 0, "model": model, "choices": choices}
            return JSONResponse(completion | ({"usage": usage} if reply.usage else {}))

        async def stream() -> AsyncIterator[str]:
            if reply.empty_choices:
                empty = {"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": model, "choices": []}
                yield f"data: {json.dumps(empty)}\n\n"
            elif reply.tool_call is not None:
                name, args = reply.tool_call
                call = {
                    "index": 0,
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(args)},
                }
                yield _chunk({"role": "assistant", "tool_calls": [call]}, model=model)
                yield _chunk({}, "tool_calls", model=model)
            else:
                yield _chunk({"role": "assistant", "content": ""}, model=model)
                for word in text.split(" "):
                    yield _chunk({"content": word + " "}, model=model)
                if reply.cut_short:
                    return
                yield _chunk({}, reply.finish_reason, model=model)
            if reply.usage and (body.get("stream_options") or {}).get("include_usage"):
                usage = {"prompt_tokens": 10, "completion_tokens": len(text.split()), "total_tokens": 0}
                usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
                final = {"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": model, "choices": []}
                yield f"data: {json.dumps(final | {'usage': usage})}\n\n"
            yield "data: [DONE]\n\n"

        return StreamingResponse(stream(), media_type="text/event-stream")

    return app


class FakeOpenAIServer(ThreadedServer):
    """The fake OpenAI server in a thread; `base_url` is `http://127.0.0.1:<port>/v1`, `state` its script; `port`
    pins the port (to restart a server where clients expect it)."""

    def __init__(self, port: int | None = None) -> None:
        self.state = FakeState()
        super().__init__(build_app(self.state), port)
        self.base_url = f"{self.url}/v1"

    def __enter__(self) -> FakeOpenAIServer:
        super().__enter__()
        return self

    def reset(self, *script: Reply) -> list[dict[str, Any]]:
        """Replace the script, clear the recorded requests, return the (live) request list."""
        self.state.script[:] = list(script)
        self.state.requests.clear()
        return self.state.requests
