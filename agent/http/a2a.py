"""The A2A (Agent2Agent protocol 1.0, JSON-RPC binding) endpoint of `rag serve` at `/a2a`, with its agent card at
`/a2a/.well-known/agent-card.json` (and `/.well-known/agent-card.json`, where the specification looks first).

Served by `fasta2a` (`FastA2A`'s task manager, which reads both the 1.0 method names, e.g. `SendMessage`,
`SendStreamingMessage`, `GetTask`, `CancelTask`, and the older `message/send` ones); its tasks are answered by
`agent.http.a2a_tasks` through `RagApp.ask`. One skill, `answer`: a question over the caller's documents answered
with cited sources.

The app's guards come first, as for every route: `Host`, other sites' pages, `MAX_BODY_BYTES`, and the bearer key
(`Authorization: Bearer <API_KEY or an API key's token>`; 401 `unauthorized` without it once a key exists). The agent
card is discovery: readable without a key (`agent.http.guards.OPEN_PATHS`); it names the scheme (HTTP bearer). Then
`A2aGate` finds the request's caller (`agent.http.deps.request_caller`) and serves the request as that caller
(`agent.http.a2a_tasks.REQUEST_CALLER`): a key holder's tasks search only its collections, are held to its quotas
and are its own (another key's task is not found). Admission control and quotas refuse a task, not the HTTP request
(a `GetTask` is never refused for load): the task ends `rejected` with a retryable error message the client shows.
`/a2a` is neither one of `agent.http.admission_gate.ANSWER_PATHS` nor metered by `agent.http.quota_gate`.

A `SendMessage` answers when its task has ended (the answer in its artifact), a `SendStreamingMessage` streams the
task's states and its artifact; neither needs session affinity between replicas. Tasks are kept in the memory of the
process that made them, for `GetTask` (at the same replica) and `CancelTask`. A task still running when `rag
serve`'s shutdown drain ends the request that started it (`/a2a` is one of the drain's `self_ending` paths) stops
(the LLM with it) and ends `failed` with the retryable `shutting_down`, which the client receives.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib import metadata
from json import JSONDecodeError
from typing import Any

from fasta2a import FastA2A
from fasta2a.schema import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentProvider,
    HttpSecurityScheme,
    SecurityRequirement,
    SecurityScheme,
    Skill,
    agent_card_ta,
)
from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from agent.http.a2a_tasks import (
    REQUEST_CALLER,
    AnswerBroker,
    CallerTasks,
    Opened,
    TaskAnswers,
    TaskCaller,
    WaitingTaskManager,
)
from agent.http.deps import caller_or_refused
from agent.http.guards import HOLDER_STATE
from agent.http.shutdown import cut_of

A2A_PATH = "/a2a"
"""Where `rag serve` answers A2A JSON-RPC requests (`POST`)."""

CARD_PATHS = ("/.well-known/agent-card.json", f"{A2A_PATH}/.well-known/agent-card.json")
"""Where the agent card is served (without a key): the host's well-known path and the one under `/a2a`, which
`a2a-sdk`'s client reads for the base URL `<server>/a2a`."""

NAME = "triton-rag"
DESCRIPTION = (
    "Answers questions over the caller's own documents (the files they ingested: papers, manuals, notes) with cited "
    "sources, or says that the documents do not cover the question."
)
MEDIA_TYPES = ["text/plain", "application/json"]

ANSWER_SKILL = Skill(
    id="answer",
    name="Answer a question with citations",
    description=(
        'Send the question as a text part. Optional: a data part {"collection": name, "filter": {...}, '
        '"top_k": 1-100} narrows the search (filter keys: source, ingested_after, ingested_before, or a metadata '
        "key). The task's artifact `answer` holds the answer with its sources as text, and as data: answer, "
        "citations (passage, doc_id, title, location), refused, truncated and support (each sentence's label). A "
        "busy service or a key over its quota rejects the task with a retryable error."
    ),
    tags=["rag", "question-answering", "citations", "documents"],
    examples=["What does vitamin B12 deficiency cause?"],
    input_modes=MEDIA_TYPES,
    output_modes=MEDIA_TYPES,
)

BEARER = SecurityScheme(
    http_auth_security_scheme=HttpSecurityScheme(
        scheme="bearer",
        description="`Authorization: Bearer <key>`: the server's API_KEY, or an API key's token (rag_...) scoped to "
        "its collections. Not needed by a server without keys.",
    )
)


