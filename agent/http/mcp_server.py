"""The MCP server: the product's retrieval and answers as tools for any Model Context Protocol host or agent.

Built on the official `mcp` SDK (2.x, `mcp.server.mcpserver.MCPServer`). Tools (`build_mcp_server`):

- `search`: numbered passages (doc id, title, chunk text, score, source) for a query, without the LLM;
- `get_document`: a stored document's title and full text;
- `ask`: an answer written by the LLM from retrieved passages, with `[n]` markers and its citations.

Arguments as models write them are read leniently: a number sent as a string (`"5"`), a `filter` sent as a JSON
string, and an empty string or `{}` for an optional argument not given; what still is not the declared type is a
tool error naming the argument.

Every result carries structured content (the tool's output schema: `SearchOutput`, `DocumentOutput`,
`AnswerOutput`) and the same facts as readable text. Bad arguments (schema violations, a blank query, an invalid
filter or collection, an unknown doc id), admission control's refusal, LLM, embedder and store failures come back as
tool errors (`is_error`) whose text names the argument or says what failed (`agent.core.failures.describe`); anything
else is a bug, reported by the SDK as `Error executing tool <name>` with the traceback on stderr. A call that the
server's shutdown ends (`Stopping`: the drain of `rag serve`) stops its work and is the retryable tool error
`shutting_down: ...`.

Transports: stdio (`serve_stdio`, the `rag mcp` command) and streamable HTTP at `/mcp` of `rag serve`
(`agent.http.mcp`), where the tools use the app's own `RagApp`.

Callers: each tool call's scope (its `filter` and `collection`) goes through the server's `Narrow`, given the
transport's request of the call (the SDK's `Context`): over HTTP it narrows the scope to the collections of the API
key that sent the HTTP request (a collection outside the key is a tool error naming it); over stdio there is none and
every collection is searched, as with the CLI (a local process of the machine's user, like the admin key).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Annotated, Any, TypeVar

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, BeforeValidator, Field

from agent.config.settings import Settings
from agent.core.answer import AnswerRequest
from agent.core.app import RagApp
from agent.core.failures import describe
from agent.core.results import AskResult, Citation, SupportReport
from agent.http.admission_gate import tenant_of
from agent.http.shutdown import CUT_DETAIL
from tools.retrieval import RetrievalResult
from tools.scope import ScopeError, SearchScope

T = TypeVar("T")

SERVER_NAME = "triton-rag"
"""The name the server gives MCP hosts."""

INSTRUCTIONS = (
    "Searches and answers questions over the user's own document collection (files they ingested: papers, "
    "manuals, notes). Use `search` to find relevant passages and read them yourself, `get_document` to read a whole "
    "document a passage came from, and `ask` to get a finished answer with numbered citations written by the "
    "service's own model. Cite passages by their doc_id."
)
"""What the server tells a host's model about itself (MCP `instructions`)."""

RagSource = Callable[[], RagApp]
"""Gives the opened `RagApp` the tools use, when a tool is called."""

Narrow = Callable[[SearchScope, Any], SearchScope]
"""Narrows the scope a tool call asks for to the caller that sent it: (the scope of the call's `filter` and
`collection`, the transport's request of the call: the Starlette `Request` over streamable HTTP, None over stdio) ->
the scope to search. Raises `ToolError` naming a collection the caller may not use."""


def blank_is_none(value: Any) -> Any:
    """An optional argument's value with `""` (and whitespace) read as not given: models that fill every optional
    argument send an empty string for "none"."""
    return None if isinstance(value, str) and not value.strip() else value


def json_object(value: Any) -> Any:
    """A `filter` argument: a JSON object, also when sent as a JSON string (hosts that pass a model's text on
    unparsed); a blank string or `{}` is no filter. Anything else is left for validation to refuse."""
    value = blank_is_none(value)
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return value
    return value or None


Blank = BeforeValidator(blank_is_none)
JsonObject = BeforeValidator(json_object)


def unnarrowed(scope: SearchScope, request: Any) -> SearchScope:
    """The `Narrow` of a server without callers (stdio): the scope as asked, over every collection."""
    return scope


Meter = Callable[[Any], AbstractAsyncContextManager[None]]
"""Holds an `ask` call to its caller's quotas: (the transport's request of the call) -> a context manager entered
around the answer, which raises `ToolError` (`quota_exceeded: ...`) for a caller over its quota and records the
answer's usage when it ends. Protocol messages (`initialize`, notifications, `tools/list`) never reach it."""


