"""Typed results of the public API (`RagApp.ask`) and their JSON form (`rag ask --json`)."""

from __future__ import annotations

from collections.abc import Mapping
from posixpath import basename
from typing import TypedDict

from pydantic import BaseModel, Field, model_validator

SECTION_SEPARATOR = " › "


class Citation(BaseModel):
    """A retrieved chunk the answer refers to, with where it lies in its document (page or section) when known."""

    doc_id: str = Field(description="Document id as ingested (e.g. a SciFact abstract id).")
    chunk_id: str = Field(
        description="`<doc_id>#<chunk_index>` (`<collection>::<doc_id>#<chunk_index>` outside the `default` "
        "collection), a chunk retrieved for this answer."
    )
    score: float = Field(description="Retrieval score of the chunk (RRF score in hybrid mode).")
    passage: int = Field(description="Passage number the answer uses for it, from 1.")
    title: str = Field(default="", description="Document title.")
    page: int | None = Field(default=None, description="PDF page the chunk is on, from 1 (PDF documents only).")
    section: list[str] = Field(
        default_factory=list,
        description="Headings above the chunk, outermost first (Markdown, HTML, DOCX), e.g. `Guide`, `Install`.",
    )
    location: str = Field(
        default="",
        description="Where to look, for people: `handbook.pdf p. 12` (the file name of the doc id and the page) or "
        "`Guide › Install › Linux` (the section path); empty when neither is known.",
    )
    text: str = Field(
        default="",
        description="The cited chunk's text, as retrieved (empty in turns stored before it was recorded).",
    )

    @model_validator(mode="after")
    def _label(self) -> Citation:
        if not self.location:
            if self.page is not None:
                self.location = f"{basename(self.doc_id)} p. {self.page}"
            elif self.section:
                self.location = SECTION_SEPARATOR.join(self.section)
        return self


class Location(TypedDict, total=False):
    """Where a chunk lies: its PDF page or its section path."""

    page: int
    section: list[str]


def location_fields(metadata: Mapping[str, object]) -> Location:
    """The `Citation` fields given by a chunk's stored metadata (`{"page": 12}` or `{"section": [...]}`)."""
    fields: Location = {}
    page = metadata.get("page")
    if isinstance(page, int):
        fields["page"] = page
    section = metadata.get("section")
    if isinstance(section, list):
        fields["section"] = [str(s) for s in section]
    return fields


class TokenUsage(BaseModel):
    """Tokens the LLM server reported for one answer, all its LLM requests summed (pydantic-ai's `RunUsage`); zeros
    when no LLM request was made (a refusal before the LLM) or the server reported no usage."""

    input_tokens: int = Field(default=0, description="Prompt tokens of every LLM request of the answer.")
    output_tokens: int = Field(default=0, description="Generated tokens of every LLM request of the answer.")
    requests: int = Field(default=0, description="LLM requests made.")


class AskResult(BaseModel):
    """One answer: text, validated citations and per-stage timings in ms.

    `timings_ms` keys: `embed` and `search` (all retrieval calls of the run summed), `llm` (the agent run:
    model requests and tool calls), `llm_ttft` (from the start of the agent run to the first visible answer text;
    absent when no text came, e.g. a refusal without an LLM call), `total`; an answer from the answer cache has
    `cache` (the look-up) and `total` only.
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
        "prompt fits the LLM's context window (`agent.core.context_window`); empty when all fitted.",
    )
    cached: bool = Field(
        default=False,
        description="True when the answer came from the answer cache (docs/answer-cache.md): the stored answer of the "
        "same first-turn question over the same documents, with its citations; `timings_ms` then has only `cache` "
        "and `total`.",
    )
    usage: TokenUsage = Field(
        default_factory=TokenUsage,
        exclude=True,
        description="Token usage of the answer's LLM requests; for the Python API and the OpenAI-compatible route "
        "(`usage`), left out of the `/v1/ask` and `rag ask --json` object.",
    )

    def to_json_dict(self) -> dict[str, object]:
        """The `rag ask --json` object: answer, citations (doc_id, chunk_id, score, passage, title, page, section,
        location, text), dropped_citations, timings_ms, refused, policy, searches, truncated, dropped_passages,
        cached."""
        return self.model_dump()