def agent_card(url: str, version: str) -> AgentCard:
    """The agent card of the endpoint answering at `url` (absolute URL of `/a2a`)."""
    return AgentCard(
        name=NAME,
        description=DESCRIPTION,
        version=version,
        provider=AgentProvider(organization=NAME, url=url.removesuffix(A2A_PATH)),
        supported_interfaces=[AgentInterface(protocol_binding="JSONRPC", url=url, protocol_version="1.0")],
        capabilities=AgentCapabilities(streaming=True, push_notifications=False),
        security_schemes={"bearer": BEARER},
        security_requirements=[SecurityRequirement(schemes={"bearer": []})],
        default_input_modes=MEDIA_TYPES,
        default_output_modes=MEDIA_TYPES,
        skills=[ANSWER_SKILL],
    )


PARSE_ERROR = (-32700, "Invalid JSON payload")
INVALID_REQUEST = (-32600, "Request payload validation error")
METHOD_NOT_FOUND = (-32601, "Method not found")


def jsonrpc_error_of(exc: Exception) -> tuple[int, str, str]:
    """The JSON-RPC error code, message and detail of a request `fasta2a` could not read: not JSON (-32700), a
    method it does not serve (-32601), or not an A2A request (-32600)."""
    if isinstance(exc, ValidationError) and exc.errors():
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"] if not str(p).startswith("tagged-union"))
        detail = f"{where}: {first['msg']}" if where else first["msg"]
        if first["type"] == "json_invalid":
            return *PARSE_ERROR, detail
        if first["type"] == "union_tag_invalid":
            return *METHOD_NOT_FOUND, detail
        return *INVALID_REQUEST, detail
    if isinstance(exc, NotImplementedError):
        return *METHOD_NOT_FOUND, str(exc)
    return *PARSE_ERROR, str(exc)


async def jsonrpc_error(request: Request, exc: Exception) -> Response:
    """The JSON-RPC error answer (HTTP 200, `id` null) of a request `fasta2a` could not read (`jsonrpc_error_of`),
    instead of its bare 500."""
    code, message, detail = jsonrpc_error_of(exc)
    error = {"code": code, "message": message, "data": {"detail": detail}}
    return JSONResponse({"jsonrpc": "2.0", "id": None, "error": error})


def served_version() -> str:
    """The installed `triton-rag` package's version; `0.0.0` when it is not installed (run from a checkout)."""
    try:
        return metadata.version("triton-rag")
    except metadata.PackageNotFoundError:
        return "0.0.0"


class A2aGate:
    """ASGI wrapper of the `FastA2A` app (its route takes only `POST`: any other method is 405): finds the
    request's caller (401 `unauthorized` with `WWW-Authenticate: Bearer` for a wrong or revoked token, 503 when the
    keys cannot be read) and serves the request as that caller (`REQUEST_CALLER`), at the A2A app's root."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve the request as its caller, or refuse it before its body is read."""
        identity = await caller_or_refused(scope, receive, send)
        if identity is None:
            return
        key = scope.get("state", {}).get(HOLDER_STATE)
        token = REQUEST_CALLER.set(TaskCaller(identity, key, cut_of(scope)))
        try:
            await self.app({**scope, "path": "/", "raw_path": b"/", "root_path": ""}, receive, send)
        finally:
            REQUEST_CALLER.reset(token)


class A2aEndpoint:
    """The A2A server of one HTTP app: its routes and its task manager's lifetime.

    Args:
        opened: the app's opened `RagApp` and its quotas (read when a task starts).
        version: the version the agent card states; default: the installed `triton-rag`'s.
    """

    def __init__(self, opened: Opened, version: str | None = None) -> None:
        self.version = version or served_version()
        self.storage = CallerTasks()
        self.broker = AnswerBroker(storage=self.storage)
        self.broker.runner = TaskAnswers(opened, self.broker, self.storage).run
        self.server = FastA2A(
            storage=self.storage,
            broker=self.broker,
            name=NAME,
            docs_url=None,
            exception_handlers={
                JSONDecodeError: jsonrpc_error,
                ValidationError: jsonrpc_error,
                NotImplementedError: jsonrpc_error,
            },
        )
        self.server.task_manager = WaitingTaskManager(broker=self.broker, storage=self.storage)
        endpoint = A2aGate(self.server)
        self.routes: list[BaseRoute] = [
            *(Route(path, self.card, methods=["GET", "HEAD"]) for path in CARD_PATHS),
            Route(A2A_PATH, endpoint=endpoint, methods=["POST"]),
        ]

    async def card(self, request: Request) -> Response:
        """The agent card, naming this server's `/a2a` as the request reached it."""
        url = str(request.base_url).rstrip("/") + A2A_PATH
        return Response(
            agent_card_ta.dump_json(agent_card(url, self.version), by_alias=True), media_type="application/json"
        )

    @asynccontextmanager
    async def running(self) -> AsyncIterator[Any]:
        """Run the task manager (its broker's task group) while the block runs; tasks still running at its end end
        `failed` (`shutting_down`)."""
        async with self.server.task_manager:
            yield
