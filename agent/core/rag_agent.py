"""The answering agent (pydantic-ai): its dependencies, its tools and the two retrieval policies; `agent.core.answer`
runs one answer with it.

- `always`: retrieval runs with the user's question before the model writes; the model answers from the numbered
  passages in its prompt and gets no tools (for weak models such as the local SmolLM2-135M).
- `agentic`: the model calls `search_documents` (and `get_document`) itself, possibly several times with its own
  queries (for Llama-3.1-8B-class models).

The agent depends on one narrow interface, `tools.retrieval.PassageSearch` (search, read a document), injected in
`RagDeps`: `Retriever` in the service, `tools.in_memory.InMemoryCollection` in tests. Both policies retrieve
through the same code (`search_passages`). Passages are numbered once per run: a chunk found again by a later search
keeps its number. Only those chunks can be cited (`agent.core.citations`). When no retrieved chunk reaches
`refusal_min_score` (dense cosine similarity, which the search returns for every passage in every retrieval mode),
the answer is the fixed refusal `agent.core.prompts.REFUSAL` without citations.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic_ai import Agent, RunContext, Tool
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.exceptions import ModelRetry
from pydantic_ai.messages import ModelResponse, ToolCallPart, ToolReturnPart
from pydantic_ai.models import Model
from pydantic_ai.settings import ModelSettings

from agent.config.settings import Policy
from agent.core.context_window import TOKENS_PER_MESSAGE, ContextFitter, message_texts
from agent.core.errors import InputError
from agent.core.events import AgentEvent, ToolCall, ToolResult
from agent.core.followup import QueryRewriter
from agent.core.prompts import AGENTIC_SYSTEM_PROMPT, SYSTEM_PROMPT, format_passages
from agent.core.support import SupportChecker
from tools.retrieval import Passage, PassageSearch
from tools.scope import SearchScope, collection_of
from tools.timing import StageTimings

MAX_TOOL_TOP_K = 10
"""Most passages one `search_documents` call returns (keeps tool results within a small model's context)."""
MAX_DOCUMENT_CHARS = 4000
"""`get_document` returns at most this many characters of a document (fewer when the context window is fuller)."""


@dataclass
class RunState:
    """What one answer has retrieved so far: passages renumbered in first-seen order, queries, the answer's stage
    timings (retrieval stages summed over its searches), passages dropped to fit the context window, and the tokens
    of tool results handed out but not yet in the conversation (parallel tool calls of one model response)."""

    by_chunk: dict[str, Passage] = field(default_factory=dict)
    queries: list[str] = field(default_factory=list)
    timings: StageTimings = field(default_factory=StageTimings)
    dropped: dict[str, None] = field(default_factory=dict)
    granted: dict[str, int] = field(default_factory=dict)
    fitting: asyncio.Lock = field(default_factory=asyncio.Lock)

    @property
    def left_out(self) -> list[str]:
        """Chunk ids of passages dropped to fit the context window and never shown to the model, in drop order."""
        return [chunk_id for chunk_id in self.dropped if chunk_id not in self.by_chunk]

    def forget(self, dropped: Sequence[Passage], new: set[str]) -> None:
        """Passages dropped to fit the context window: those first found by the search that dropped them lose their
        number (the highest ones: numbers stay contiguous) and can never be cited."""
        for p in dropped:
            self.dropped[p.chunk_id] = None
            if p.chunk_id in new:
                self.by_chunk.pop(p.chunk_id, None)

    @property
    def passages(self) -> list[Passage]:
        """Every passage retrieved in this run, by number."""
        return sorted(self.by_chunk.values(), key=lambda p: p.number)

    def register(self, found: list[Passage]) -> list[Passage]:
        """Give `found` run-wide numbers (a chunk seen before keeps its number) and remember them."""
        out = []
        for p in found:
            if p.chunk_id not in self.by_chunk:
                self.by_chunk[p.chunk_id] = replace(p, number=len(self.by_chunk) + 1)
            out.append(self.by_chunk[p.chunk_id])
        return out

    def best_dense_score(self) -> float | None:
        """Highest dense cosine similarity among the retrieved passages (None when none has one)."""
        scores = [p.dense_score for p in self.by_chunk.values() if p.dense_score is not None]
        return max(scores) if scores else None


@dataclass
class RagDeps:
    """What one run needs: the search, the default number of passages, the refusal threshold.

    Attributes:
        search: the retrieval the tools use (`tools.retrieval.PassageSearch`).
        top_k: passages retrieved up front (`always`) when the request names none.
        refusal_min_score: dense cosine similarity (−1..1) the best retrieved chunk must reach for an answer;
            below it the agent refuses. `-1.0` turns refusal off.
        on_event: receives `agent.core.events` events while the answer runs (tool activity, text deltas).
        context: fits the `always` policy's passages to the LLM's context window; None sends them all.
        scope: the documents this run may see (collections, filters); None: every document.
        rewriter: rewrites a follow-up as a standalone search query (`FOLLOWUP_QUERY=rewrite`,
            `agent.core.followup`); None: follow-ups are searched with the condensed query.
        support: labels each sentence of the answer against the passages (`SUPPORT_CHECK`,
            `agent.core.support`); None: no check.
        state: filled during the run; `answer` gives each run a fresh one.
    """

    search: PassageSearch
    top_k: int
    refusal_min_score: float = -1.0
    on_event: Callable[[AgentEvent], None] | None = None
    context: ContextFitter | None = None
    scope: SearchScope | None = None
    rewriter: QueryRewriter | None = None
    support: SupportChecker | None = None
    state: RunState = field(default_factory=RunState, init=False)

    def emit(self, event: AgentEvent) -> None:
        """Pass `event` to `on_event` if set."""
        if self.on_event is not None:
            self.on_event(event)

    def is_relevant(self, passages: Sequence[Passage]) -> bool:
        """True when some passage's dense cosine similarity reaches `refusal_min_score` (`-1.0` or below: always,
        whatever the passages' scores)."""
        if self.refusal_min_score <= -1.0:
            return True
        scores = [p.dense_score for p in passages if p.dense_score is not None]
        return bool(scores) and max(scores) >= self.refusal_min_score


async def search_passages(deps: RagDeps, query: str, top_k: int) -> list[Passage]:
    """The retrieval both policies use: search for `query` (the search's mode), passages numbered run-wide, each
    with its dense cosine similarity, timings added to the run's.

    Raises:
        tools.errors.EmbedderError / tools.errors.StoreError: retrieval failed.
    """
    deps.emit(ToolCall(tool="search_documents", args={"query": query, "top_k": top_k}))
    result = await deps.search.search(query, top_k, deps.scope)
    deps.state.timings.add(result.timings_ms)
    deps.state.queries.append(query)
    passages = deps.state.register(result.passages)
    numbers = ", ".join(f"[{p.number}]" for p in passages) or "none"
    best = max((p.dense_score for p in passages if p.dense_score is not None), default=None)
    best_text = f"best similarity {best:.2f}" if best is not None else "no dense match"
    deps.emit(ToolResult(tool="search_documents", summary=f"{len(passages)} passages {numbers}, {best_text}"))
    return passages


NO_ROOM = (
    "The context window is full: no more passages can be shown. Answer now from the passages you already have, or "
    "say that they do not cover the question."
)
"""The tool result when not even an empty result fits the context window any more."""


def _tools_text() -> str:
    """The tool definitions as the LLM receives them (name, description, JSON schema), for counting their tokens."""
    defs = [Tool(tool).tool_def for tool in (search_documents, get_document)]
    shown = [{"name": d.name, "description": d.description, "parameters": d.parameters_json_schema} for d in defs]
    return json.dumps(shown)


async def _fitted_result(ctx: RunContext[RagDeps], fit: Callable[[list[str], int], Awaitable[str]]) -> str:
    """Run `fit(fixed texts, reserved tokens)` against the conversation as it stands (the agentic instructions,
    the tool definitions, every message so far, and results granted to parallel calls not yet in it) and
    remember the tokens of the result it returns for this tool call."""
    state = ctx.deps.state
    async with state.fitting:
        returned = {p.tool_call_id for m in ctx.messages for p in m.parts if isinstance(p, ToolReturnPart)}
        for call_id in returned & set(state.granted):
            del state.granted[call_id]
        fixed = [AGENTIC_SYSTEM_PROMPT, TOOLS_TEXT, *message_texts(ctx.messages)]
        reserved = sum(state.granted.values()) + TOKENS_PER_MESSAGE * len(state.granted)
        result = await fit(fixed, reserved)
        if ctx.deps.context is not None and ctx.tool_call_id:
            state.granted[ctx.tool_call_id] = ctx.deps.context.count(result)
        return result


async def search_documents(ctx: RunContext[RagDeps], query: str, top_k: int = 5) -> str:
    """Search the document collection and return the passages most relevant to `query`, numbered.

    Cite a passage in your answer with its number in square brackets, e.g. [2]. If the passages do not answer
    the question, search again with other words, or say that the documents do not cover it.

    Args:
        query: what to look for, in plain words: the question itself or its key terms.
        top_k: how many passages to return, from 1 to 10.
    """
    if not query.strip():
        raise ModelRetry("query is empty: pass the words to search for, e.g. the user's question")
    known = set(ctx.deps.state.by_chunk)
    passages = await search_passages(ctx.deps, query.strip(), max(1, min(int(top_k), MAX_TOOL_TOP_K)))
    if not ctx.deps.is_relevant(passages):
        return (
            "No passage is relevant to this query. Search again with other words, or answer that the documents "
            "do not cover the question."
        )
    context = ctx.deps.context
    if context is None:
        return format_passages(passages, show_doc_ids=True)

    def render(kept: list[Passage]) -> str:
        return format_passages(kept, show_doc_ids=True)

    async def fit(fixed: list[str], reserved: int) -> str:
        try:
            fitted = await context.fit(passages, render, fixed, reserved)
        except InputError:  # not even an empty result fits
            ctx.deps.state.forget(passages, {p.chunk_id for p in passages} - known)
            return NO_ROOM
        ctx.deps.state.forget(fitted.dropped, {p.chunk_id for p in passages} - known)
        return render(fitted.kept) if fitted.kept else NO_ROOM

    return await _fitted_result(ctx, fit)


def shown_in(deps: RagDeps, doc_id: str) -> SearchScope | None:
    """The run's scope narrowed to the collection of the first search result of `doc_id`: a key that sees two
    collections may hold the same doc id in both, and the model reads the document its search showed."""
    for passage in deps.state.by_chunk.values():
        if passage.doc_id == doc_id and (collection := collection_of(passage.chunk_id, doc_id)) is not None:
            return replace(deps.scope or SearchScope(), collections=(collection,))
    return deps.scope


async def get_document(ctx: RunContext[RagDeps], doc_id: str) -> str:
    """Return the full text of a document that a search result showed, to read more than its passage.

    Args:
        doc_id: the document id shown as `(doc <id>)` in a search result, e.g. `4983`.
    """
    doc_id = doc_id.strip()
    known = {p.doc_id for p in ctx.deps.state.by_chunk.values()}
    if doc_id not in known:
        shown = ", ".join(sorted(known)) or "none yet: call search_documents first"
        raise ModelRetry(f"doc_id {doc_id!r} was not in your search results; ids you can read: {shown}")
    ctx.deps.emit(ToolCall(tool="get_document", args={"doc_id": doc_id}))
    found = await ctx.deps.search.get_document(doc_id, shown_in(ctx.deps, doc_id))
    if found is None:  # deleted since it was retrieved
        raise ModelRetry(f"document {doc_id} is no longer stored")
    title, text = found
    ctx.deps.emit(ToolResult(tool="get_document", summary=f"doc {doc_id}: {len(text)} characters"))
    text = text[:MAX_DOCUMENT_CHARS]

    def render(shown: str) -> str:
        body = shown if len(shown) == len(found[1]) else shown + " ..."
        whole = Passage(chunk_id=f"{doc_id}#all", doc_id=doc_id, title=title, text=body, source="", score=0.0, number=0)
        return format_passages([whole], max_chars=MAX_DOCUMENT_CHARS + 4)

    context = ctx.deps.context
    if context is None:
        return render(text)

    async def fit(fixed: list[str], reserved: int) -> str:
        shown = await context.fit_text(text, render, fixed, reserved)
        return NO_ROOM if shown is None else render(shown)

    return await _fitted_result(ctx, fit)


TOOLS_TEXT = _tools_text()
"""The `agentic` policy's tool definitions as text (their tokens count against the context window)."""


class UniqueToolCallIds(AbstractCapability[Any]):
    """Gives every tool call of a model response its own id.

    Tool results are matched to calls by `tool_call_id`; some servers send parallel calls that share one id (or
    repeat an id from the same response), which pydantic-ai rejects as an ambiguous batch. Like pydantic-ai's own
    guard for empty ids, each repeated id is replaced by a fresh `call_<uuid4 hex>` before the calls run.
    """

    async def after_model_request(
        self, ctx: RunContext[Any], *, request_context: Any, response: ModelResponse
    ) -> ModelResponse:
        """`response` with repeated tool-call ids replaced (parts otherwise unchanged, in order)."""
        seen: set[str] = set()
        parts = []
        for part in response.parts:
            if isinstance(part, ToolCallPart):
                if not part.tool_call_id or part.tool_call_id in seen:
                    part = replace(part, tool_call_id=f"call_{uuid.uuid4().hex}")
                seen.add(part.tool_call_id)
            parts.append(part)
        return replace(response, parts=parts)


def build_agent(model: Model, settings: ModelSettings, policy: Policy = "always") -> Agent[RagDeps, str]:
    """The pydantic-ai agent: plain-text output; tools (`search_documents`, `get_document`) only for `agentic`.

    Output is plain text, never `response_format` or an output tool, so servers that drop `response_format` or
    mishandle `tool_choice="required"` (Triton's OpenAI frontend) behave like vLLM. Repeated tool-call ids are
    re-issued (`UniqueToolCallIds`).
    """
    if policy == "always":
        return Agent(model, deps_type=RagDeps, output_type=str, instructions=SYSTEM_PROMPT, model_settings=settings)
    agent = Agent(
        model,
        deps_type=RagDeps,
        output_type=str,
        instructions=AGENTIC_SYSTEM_PROMPT,
        model_settings=settings,
        tools=[search_documents, get_document],
        retries={"tools": 1, "output": 1},
        capabilities=[UniqueToolCallIds()],
    )

    @agent.output_validator
    def searched_first(ctx: RunContext[RagDeps], output: str) -> str:
        # An answer written before any search is sent back once; after that, `answer` refuses it.
        if not ctx.deps.state.queries and not ctx.last_attempt:
            raise ModelRetry("You have not searched yet. Call search_documents before answering.")
        return output

    return agent
