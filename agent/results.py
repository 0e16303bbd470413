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
    """One answer: text, validated citations and per-stage timings in ms (`embed`, `search`, `llm`, `total`)."""

    answer: str
    citations: list[Citation]
    timings_ms: dict[str, float]

    def to_json_dict(self) -> dict[str, object]:
        """The `rag ask --json` object: answer, citations (doc_id, chunk_id, score, passage, title), timings_ms."""
        return self.model_dump()
