"""The answering agent (pydantic-ai) and its two retrieval policies.

- `always`: retrieval runs with the user's question before the model writes; the model answers from the numbered
  passages in its prompt and gets no tools (for weak models such as the local SmolLM2-135M).
- `agentic`: the model calls `search_documents` (and `get_document`) itself, possibly several times with its own
  queries (for Llama-3.1-8B-class models).

Both policies retrieve through the same code (`search_passages`). Passages are numbered once per run: a chunk
found again by a later search keeps its number. Only those chunks can be cited (`agent.citations`); the streamed
text already has other markers removed. When no retrieved chunk reaches `refusal_min_score` (dense cosine
similarity), the answer is the fixed refusal `agent.prompts.REFUSAL` without citations. The decision uses the
dense cosine in every retrieval mode: a passage that full-text search found without a dense score gets its cosine
from its stored embedding (`VectorStore.cosine_similarities`), computed when the decision depends on it.

The whole answer, retrieval included, runs inside `ANSWER_TIMEOUT_S` (`asyncio.timeout`).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic_ai import Agent, RunContext
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.exceptions import (
    ModelAPIError,
    ModelConnectionError,
    ModelHTTPError,
    ModelRequestRejectedError,
    ModelRequestTimeout,
    ModelRetry,
    UnexpectedModelBehavior,
    UsageLimitExceeded,
)
from pydantic_ai.messages import (
    FunctionToolCallEvent,
    FunctionToolResultEvent,
    ModelMessage,
    ModelResponse,
    PartDeltaEvent,
    PartStartEvent,
    TextPart,
    TextPartDelta,
    ToolCallPart,
)
from pydantic_ai.models import Model
from pydantic_ai.run import AgentRunResultEvent
from pydantic_ai.settings import ModelSettings
from pydantic_ai.usage import UsageLimits

from agent.citations import extract_citations, stream_text
from agent.errors import AgentError, AnswerLimitError, LLMResponseError, LLMUnavailableError
from agent.events import AgentEvent, AnswerRestart, TextDelta, ToolCall, ToolResult
from agent.prompts import AGENTIC_SYSTEM_PROMPT, REFUSAL, SYSTEM_PROMPT, format_passages, user_prompt
from agent.results import AskResult, Citation
from agent.settings import Policy as Policy  # its home is agent.settings; re-exported for callers of answer()
from tools.retrieval import Passage, Retriever
from tools.timing import record

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
        """True when some passage's dense cosine similarity reaches `refusal_min_score` (`-1.0` or below: always,
        whatever the passages' scores)."""
        if self.refusal_min_score <= -1.0:
            return True
        scores = [p.dense_score for p in passages if p.dense_score is not None]
        return bool(scores) and max(scores) >= self.refusal_min_score


async def _with_dense_scores(deps: RagDeps, query: str, passages: list[Passage]) -> list[Passage]:
    """`passages` with the dense cosine similarity filled in from the stored embeddings where retrieval gave none
    (full-text mode, or a hybrid hit only full-text search found), when the refusal decision depends on it: no
    passage already reaches `refusal_min_score`. Costs one query embedding and one indexed lookup."""
    missing = [p.chunk_id for p in passages if p.dense_score is None]
    if not missing or deps.is_relevant(passages):
        return passages
    start = time.perf_counter()
    vector = (await deps.retriever.embedder.embed([query], kind="query"))[0]
    deps.state.timings_ms["embed"] += (time.perf_counter() - start) * 1000
    start = time.perf_counter()
    scores = await deps.retriever.store.cosine_similarities(vector, missing)
    deps.state.timings_ms["search"] += (time.perf_counter() - start) * 1000
    return [p if p.dense_score is not None else replace(p, dense_score=scores.get(p.chunk_id)) for p in passages]


