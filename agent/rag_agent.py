"""The answering agent (pydantic-ai): retrieval runs up front with the user's question, the model answers from the
numbered passages, and citations are validated against what was retrieved in this run."""

from __future__ import annotations

import time
from dataclasses import dataclass

from pydantic_ai import Agent
from pydantic_ai.models import Model
from pydantic_ai.settings import ModelSettings

from agent.citations import extract_citations, strip_reasoning
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


async def answer(agent: Agent[RagDeps, str], deps: RagDeps, question: str, top_k: int | None = None) -> AskResult:
    """Retrieve passages for `question`, run the agent on them, validate citations.

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
    run = await agent.run(user_prompt(question, retrieved.passages), deps=deps)
    llm_ms = (time.perf_counter() - llm_start) * 1000
    text, citations = extract_citations(strip_reasoning(run.output), retrieved.passages)
    timings = {**retrieved.timings_ms, "llm": llm_ms, "total": (time.perf_counter() - start) * 1000}
    return AskResult(answer=text, citations=citations, timings_ms={k: round(v, 1) for k, v in timings.items()})
