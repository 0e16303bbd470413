"""The answering agent (pydantic-ai): its dependencies, its tools and the two retrieval policies; `agent.answer` runs
one answer with it.

- `always`: retrieval runs with the user's question before the model writes; the model answers from the numbered
  passages in its prompt and gets no tools (for weak models such as the local SmolLM2-135M).
- `agentic`: the model calls `search_documents` (and `get_document`) itself, possibly several times with its own
  queries (for Llama-3.1-8B-class models).

The agent depends on one narrow interface, `tools.retrieval.PassageSearch` (search, read a document), injected in
`RagDeps`: `Retriever` in the service, `tools.in_memory.InMemoryCollection` in tests. Both policies retrieve
through the same code (`search_passages`). Passages are numbered once per run: a chunk found again by a later search
keeps its number. Only those chunks can be cited (`agent.citations`). When no retrieved chunk reaches
`refusal_min_score` (dense cosine similarity, which the search returns for every passage in every retrieval mode),
the answer is the fixed refusal `agent.prompts.REFUSAL` without citations.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic_ai import Agent, RunContext
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.exceptions import ModelRetry
from pydantic_ai.messages import ModelResponse, ToolCallPart
from pydantic_ai.models import Model
from pydantic_ai.settings import ModelSettings

from agent.context_window import ContextFitter
from agent.events import AgentEvent, ToolCall, ToolResult
from agent.prompts import AGENTIC_SYSTEM_PROMPT, SYSTEM_PROMPT, format_passages
from agent.settings import Policy
from tools.retrieval import Passage, PassageSearch
from tools.scope import SearchScope, collection_of
from tools.timing import StageTimings

MAX_TOOL_TOP_K = 10
"""Most passages one `search_documents` call returns (keeps tool results within a small model's context)."""
MAX_DOCUMENT_CHARS = 4000
"""`get_document` returns at most this many characters of a document."""


@dataclass
class RunState:
    """What one answer has retrieved so far: passages renumbered in first-seen order, queries, and the answer's
    stage timings (retrieval stages summed over its searches)."""

    by_chunk: dict[str, Passage] = field(default_factory=dict)
    queries: list[str] = field(default_factory=list)
    timings: StageTimings = field(default_factory=StageTimings)

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
        on_event: receives `agent.events` events while the answer runs (tool activity, text deltas).
        context: fits the `always` policy's passages to the LLM's context window; None sends them all.
        scope: the documents this run may see (collections, filters); None: every document.
        state: filled during the run; `answer` gives each run a fresh one.
    """

    search: PassageSearch
    top_k: int
    refusal_min_score: float = -1.0
    on_event: Callable[[AgentEvent], None] | None = None
    context: ContextFitter | None = None
    scope: SearchScope | None = None
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
        tools.embedder.EmbedderError / tools.store.StoreError: retrieval failed.
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
    passages = await search_passages(ctx.deps, query.strip(), max(1, min(int(top_k), MAX_TOOL_TOP_K)))
    if not ctx.deps.is_relevant(passages):
        return (
            "No passage is relevant to this query. Search again with other words, or answer that the documents "
            "do not cover the question."
        )
    return format_passages(passages, show_doc_ids=True)


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
    body = text if len(text) <= MAX_DOCUMENT_CHARS else text[:MAX_DOCUMENT_CHARS] + " ..."
    whole = Passage(chunk_id=f"{doc_id}#all", doc_id=doc_id, title=title, text=body, source="", score=0.0, number=0)
    return format_passages([whole], max_chars=MAX_DOCUMENT_CHARS)


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
