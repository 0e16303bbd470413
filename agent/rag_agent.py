"""The answering agent (pydantic-ai) and its two retrieval policies.

- `always`: retrieval runs with the user's question before the model writes; the model answers from the numbered
  passages in its prompt and gets no tools (for weak models such as the local SmolLM2-135M).
- `agentic`: the model calls `search_documents` (and `get_document`) itself, possibly several times with its own
  queries (for Llama-3.1-8B-class models).

Both policies retrieve through the same code (`search_passages`). Passages are numbered once per run: a chunk
found again by a later search keeps its number. Only those chunks can be cited (`agent.citations`); the streamed
text already has other markers removed. When no retrieved chunk reaches `refusal_min_score` (dense cosine
similarity), the answer is the fixed refusal `agent.prompts.REFUSAL` without citations.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from pydantic_ai import Agent, RunContext
from pydantic_ai.exceptions import (
    ModelAPIError,
    ModelConnectionError,
    ModelHTTPError,
    ModelRequestRejectedError,
    ModelRequestTimeout,
    ModelRetry,
    RunTimedOut,
    UnexpectedModelBehavior,
    UsageLimitExceeded,
)
from pydantic_ai.messages import (
    FunctionToolCallEvent,
    FunctionToolResultEvent,
    ModelMessage,
    PartDeltaEvent,
    PartStartEvent,
    TextPart,
    TextPartDelta,
)
from pydantic_ai.models import Model
from pydantic_ai.run import AgentRunResultEvent
from pydantic_ai.settings import ModelSettings
from pydantic_ai.usage import UsageLimits

from agent.citations import extract_citations, stream_text, strip_reasoning
from agent.errors import AgentError, AnswerLimitError, LLMResponseError, LLMUnavailableError
from agent.events import AgentEvent, AnswerRestart, TextDelta, ToolCall, ToolResult
from agent.prompts import AGENTIC_SYSTEM_PROMPT, REFUSAL, SYSTEM_PROMPT, format_passages, user_prompt
from agent.results import AskResult, Citation
from tools.retrieval import Passage, Retriever

Policy = Literal["always", "agentic"]
MAX_TOOL_TOP_K = 10
"""Most passages one `search_documents` call returns (keeps tool results within a small model's context)."""
MAX_DOCUMENT_CHARS = 4000
"""`get_document` returns at most this many characters of a document."""


@dataclass
class RunState:
    """What one answer has retrieved so far: passages renumbered in first-seen order, queries, retrieval time."""

    by_chunk: dict[str, Passage] = field(default_factory=dict)
    queries: list[str] = field(default_factory=list)
    timings_ms: dict[str, float] = field(default_factory=lambda: {"embed": 0.0, "search": 0.0})

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
    """What one run needs: the retriever, the default number of passages, the refusal threshold.

    Attributes:
        refusal_min_score: dense cosine similarity (−1..1) the best retrieved chunk must reach for an answer;
            below it the agent refuses. `-1.0` turns refusal off.
        on_event: receives `agent.events` events while the answer runs (tool activity, text deltas).
        state: filled during the run; `answer` gives each run a fresh one.
    """

    retriever: Retriever
    top_k: int
    refusal_min_score: float = -1.0
    on_event: Callable[[AgentEvent], None] | None = None
    state: RunState = field(default_factory=RunState, init=False)

    def emit(self, event: AgentEvent) -> None:
        """Pass `event` to `on_event` if set."""
        if self.on_event is not None:
            self.on_event(event)

    def is_relevant(self, passages: Sequence[Passage]) -> bool:
        """True when some passage's dense cosine similarity reaches `refusal_min_score`."""
        scores = [p.dense_score for p in passages if p.dense_score is not None]
        return bool(scores) and max(scores) >= self.refusal_min_score


async def search_passages(deps: RagDeps, query: str, top_k: int) -> list[Passage]:
    """The retrieval both policies use: hybrid search for `query`, passages numbered run-wide, timings summed.

    Raises:
        ValueError: blank query or top_k < 1 (from the retriever).
        tools.embedder.EmbedderError / tools.store.StoreError: retrieval failed.
    """
    deps.emit(ToolCall(tool="search_documents", args={"query": query, "top_k": top_k}))
    result = await deps.retriever.search(query, top_k)
    for key in ("embed", "search"):
        deps.state.timings_ms[key] += result.timings_ms.get(key, 0.0)
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
    found = await ctx.deps.retriever.store.get_document(doc_id)
    if found is None:  # deleted since it was retrieved
        raise ModelRetry(f"document {doc_id} is no longer stored")
    title, text = found
    ctx.deps.emit(ToolResult(tool="get_document", summary=f"doc {doc_id}: {len(text)} characters"))
    body = text if len(text) <= MAX_DOCUMENT_CHARS else text[:MAX_DOCUMENT_CHARS] + " ..."
    return format_passages([Passage(0, f"{doc_id}#all", doc_id, title, body, "", 0.0)], max_chars=MAX_DOCUMENT_CHARS)


def build_agent(model: Model, settings: ModelSettings, policy: Policy = "always") -> Agent[RagDeps, str]:
    """The pydantic-ai agent: plain-text output; tools (`search_documents`, `get_document`) only for `agentic`.

    Output is plain text, never `response_format` or an output tool, so servers that drop `response_format` or
    mishandle `tool_choice="required"` (Triton's OpenAI frontend) behave like vLLM.
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
    )

    @agent.output_validator
    def searched_first(ctx: RunContext[RagDeps], output: str) -> str:
        # An answer written before any search is sent back once; after that, `answer` refuses it.
        if not ctx.deps.state.queries and not ctx.last_attempt:
            raise ModelRetry("You have not searched yet. Call search_documents before answering.")
        return output

    return agent


def _limit_error(exc: UsageLimitExceeded, limits: UsageLimits) -> AnswerLimitError:
    text = str(exc)
    if "tool_calls_limit" in text:
        return AnswerLimitError(
            "tool_calls", f"the answer needed more than {limits.tool_calls_limit} tool calls (AGENT_TOOL_CALLS_LIMIT)"
        )
    if "request_limit" in text:
        return AnswerLimitError(
            "requests", f"the answer needed more than {limits.request_limit} LLM requests (AGENT_REQUEST_LIMIT)"
        )
    return AnswerLimitError(
        "tokens", f"the answer exceeded its token budget of {limits.total_tokens_limit} tokens (ANSWER_TOKEN_BUDGET)"
    )


def _llm_error(exc: Exception, timeout_s: float | None) -> AgentError:
    """Map pydantic-ai's model errors to the agent's typed errors (messages say what to check)."""
    if isinstance(exc, ModelRequestTimeout | asyncio.TimeoutError) or "timed out" in str(exc).lower():
        return LLMUnavailableError(f"the LLM server did not answer within {timeout_s} s (LLM_TIMEOUT_S): {exc}")
    if isinstance(exc, ModelConnectionError):
        return LLMUnavailableError(f"cannot reach the LLM server ({exc}); is it running (`rag up` / LLM_BASE_URL)?")
    if isinstance(exc, ModelRequestRejectedError):
        return LLMResponseError(f"the LLM server rejected the request: {exc}")
    if isinstance(exc, ModelHTTPError) and exc.status_code < 500:
        return LLMResponseError(f"the LLM server rejected the request: {exc}")
    if isinstance(exc, ModelAPIError):
        return LLMUnavailableError(f"the LLM server failed after retries: {exc}")
    return LLMResponseError(
        f"the LLM server sent no usable answer, e.g. an empty `choices` list, also when asked again ({exc})"
    )


async def answer(
    agent: Agent[RagDeps, str],
    deps: RagDeps,
    question: str,
    top_k: int | None = None,
    on_text: Callable[[str], None] | None = None,
    *,
    policy: Policy = "always",
    usage_limits: UsageLimits | None = None,
    timeout_s: float | None = None,
    llm_timeout_s: float | None = None,
    message_history: Sequence[ModelMessage] | None = None,
    retrieval_query: str | None = None,
) -> AskResult:
    """Answer `question` with `agent` under `policy`, streamed, with validated citations.

    Args:
        agent: from `build_agent` with the same `policy`.
        deps: retriever and settings; a fresh `RunState` is used for this run.
        top_k: passages retrieved up front (`always`); default `deps.top_k`.
        on_text: called with each new piece of visible answer text (reasoning removed, invalid citation markers
            removed); restarts are only sent to `deps.on_event`.
        usage_limits: request, tool-call and token limits of the run (pydantic-ai `UsageLimits`).
        timeout_s: wall-clock limit of the agent run, seconds.
        llm_timeout_s: the per-request LLM timeout, only quoted in error messages.
        message_history: earlier turns (chat); passages of earlier turns are not cited again.
        retrieval_query: the `always` policy's search query when it differs from the question; default question.

    Returns:
        `AskResult`; `timings_ms` has `embed`, `search`, `llm`, `total` and, when text came, `llm_ttft` (ms).

    Raises:
        ValueError: blank question or top_k < 1.
        AnswerLimitError: a usage limit or the timeout was hit.
        LLMUnavailableError / LLMResponseError: the LLM server failed (after the SDK's bounded retries) or answered
            with something unusable (e.g. no text: empty `choices`).
        tools.embedder.EmbedderError / tools.store.StoreError: retrieval failed.
    """
    if not question or not question.strip():
        raise ValueError("question is empty; expected a non-blank question")
    if top_k is not None and top_k < 1:
        raise ValueError(f"top_k={top_k}; expected >= 1")
    deps = replace(deps)  # fresh RunState for this run
    start = time.perf_counter()
    timings: dict[str, float] = {}

    def finish(text: str, citations: list[Citation] | None = None, refused: bool = False) -> AskResult:
        timings.update(deps.state.timings_ms)
        timings["total"] = (time.perf_counter() - start) * 1000
        return AskResult(
            answer=text,
            citations=citations or [],
            timings_ms={k: round(v, 1) for k, v in timings.items()},
            refused=refused,
            policy=policy,
            searches=list(deps.state.queries),
        )

    def emit_text(delta: str) -> None:
        if on_text is not None:
            on_text(delta)
        deps.emit(TextDelta(text=delta))

    if policy == "always":
        passages = await search_passages(deps, retrieval_query or question, top_k or deps.top_k)
        if not deps.is_relevant(passages):
            timings["llm"] = 0.0
            emit_text(REFUSAL)
            return finish(REFUSAL, refused=True)
        prompt = user_prompt(question, passages)
    else:
        prompt = f"Question: {question}"

    llm_start = time.perf_counter()
    output = ""  # text of the current model response
    streamed = ""  # what the consumer has been shown of it
    limits = usage_limits or UsageLimits()
    try:
        async with agent.run_stream_events(
            prompt, deps=deps, usage_limits=limits, timeout=timeout_s, message_history=message_history
        ) as events:
            async for event in events:
                if isinstance(event, PartStartEvent) and isinstance(event.part, TextPart):
                    if event.index == 0 and output:
                        output = ""
                        if streamed:
                            streamed = ""
                            deps.emit(AnswerRestart(reason="new_response"))
                    output += event.part.content
                elif isinstance(event, PartDeltaEvent) and isinstance(event.delta, TextPartDelta):
                    output += event.delta.content_delta
                elif isinstance(event, FunctionToolCallEvent) and streamed:
                    output, streamed = "", ""
                    deps.emit(AnswerRestart(reason="new_response"))
                elif isinstance(event, FunctionToolResultEvent):
                    output = ""
                elif isinstance(event, AgentRunResultEvent):
                    output = event.result.output
                shown = stream_text(output, {p.number for p in deps.state.by_chunk.values()})
                if len(shown) > len(streamed) and shown.startswith(streamed):
                    if "llm_ttft" not in timings:
                        timings["llm_ttft"] = (time.perf_counter() - llm_start) * 1000
                    delta = shown[len(streamed) :]
                    streamed = shown
                    emit_text(delta)
    except UsageLimitExceeded as exc:
        raise _limit_error(exc, limits) from None
    except RunTimedOut:
        raise AnswerLimitError("timeout", f"the answer took longer than {timeout_s} s (ANSWER_TIMEOUT_S)") from None
    except (ModelAPIError, UnexpectedModelBehavior) as exc:
        raise _llm_error(exc, llm_timeout_s) from exc
    timings["llm"] = (time.perf_counter() - llm_start) * 1000
    text, citations = extract_citations(strip_reasoning(output), deps.state.passages)
    if not deps.is_relevant(deps.state.passages):
        if streamed:
            deps.emit(AnswerRestart(reason="refusal"))
        emit_text(REFUSAL)
        return finish(REFUSAL, refused=True)
    if not text:
        raise LLMResponseError(
            "the LLM server returned no answer text (an empty `choices` list, or only reasoning); check the server log"
        )
    return finish(text, citations)