@asynccontextmanager
async def unmetered(request: Any) -> AsyncIterator[None]:
    """The `Meter` of a server without callers (stdio): no quota."""
    yield


Stopping = Callable[[Any], asyncio.Event | None]
"""The event that says the server is ending a tool call: (the transport's request of the call) -> an event set when
the shutdown drain ends it (`agent.http.shutdown`), or None where nothing ends calls (stdio). The tool then stops its
work and answers `SHUTTING_DOWN` as a tool error."""

SHUTTING_DOWN = f"shutting_down: {CUT_DETAIL} (retryable)"
"""The tool error text of a call the server's shutdown ended: a retryable failure, in `failure_text`'s form."""


def never_stopping(request: Any) -> asyncio.Event | None:
    """The `Stopping` of a server whose calls nothing ends (stdio): the host ends the process itself."""
    return None


async def until_stopped(work: Awaitable[T], stop: asyncio.Event | None) -> T:
    """What `work` returns, unless `stop` is set first: then `work` is cancelled (an answer's LLM call stops).

    Raises:
        ToolError: `SHUTTING_DOWN` when `stop` was set before `work` finished.
    """
    if stop is None:
        return await work
    task = asyncio.ensure_future(work)
    stopped = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
        if not task.done():
            task.cancel()
            await asyncio.wait({task})  # its cancellation is over (a cancellation of this call goes on)
    if task.cancelled():
        raise ToolError(SHUTTING_DOWN)
    return task.result()


QUERY_FIELD = Field(
    min_length=1,
    max_length=4000,
    description="What to look for, in natural language or keywords, e.g. `vitamin D and bone density`.",
)
TopK = Annotated[int, Field(ge=1, le=100)]
"""Passages to retrieve, 1-100."""
TOP_K_FIELD = Field(
    description="How many passages to retrieve, 1-100; omit for the service's default (TOP_K, usually 5).",
)
FILTER_FIELD = Field(
    description="Optional: only documents matching every key. `source`: the file the document came from (a string "
    "or a list of strings); `ingested_after` / `ingested_before`: ISO 8601 dates or timestamps; any other key: the "
    'document\'s metadata value under that key (a list means any of these values). Example: {"team": "bio", '
    '"ingested_after": "2026-01-01"}.',
)
COLLECTION_FIELD = Field(
    description="Optional: search only this collection (a named set of documents, e.g. `handbook`); omit to "
    "search every collection you may see.",
)


class PassageOutput(BaseModel):
    """One retrieved passage (a chunk of a document)."""

    number: int = Field(description="Passage number from 1, best first.")
    doc_id: str = Field(description="Id of the document the passage is from (for `get_document`).")
    chunk_id: str = Field(description="`<doc_id>#<chunk index>`.")
    title: str = Field(description="Document title.")
    text: str = Field(description="The chunk's text.")
    score: float = Field(description="Ranking score (hybrid retrieval: reciprocal rank fusion); higher is better.")
    source: str = Field(description="Where the document was ingested from (file path or URL), may be empty.")


class SearchOutput(BaseModel):
    """The structured result of `search`."""

    query: str
    passages: list[PassageOutput]


class DocumentOutput(BaseModel):
    """The structured result of `get_document`."""

    doc_id: str
    title: str
    text: str


class AnswerOutput(BaseModel):
    """The structured result of `ask`."""

    answer: str = Field(description="The answer; `[n]` markers refer to `citations[].passage`.")
    citations: list[Citation]
    refused: bool = Field(description="True when the documents do not cover the question (no citations then).")
    truncated: bool = Field(description="True when the answer was cut at the model's output limit.")
    support: SupportReport | None = Field(
        default=None,
        description="Each sentence of `answer` with its label (SUPPORT, CONTRADICT, NOT_ENOUGH_INFO) and the passage "
        "sentence it rests on (sentence-level citations); null when the service's support check is off.",
    )


def scope_of(filter_spec: Mapping[str, Any] | None, collection: str | None) -> SearchScope:
    """The search scope of a tool call's `filter` and `collection` arguments.

    Raises:
        ToolError: an invalid filter or collection; the message names the argument.
    """
    try:
        collections = [collection] if collection else None
        return SearchScope.from_filter(filter_spec, collections)
    except ScopeError as exc:
        raise ToolError(str(exc)) from None


