"""The answering agent (pydantic-ai): retrieval runs up front with the user's question, the model answers from the
numbered passages, and citations are validated against what was retrieved in this run."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from pydantic_ai import Agent
from pydantic_ai.messages import PartDeltaEvent, PartStartEvent, TextPart, TextPartDelta
from pydantic_ai.models import Model
from pydantic_ai.run import AgentRunResultEvent
from pydantic_ai.settings import ModelSettings

from agent.citations import extract_citations, strip_reasoning, visible_text
from agent.prompts import SYSTEM_PROMPT, user_prompt
from agent.results import AskResult
from tools.retrieval import Retriever


@dataclass
class RagDeps:
    """What one run needs: the retriever and the default number of passages."""

    retriever: Retriever
    top_k: int


def build_agent(model: Model, settings: ModelSettings) -> Agent[RagDeps, str]:
    """The pydantic-ai agent: plain-text output, the system prompt of `agent.prompts`."""
    return Agent(model, deps_type=RagDeps, output_type=str, instructions=SYSTEM_PROMPT, model_settings=settings)


async def answer(
    agent: Agent[RagDeps, str],
    deps: RagDeps,
    question: str,
    top_k: int | None = None,
    on_text: Callable[[str], None] | None = None,
) -> AskResult:
    """Retrieve passages for `question`, run the agent on them (streamed), validate citations.

    Args:
        on_text: called with each new piece of visible answer text as the model streams it (reasoning tags
            removed; invalid citation markers are only removed from the final `AskResult.answer`).

    Returns:
        `AskResult` with `timings_ms` keys `embed`, `search`, `llm`, `total` (ms).

    Raises:
        ValueError: blank question or top_k < 1.
        pydantic_ai.exceptions.AgentRunError / ModelAPIError: the LLM failed.
    """
    if not question or not question.strip():
        raise ValueError("question is empty; expected a non-blank question")
    start = time.perf_counter()
    retrieved = await deps.retriever.search(question, top_k or deps.top_k)
    llm_start = time.perf_counter()
    output = ""
    streamed = ""
    async with agent.run_stream_events(user_prompt(question, retrieved.passages), deps=deps) as events:
        async for event in events:
            if isinstance(event, PartStartEvent) and isinstance(event.part, TextPart):
                output += event.part.content
            elif isinstance(event, PartDeltaEvent) and isinstance(event.delta, TextPartDelta):
                output += event.delta.content_delta
            elif isinstance(event, AgentRunResultEvent):
                output = event.result.output
            if on_text is not None and len(visible := visible_text(output)) > len(streamed):
                on_text(visible[len(streamed) :])
                streamed = visible
    llm_ms = (time.perf_counter() - llm_start) * 1000
    text, citations = extract_citations(strip_reasoning(output), retrieved.passages)
    timings = {**retrieved.timings_ms, "llm": llm_ms, "total": (time.perf_counter() - start) * 1000}
    return AskResult(answer=text, citations=citations, timings_ms={k: round(v, 1) for k, v in timings.items()})