async def search_passages(deps: RagDeps, query: str, top_k: int) -> list[Passage]:
    """The retrieval both policies use: search for `query` (the retriever's mode), passages numbered run-wide,
    each with its dense cosine similarity where the refusal decision needs it, timings summed.

    Raises:
        ValueError: blank query or top_k < 1 (from the retriever).
        tools.embedder.EmbedderError / tools.store.StoreError: retrieval failed.
    """
    deps.emit(ToolCall(tool="search_documents", args={"query": query, "top_k": top_k}))
    result = await deps.retriever.search(query, top_k)
    for key in ("embed", "search"):
        deps.state.timings_ms[key] += result.timings_ms.get(key, 0.0)
    deps.state.queries.append(query)
    passages = deps.state.register(await _with_dense_scores(deps, query, result.passages))
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
    """Map pydantic-ai's model errors to the agent's typed errors; the message keeps the exception's own words
    (and its cause), so the model's actual misbehaviour is reported."""
    if isinstance(exc, ModelRequestTimeout) or "timed out" in str(exc).lower():
        return LLMUnavailableError(f"the LLM server did not answer within {timeout_s} s (LLM_TIMEOUT_S): {exc}")
    if isinstance(exc, ModelConnectionError):
        return LLMUnavailableError(f"cannot reach the LLM server ({exc}); is it running (`rag up` / LLM_BASE_URL)?")
    if isinstance(exc, ModelRequestRejectedError):
        return LLMResponseError(f"the LLM server rejected the request: {exc}")
    if isinstance(exc, ModelHTTPError) and exc.status_code < 500:
        return LLMResponseError(f"the LLM server rejected the request: {exc}")
    if isinstance(exc, ModelAPIError):
        return LLMUnavailableError(f"the LLM server failed after retries: {exc}")
    cause = f" (cause: {exc.__cause__})" if exc.__cause__ is not None else ""
    return LLMResponseError(f"the model's response could not be used: {exc}{cause}")


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
            removed); restarts are only sent to `deps.on_event`. The text sent after the last restart equals
            `AskResult.answer`.
        usage_limits: request, tool-call and token limits of the run (pydantic-ai `UsageLimits`).
        timeout_s: wall-clock limit of the whole answer, retrieval included, seconds (`asyncio.timeout`).
        llm_timeout_s: the per-request LLM timeout, only quoted in error messages.
        message_history: earlier turns (chat); passages of earlier turns are not cited again.
        retrieval_query: the `always` policy's search query when it differs from the question; default question.

    Returns:
        `AskResult`; `timings_ms` has `embed`, `search`, `llm`, `total` and, when text came, `llm_ttft` (ms).

    Raises:
        ValueError: blank question or top_k < 1.
        AnswerLimitError: a usage limit or the timeout was hit.
        LLMUnavailableError / LLMResponseError: the LLM server failed (after the SDK's bounded retries) or answered
            with something unusable (e.g. no text: empty `choices`); the message quotes the cause.
        tools.embedder.EmbedderError / tools.store.StoreError: retrieval failed.
    """
    if not question or not question.strip():
        raise ValueError("question is empty; expected a non-blank question")
    if top_k is not None and top_k < 1:
        raise ValueError(f"top_k={top_k}; expected >= 1")
    deps = replace(deps)  # fresh RunState for this run
    clock = asyncio.timeout(timeout_s)
    try:
        async with clock:
            return await _answer(
                agent,
                deps,
                question,
                top_k,
                on_text,
                policy=policy,
                limits=usage_limits or UsageLimits(),
                llm_timeout_s=llm_timeout_s,
                message_history=message_history,
                retrieval_query=retrieval_query,
            )
    except TimeoutError:
        if not clock.expired():
            raise
        raise AnswerLimitError(
            "timeout", f"the answer took longer than {timeout_s} s (ANSWER_TIMEOUT_S), retrieval included"
        ) from None


async def _answer(
    agent: Agent[RagDeps, str],
    deps: RagDeps,
    question: str,
    top_k: int | None,
    on_text: Callable[[str], None] | None,
    *,
    policy: Policy,
    limits: UsageLimits,
    llm_timeout_s: float | None,
    message_history: Sequence[ModelMessage] | None,
    retrieval_query: str | None,
) -> AskResult:
    """`answer` without its timeout."""
    start = time.perf_counter()
    timings: dict[str, float] = {}

    def finish(
        text: str, citations: list[Citation] | None = None, refused: bool = False, dropped: list[str] | None = None
    ) -> AskResult:
        timings.update(deps.state.timings_ms)
        timings["total"] = (time.perf_counter() - start) * 1000
        return AskResult(
            answer=text,
            citations=citations or [],
            dropped_citations=dropped or [],
            timings_ms={k: round(v, 1) for k, v in timings.items()},
            refused=refused,
            policy=policy,
            searches=list(deps.state.queries),
        )

    streamed = ""  # what the consumer has been shown of the current response

    def show(text: str) -> None:
        """Bring the consumer's text to `text`: append the difference, or restart when it is no extension."""
        nonlocal streamed
        if text == streamed:
            return
        if not text.startswith(streamed):  # e.g. reasoning whose `<think>` the chat template opened in the prompt
            deps.emit(AnswerRestart(reason="revised"))
            streamed = ""
        if "llm_ttft" not in timings and text:
            timings["llm_ttft"] = (time.perf_counter() - llm_start) * 1000
        delta, streamed = text[len(streamed) :], text
        if delta:
            if on_text is not None:
                on_text(delta)
            deps.emit(TextDelta(text=delta))

    llm_start = time.perf_counter()
    if policy == "always":
        passages = await search_passages(deps, retrieval_query or question, top_k or deps.top_k)
        if not deps.is_relevant(passages):
            timings["llm"] = 0.0
            show(REFUSAL)
            timings.pop("llm_ttft", None)
            return finish(REFUSAL, refused=True)
        prompt = user_prompt(question, passages)
    else:
        prompt = f"Question: {question}"

    llm_start = time.perf_counter()
    output = ""  # text of the current model response
    try:
        async with agent.run_stream_events(
            prompt, deps=deps, usage_limits=limits, message_history=message_history
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
                else:
                    continue
                show(stream_text(output, deps.state.passages))
    except UsageLimitExceeded as exc:
        raise _limit_error(exc, limits) from None
    except (ModelAPIError, UnexpectedModelBehavior) as exc:
        raise _llm_error(exc, llm_timeout_s) from exc
    record("llm", (time.perf_counter() - llm_start) * 1000, timings, llm_ttft_ms=timings.get("llm_ttft"))
    text, citations, dropped = extract_citations(output, deps.state.passages)
    if not deps.is_relevant(deps.state.passages):
        if streamed:
            deps.emit(AnswerRestart(reason="refusal"))
            streamed = ""
        show(REFUSAL)
        return finish(REFUSAL, refused=True)
    if not text:
        raise LLMResponseError(
            "the LLM server returned no answer text (an empty `choices` list, or only reasoning); check the server log"
        )
    show(text)  # the held-back tail of the stream: the streamed text now equals the answer
    return finish(text, citations, dropped=dropped)