def failure_text(exc: Exception) -> str | None:
    """The tool error text of a product failure (`agent.core.failures.describe`: `kind: message`), None for a bug."""
    failure = describe(exc)
    if failure is None:
        return None
    text = failure.message if failure.message.startswith(failure.kind) else f"{failure.kind}: {failure.message}"
    return text + (" (retryable)" if failure.retryable else "")


@asynccontextmanager
async def tool_errors() -> AsyncIterator[None]:
    """Turn the product's failures inside the block into `ToolError` (its `failure_text`); bugs pass through."""
    try:
        yield
    except ToolError:
        raise
    except Exception as exc:
        text = failure_text(exc)
        if text is None:
            raise
        raise ToolError(text) from exc


def result(text: str, structured: BaseModel) -> CallToolResult:
    """A tool result: `text` for people and models, `structured` as the structured content."""
    return CallToolResult(
        content=[TextContent(type="text", text=text)], structured_content=structured.model_dump(mode="json")
    )


def search_output(found: RetrievalResult) -> SearchOutput:
    """The `search` output of a retrieval result."""
    passages = [
        PassageOutput(
            number=p.number,
            doc_id=p.doc_id,
            chunk_id=p.chunk_id,
            title=p.title,
            text=p.text,
            score=round(p.score, 6),
            source=p.source,
        )
        for p in found.passages
    ]
    return SearchOutput(query=found.query, passages=passages)


def search_text(output: SearchOutput) -> str:
    """Readable passages: `[n] title (doc_id ..., score ..., source ...)` then the chunk text, one block each."""
    if not output.passages:
        return f"No passages found for {output.query!r}."
    blocks = []
    for p in output.passages:
        source = f", source {p.source}" if p.source else ""
        blocks.append(f"[{p.number}] {p.title or p.doc_id} (doc_id {p.doc_id}, score {p.score:.4f}{source})\n{p.text}")
    return "\n\n".join(blocks)


def answer_output(answer: AskResult) -> AnswerOutput:
    """The `ask` output of an `AskResult`."""
    return AnswerOutput(
        answer=answer.answer,
        citations=answer.citations,
        refused=answer.refused,
        truncated=answer.truncated,
        support=answer.support,
    )


def answer_text(output: AnswerOutput) -> str:
    """The answer, the sentences the support check did not find supported (with their label), then its sources:
    `[n] title (doc_id ..., location)` per citation."""
    lines = [output.answer]
    unsupported = [] if output.support is None else [s for s in output.support.sentences if not s.supported]
    if unsupported:
        lines.append("")
        lines.append("Not supported by the documents:")
        lines += [f"- {s.label}: {s.text}" for s in unsupported]
    if output.truncated:
        lines.append("(The answer was cut at the model's output limit.)")
    if output.citations:
        lines.append("")
        lines.append("Sources:")
        for c in output.citations:
            where = f", {c.location}" if c.location else ""
            lines.append(f"[{c.passage}] {c.title or c.doc_id} (doc_id {c.doc_id}{where})")
    return "\n".join(lines)


