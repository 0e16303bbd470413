"""Typed results of the public API (`RagApp.ask`) and their JSON form (`rag ask --json`)."""

from __future__ import annotations

from pydantic import BaseModel, Field


class Citation(BaseModel):
    """A retrieved chunk the answer refers to."""

    doc_id: str = Field(description="Document id as ingested (e.g. a SciFact abstract id).")
    chunk_id: str = Field(description="`<doc_id>#<chunk_index>`, a chunk retrieved for this answer.")
    score: float = Field(description="Retrieval score of the chunk (RRF score in hybrid mode).")
    passage: int = Field(description="Passage number the answer uses for it, from 1.")
    title: str = Field(default="", description="Document title.")


class AskResult(BaseModel):
    """One answer: text, validated citations and per-stage timings in ms.

    `timings_ms` keys: `embed` and `search` (all retrieval calls of the run summed), `llm` (the agent run:
    model requests and tool calls), `llm_ttft` (from the start of the agent run to the first visible answer text;
    absent when no text came, e.g. a refusal without an LLM call), `total`.
    """

    answer: str
    citations: list[Citation]
    dropped_citations: list[str] = Field(
        default_factory=list,
        description="Citation markers the model wrote that name no passage or document retrieved for this answer, "
        "as written (e.g. `[7]`, `[doc 99999]`, `(doc 4242)`); they are removed from `answer`.",
    )
    timings_ms: dict[str, float]
    refused: bool = Field(
        default=False,
        description="True when no retrieved passage was relevant enough: the answer says the documents do not cover "
        "the question and has no citations.",
    )
    policy: str = Field(default="always", description="Retrieval policy used: `always` or `agentic`.")
    searches: list[str] = Field(default_factory=list, description="Retrieval queries run for this answer, in order.")
    truncated: bool = Field(
        default=False,
        description="True when the model stopped at its output limit (`finish_reason: length`, LLM_MAX_TOKENS): the "
        "answer is incomplete.",
    )
    dropped_passages: list[str] = Field(
        default_factory=list,
        description="Chunk ids of retrieved passages left out of the prompt, lowest-ranked first dropped, so that the "
        "prompt fits the LLM's context window (`agent.context_window`); empty when all fitted.",
    )

    def to_json_dict(self) -> dict[str, object]:
        """The `rag ask --json` object: answer, citations (doc_id, chunk_id, score, passage, title),
        dropped_citations, timings_ms, refused, policy, searches, truncated, dropped_passages."""
        return self.model_dump()
