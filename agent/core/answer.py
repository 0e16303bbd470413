"""One answer: a typed request (`AnswerRequest`) run through the agent (`agent.core.rag_agent`), streamed, with
validated citations, refusal and limits.

The whole answer, retrieval included, runs inside `AnswerLimits.timeout_s` (`ANSWER_TIMEOUT_S`, `asyncio.timeout`);
pydantic-ai's usage limits bound its LLM requests, tool calls and tokens. pydantic-ai's model errors become the
agent's typed errors here (`agent.core.errors`), at the boundary where they occur.
"""

from __future__ import annotations

import asyncio
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from pydantic_ai import Agent
from pydantic_ai.exceptions import (
    ModelAPIError,
    ModelConnectionError,
    ModelHTTPError,
    ModelRequestRejectedError,
    ModelRequestTimeout,
    UnexpectedModelBehavior,
    UsageLimitExceeded,
    UsageLimitUnavailableWarning,
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
from pydantic_ai.run import AgentRunResultEvent
from pydantic_ai.settings import ModelSettings
from pydantic_ai.usage import UsageLimits

from agent.config.settings import Policy
from agent.core.citations import citations_of, extract_citations, stream_text
from agent.core.context_window import message_texts
from agent.core.errors import AgentError, AnswerLimitError, InputError, LLMResponseError, LLMUnavailableError
from agent.core.events import AgentEvent, AnswerRestart, SupportChecked, TextDelta
from agent.core.followup import FollowUpQuery, search_query
from agent.core.llm_finish import is_truncated, rate_limit_error, require_finish_reason
from agent.core.prompts import AGENTIC_SYSTEM_PROMPT, REFUSAL, SYSTEM_PROMPT, agentic_prompt, user_prompt
from agent.core.rag_agent import TOOLS_TEXT, RagDeps, search_passages
from agent.core.results import AskResult, Citation, RetrievedPassage, SupportMode, SupportReport, TokenUsage
from tools.scope import SearchScope

# pydantic-ai warns, as a raw Python warning with its site-packages path, on every run whose LLM server sent no token
# usage: ANSWER_TOKEN_BUDGET then counts only the usage that was reported.
# That is a property of the server, not of the answer: it is documented with the setting, not printed per answer.
warnings.filterwarnings("ignore", category=UsageLimitUnavailableWarning)


@dataclass(frozen=True)
class AnswerRequest:
    """One question and the options of its answer; what `RagApp.ask` and `answer` take.

    Attributes:
        question: the question, non-blank.
        top_k: passages retrieved up front (`always` policy), >= 1; None: the app's `TOP_K`.
        policy: `always` or `agentic`; None: the app's `AGENT_POLICY`.
        history: earlier turns of a conversation (pydantic-ai messages); passages of earlier turns are not cited.
        retrieval_query: what the `always` policy searches with when it differs from the question (e.g. the bare
            claim, when the question wraps it in instructions); None: the question, or with `earlier_questions` the
            follow-up's search query.
        earlier_questions: the conversation's earlier user turns, oldest first: with no `retrieval_query`, the
            `always` policy searches with `agent.core.followup.search_query` of them and the question (condensed, or
            rewritten by the LLM with `FOLLOWUP_QUERY=rewrite`); the answer still answers the question as asked.
        on_event: receives `agent.core.events` events while the answer runs (tool activity, text deltas, restarts).
        on_text: receives each new piece of visible answer text (reasoning and invalid citation markers removed);
            the text sent after the last restart equals `AskResult.answer`.
        scope: the documents the answer may search and cite (collections, filters; `tools.scope`); None: all.
        model_settings: LLM request settings of this answer over the app's (e.g. `max_tokens`, `temperature`;
            pydantic-ai `ModelSettings`, merged key by key over the agent's); None: the app's alone.
        support: the support check's mode for this answer (`flag`, `strict`, `off`); None: the app's
            `SUPPORT_CHECK`.
        answer_id: the id the answer gets (`AskResult.answer_id`, e.g. the one inside an OpenAI completion id);
            None: a fresh one.
        owner: the API key id asking (as text; None: no key, or the admin): the owner of the answer's feedback
            record, the only key that may rate it (`agent.core.feedback`).

    Raises:
        agent.core.errors.InputError: blank question or top_k < 1.
    """

    question: str
    top_k: int | None = None
    policy: Policy | None = None
    history: Sequence[ModelMessage] = ()
    retrieval_query: str | None = None
    earlier_questions: Sequence[str] = ()
    scope: SearchScope | None = None
    model_settings: ModelSettings | None = None
    support: SupportMode | None = None
    answer_id: str | None = None
    owner: str | None = None
    on_event: Callable[[AgentEvent], None] | None = field(default=None, compare=False)
    on_text: Callable[[str], None] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if not self.question or not self.question.strip():
            raise InputError("question is empty; expected a non-blank question")
        if self.top_k is not None and self.top_k < 1:
            raise InputError(f"top_k={self.top_k}; expected >= 1")


@dataclass(frozen=True)
class AnswerLimits:
    """The bounds of every answer of an app.

    Attributes:
        usage: LLM requests, tool calls and tokens of one answer (pydantic-ai `UsageLimits`).
        timeout_s: wall-clock limit of one answer, retrieval included, seconds; None: unbounded.
        llm_timeout_s: the per-request LLM timeout (seconds), only quoted in error messages.
    """

    usage: UsageLimits = field(default_factory=UsageLimits)
    timeout_s: float | None = None
    llm_timeout_s: float | None = None


async def answer(
    agent: Agent[RagDeps, str], deps: RagDeps, request: AnswerRequest, limits: AnswerLimits | None = None
) -> AskResult:
    """Answer `request` with `agent`, streamed, with validated citations.

    Args:
        agent: from `agent.core.rag_agent.build_agent` with the request's policy (None: `always`).
        deps: search and defaults; this run gets a fresh `RunState` and the request's `on_event`.

    Returns:
        `AskResult`; `timings_ms` has `embed`, `search`, `llm`, `total` and, when text came, `llm_ttft` (ms).

    Raises:
        AnswerLimitError: a usage limit or the timeout was hit.
        LLMUnavailableError / LLMResponseError: the LLM server failed (after the SDK's bounded retries) or answered
            with something unusable (e.g. no text: empty `choices`); the message quotes the cause.
        tools.errors.EmbedderError / tools.errors.StoreError: retrieval failed.
    """
    limits = limits or AnswerLimits()
    # a fresh RunState too (not an init field)
    deps = replace(deps, on_event=request.on_event or deps.on_event, scope=request.scope)
    clock = asyncio.timeout(limits.timeout_s)
    try:
        async with clock:
            return await _answer(agent, deps, request, limits)
    except TimeoutError:
        if not clock.expired():
            raise
        raise AnswerLimitError(
            "timeout", f"the answer took longer than {limits.timeout_s} s (ANSWER_TIMEOUT_S), retrieval included"
        ) from None


class _Stream:
    """What the consumer has been shown of the current response, brought forward by `show`."""

    def __init__(self, deps: RagDeps, request: AnswerRequest, started: float) -> None:
        self.deps, self.request, self.started = deps, request, started
        self.shown = ""
        self.ttft_ms: float | None = None

    def show(self, text: str) -> None:
        """Bring the consumer's text to `text`: append the difference, or restart when it is no extension."""
        if text == self.shown:
            return
        if not text.startswith(self.shown):  # e.g. reasoning whose `<think>` the chat template opened in the prompt
            self.restart("revised")
        if self.ttft_ms is None and text:
            self.ttft_ms = (time.perf_counter() - self.started) * 1000
        delta, self.shown = text[len(self.shown) :], text
        if delta:
            if self.request.on_text is not None:
                self.request.on_text(delta)
            self.deps.emit(TextDelta(text=delta))

    def restart(self, reason: str) -> None:
        """Tell the consumer to discard what it was shown (only when it was shown something)."""
        if self.shown:
            self.deps.emit(AnswerRestart(reason=reason))
            self.shown = ""


async def _answer(agent: Agent[RagDeps, str], deps: RagDeps, request: AnswerRequest, limits: AnswerLimits) -> AskResult:
    """`answer` without its timeout."""
    start = time.perf_counter()
    policy: Policy = request.policy or "always"
    timings = deps.state.timings
    timings.add({"embed": 0.0, "search": 0.0})
    truncated = False  # the final response stopped at max_tokens
    usage = TokenUsage()  # tokens the LLM server reported for the run
    failed_tool_calls = 0  # tool calls of the run that did not succeed

    def finish(
        text: str,
        citations: list[Citation] | None = None,
        refused: bool = False,
        dropped: list[str] | None = None,
        support: SupportReport | None = None,
    ) -> AskResult:
        timings.add({"total": (time.perf_counter() - start) * 1000})
        return AskResult(
            answer=text,
            citations=citations or [],
            dropped_citations=dropped or [],
            timings_ms=timings.as_dict(digits=1),
            refused=refused,
            policy=policy,
            searches=list(deps.state.queries),
            truncated=truncated and not refused,
            dropped_passages=deps.state.left_out,
            usage=usage,
            support=support,
            retrieved=[
                RetrievedPassage(chunk_id=p.chunk_id, doc_id=p.doc_id, score=p.score, passage=p.number, title=p.title)
                for p in deps.state.passages
            ],
            failed_tool_calls=failed_tool_calls,
        )

    history = list(request.history)
    if deps.context is not None:  # the oldest turns of a long conversation make room for the question
        instructions = [SYSTEM_PROMPT] if policy == "always" else [AGENTIC_SYSTEM_PROMPT, TOOLS_TEXT]
        first = user_prompt(request.question, []) if policy == "always" else agentic_prompt(request.question)
        history = await deps.context.fit_history(history, instructions, first)
    if policy == "always":
        query = request.retrieval_query
        if not query:
            found = await _follow_up_query(deps, request)
            query, usage = found.query, _rewrite_usage(found)
        passages = await search_passages(deps, query, request.top_k or deps.top_k)
        if not deps.is_relevant(passages):
            timings.add({"llm": 0.0})
            _Stream(deps, request, start).show(REFUSAL)
            return finish(REFUSAL, refused=True)
        if deps.context is not None:
            fixed = [SYSTEM_PROMPT, *message_texts(history)]
            fitted = await deps.context.fit(passages, lambda kept: user_prompt(request.question, kept), fixed)
            passages = fitted.kept
            deps.state.forget(fitted.dropped, {p.chunk_id for p in fitted.dropped})  # the model never sees them
        prompt = user_prompt(request.question, passages)
    else:
        prompt = agentic_prompt(request.question)

    llm_start = time.perf_counter()
    stream = _Stream(deps, request, llm_start)
    output = ""  # text of the current model response
    try:
        async with agent.run_stream_events(
            prompt,
            deps=deps,
            usage_limits=limits.usage,
            message_history=history or None,
            model_settings=request.model_settings,
        ) as events:
            async for event in events:
                if isinstance(event, PartStartEvent) and isinstance(event.part, TextPart):
                    if event.index == 0 and output:
                        output = ""
                        stream.restart("new_response")
                    output += event.part.content
                elif isinstance(event, PartDeltaEvent) and isinstance(event.delta, TextPartDelta):
                    output += event.delta.content_delta
                elif isinstance(event, FunctionToolCallEvent):
                    output = ""
                    stream.restart("new_response")
                elif isinstance(event, FunctionToolResultEvent):
                    output = ""
                    if event.part.outcome != "success":  # invalid arguments, a tool's retry request, an error
                        failed_tool_calls += 1
                elif isinstance(event, AgentRunResultEvent):
                    output = event.result.output
                    require_finish_reason(event.result.response)  # a stream cut short is an error
                    truncated = is_truncated(event.result.response)
                    run_usage = event.result.usage
                    usage = TokenUsage(  # the rewrite's tokens, if any, plus the agent run's
                        input_tokens=usage.input_tokens + run_usage.input_tokens,
                        output_tokens=usage.output_tokens + run_usage.output_tokens,
                        requests=usage.requests + run_usage.requests,
                    )
                else:
                    continue
                stream.show(stream_text(output, deps.state.passages))
    except UsageLimitExceeded as exc:
        raise _limit_error(exc, limits.usage) from None
    except (ModelAPIError, UnexpectedModelBehavior) as exc:
        raise _llm_error(exc, limits.llm_timeout_s) from exc
    if stream.ttft_ms is not None:
        timings.add({"llm_ttft": stream.ttft_ms})
    timings.record("llm", (time.perf_counter() - llm_start) * 1000, llm_ttft_ms=stream.ttft_ms)
    text, citations, dropped = extract_citations(output, deps.state.passages)
    if not deps.is_relevant(deps.state.passages):
        stream.restart("refusal")
        stream.show(REFUSAL)
        return finish(REFUSAL, refused=True)
    if not text:
        raise LLMResponseError(
            "the LLM server returned no answer text (an empty `choices` list, or only reasoning); check the server log"
        )
    report = None
    mode = request.support or (deps.support.mode if deps.support is not None else "off")
    if deps.support is not None and mode != "off":
        check_start = time.perf_counter()
        checked = await deps.support.check(request.question, text, deps.state.passages, mode)
        timings.add({"support": (time.perf_counter() - check_start) * 1000})
        text, report = checked.text, checked.report
        citations = citations_of(checked.cited, deps.state.passages)
    stream.show(text)  # the held-back tail (or the checked answer): the streamed text now equals the answer
    if report is not None:
        deps.emit(SupportChecked(support=report))
    return finish(text, citations, dropped=dropped, support=report)


async def _follow_up_query(deps: RagDeps, request: AnswerRequest) -> FollowUpQuery:
    """The search query of a request without `retrieval_query`: `search_query` of its earlier questions with the
    deps' rewriter; a rewrite attempt is timed as stage `rewrite` (its fallback, if any, on the span)."""
    found = await search_query(request.earlier_questions, request.question, deps.rewriter)
    if found.method == "rewritten" or found.fallback is not None:
        deps.state.timings.record("rewrite", found.rewrite_ms, fallback=found.fallback)
    return found


def _rewrite_usage(found: FollowUpQuery) -> TokenUsage:
    """The tokens of a follow-up's rewrite request (one LLM request when the server replied, used or not)."""
    replied = found.input_tokens + found.output_tokens > 0
    return TokenUsage(input_tokens=found.input_tokens, output_tokens=found.output_tokens, requests=int(replied))


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
    if (rate_limited := rate_limit_error(exc)) is not None:  # a 429 keeps the server's Retry-After
        return rate_limited
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