def build_mcp_server(
    rag: RagSource,
    lifespan: Callable[[MCPServer[Any]], AbstractAsyncContextManager[Any]] | None = None,
    narrow: Narrow = unnarrowed,
    meter: Meter = unmetered,
    stopping: Stopping = never_stopping,
) -> MCPServer[Any]:
    """The MCP server with the tools `search`, `get_document` and `ask` over the `RagApp` that `rag()` returns.

    Args:
        rag: called at each tool call; returns the opened app (the HTTP app's, or the one `serve_stdio` opens).
        lifespan: the SDK's server lifespan (an async context manager factory), entered when a transport starts
            the server; None: nothing (the HTTP app opens its `RagApp` itself).
        narrow: narrows each call's scope to its caller (`Narrow`); default: every collection (stdio).
        meter: holds each `ask` call to its caller's quotas (`Meter`); default: none (stdio).
        stopping: the event that ends a call (`Stopping`: the shutdown drain over HTTP); the call is then a
            retryable tool error `SHUTTING_DOWN`. Default: nothing ends calls (stdio).
    """

    def call_scope(
        ctx: Context[Any, Any], filter_spec: Mapping[str, Any] | None, collection: str | None
    ) -> SearchScope:
        return narrow(scope_of(filter_spec, collection), ctx.request_context.request)

    server: MCPServer[Any] = MCPServer(SERVER_NAME, instructions=INSTRUCTIONS, log_level="WARNING", lifespan=lifespan)
    read_only = ToolAnnotations(read_only_hint=True, destructive_hint=False, open_world_hint=False)

    @server.tool(title="Search the documents", annotations=read_only)
    async def search(
        query: Annotated[str, QUERY_FIELD],
        top_k: Annotated[TopK | None, Blank, TOP_K_FIELD] = None,
        filter: Annotated[dict[str, Any] | None, JsonObject, FILTER_FIELD] = None,
        collection: Annotated[str | None, Blank, COLLECTION_FIELD] = None,
        *,
        ctx: Context[Any, Any],
    ) -> Annotated[CallToolResult, SearchOutput]:
        """Find passages in the user's documents that match a query, best first, without writing an answer.

        Use it to look up facts in the user's documents and read the evidence yourself (hybrid retrieval:
        semantic similarity and keywords). Returns numbered passages, each with its doc_id, document title, the
        chunk's text, a ranking score and the document's source. Use `get_document` with a doc_id to read the
        whole document; use `ask` instead when you want a finished answer with citations.
        """
        scope = call_scope(ctx, filter, collection)
        async with tool_errors():
            found = await until_stopped(rag().search(query, top_k, scope), stopping(ctx.request_context.request))
        output = search_output(found)
        return result(search_text(output), output)

    @server.tool(title="Read a document", annotations=read_only)
    async def get_document(
        doc_id: Annotated[str, Field(min_length=1, description="The document's id, as `search` or `ask` gave it.")],
        collection: Annotated[str | None, Blank, Field(description="Optional: the collection to read from.")] = None,
        *,
        ctx: Context[Any, Any],
    ) -> Annotated[CallToolResult, DocumentOutput]:
        """Read one whole stored document: its title and full text.

        Use it after `search` or `ask` when a passage is not enough context. `doc_id` is the id those tools
        returned. An id that is not stored is an error.
        """
        scope = call_scope(ctx, None, collection)
        async with tool_errors():
            found = await until_stopped(rag().get_document(doc_id, scope), stopping(ctx.request_context.request))
        if found is None:
            raise ToolError(f"doc_id {doc_id!r} is not stored; expected a doc_id returned by `search` or `ask`")
        title, text = found
        return result(f"# {title or doc_id}\n\n{text}", DocumentOutput(doc_id=doc_id, title=title, text=text))

    @server.tool(title="Answer a question with citations", annotations=read_only)
    async def ask(
        question: Annotated[str, Field(min_length=1, max_length=4000, description="The question, in full.")],
        top_k: Annotated[TopK | None, Blank, TOP_K_FIELD] = None,
        filter: Annotated[dict[str, Any] | None, JsonObject, FILTER_FIELD] = None,
        collection: Annotated[str | None, Blank, COLLECTION_FIELD] = None,
        *,
        ctx: Context[Any, Any],
    ) -> Annotated[CallToolResult, AnswerOutput]:
        """Answer a question from the user's documents, written by the service's own language model.

        Retrieves passages for the question and returns an answer whose `[n]` markers refer to the numbered
        citations listed with it (doc_id, title, where in the document). When nothing relevant is stored it says
        so (`refused`) instead of guessing. Slower than `search` (it runs a model); when the service is busy the
        call fails with an `overloaded` error saying when to retry.
        """
        scope = call_scope(ctx, filter, collection)
        request = ctx.request_context.request
        async with meter(request), tool_errors():
            # the caller's key takes its fair share of admission (`agent.core.admission`), as on /v1/ask
            ticket = rag().admission.enter(None if request is None else tenant_of(request.scope))
            try:
                asked = rag().ask(AnswerRequest(question, top_k=top_k, scope=scope), admission=ticket)
                answer = await until_stopped(asked, stopping(request))
            finally:
                ticket.close()  # (idempotent: the answer closed it, unless it was stopped before it started)
        output = answer_output(answer)
        return result(answer_text(output), output)

    return server


async def serve_stdio(settings: Settings) -> None:
    """Serve the tools over stdio (`rag mcp`) until the host closes stdin. The `RagApp` opens after the transport
    has taken stdout, so that nothing but MCP messages reaches it (logs go to stderr).

    Raises:
        The `RagApp`'s start-up errors (e.g. `agent.core.errors.LLMConfigError`, a store that cannot be reached).
    """
    app = RagApp(settings)

    @asynccontextmanager
    async def opened(_: MCPServer[Any]) -> AsyncIterator[None]:
        async with app:
            yield None

    await build_mcp_server(lambda: app, lifespan=opened).run_stdio_async()
