"""Typed results of the public API (`RagApp.ask`) and their JSON form (`rag ask --json`)."""

from __future__ import annotations

from collections.abc import Mapping
from posixpath import basename
from typing import Literal, TypedDict
from uuid import uuid4

from pydantic import BaseModel, Field, model_validator

SECTION_SEPARATOR = " › "

LineBox = tuple[int, float, float, float, float]
"""`(page, left, bottom, right, top)`: one text line of a chunk on its page, in PDF points (`tools.highlight`)."""


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
    span: list[int] | None = Field(
        default=None,
        description="`[start, end]`: the chunk's character offsets in its document's text (the text its chunks were "
        "cut from); null for chunks stored before spans were recorded.",
        min_length=2,
        max_length=2,
    )
    boxes: list[LineBox] | None = Field(
        default=None,
        description="Where the chunk stands on its pages (PDFs with a text layer): one rectangle per text line, "
        "`[page, left, bottom, right, top]` with the page from 1 and the rectangle in PDF points (1/72 in), origin at "
        "the page's bottom left; `GET /v1/documents/{doc_id}/pages/{n}?chunk=<chunk_id>` draws them on the page. "
        "Null when unknown.",
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
    """Where a chunk lies: its PDF page or its section path, its span in the document's text, its line boxes."""

    page: int
    section: list[str]
    span: list[int]
    boxes: list[LineBox]


def location_fields(metadata: Mapping[str, object]) -> Location:
    """The `Citation` fields given by a chunk's stored metadata (`{"page": 12}` or `{"section": [...]}`, with
    `"span": [start, end]` and `"boxes": [[page, left, bottom, right, top], ...]` where recorded); malformed values
    are left out."""
    fields: Location = {}
    span = metadata.get("span")
    if isinstance(span, list) and len(span) == 2 and all(isinstance(v, int) for v in span):
        fields["span"] = [int(v) for v in span]
    boxes = metadata.get("boxes")
    if isinstance(boxes, list) and all(
        isinstance(b, list) and len(b) == 5 and all(isinstance(v, int | float) for v in b) for b in boxes
    ):
        fields["boxes"] = [(int(b[0]), float(b[1]), float(b[2]), float(b[3]), float(b[4])) for b in boxes]
    page = metadata.get("page")
    if isinstance(page, int):
        fields["page"] = page
    section = metadata.get("section")
    if isinstance(section, list):
        fields["section"] = [str(s) for s in section]
    return fields


SupportLabel = Literal["SUPPORT", "CONTRADICT", "NOT_ENOUGH_INFO"]
"""A sentence's verdict against the retrieved passages (SciFact's labels; `tools.support`)."""

SupportMode = Literal["flag", "strict", "off"]
"""`SUPPORT_CHECK`: `flag` labels every sentence and marks unsupported ones, `strict` also removes them, `off` skips
the check."""


class SentenceEvidence(BaseModel):
    """The passage sentence a verdict rests on: where it is in its passage, its document and its pages."""

    passage: int = Field(description="Passage number (as in `citations`), from 1.")
    doc_id: str = Field(description="Document id of the passage.")
    chunk_id: str = Field(description="Chunk id of the passage.")
    title: str = Field(default="", description="Document title.")
    text: str = Field(description="The evidence sentence, as it stands in the passage.")
    passage_span: list[int] = Field(
        description="`[start, end]`: the sentence's character offsets in the passage's `text` (end exclusive).",
        min_length=2,
        max_length=2,
    )
    span: list[int] | None = Field(
        default=None,
        description="`[start, end]`: the sentence's character offsets in its document's text; null when the chunk "
        "has no recorded span.",
        min_length=2,
        max_length=2,
    )
    page: int | None = Field(default=None, description="PDF page of the passage, from 1 (PDF documents only).")
    boxes: list[LineBox] | None = Field(
        default=None,
        description="The lines of the passage's boxes that hold the sentence (`[page, left, bottom, right, top]`, "
        "PDF points; `tools.highlight.sentence_boxes`); null when the passage has no boxes.",
    )


class SentenceSupport(BaseModel):
    """One sentence of the answer as shown, with its verdict and the sentence it rests on."""

    index: int = Field(description="Position among the answer's sentences, from 0.")
    text: str = Field(description="The sentence as it stands in `answer`, markers included.")
    span: list[int] = Field(
        description="`[start, end]`: the sentence's character offsets in `answer` (end exclusive).",
        min_length=2,
        max_length=2,
    )
    label: SupportLabel = Field(description="SUPPORT, CONTRADICT or NOT_ENOUGH_INFO (`tools.support`).")
    score: float = Field(description="The verifier's probability of `label` (0..1); 1.0 for a quote.")
    supported: bool = Field(description="True when `label` is SUPPORT.")
    evidence: SentenceEvidence | None = Field(
        default=None,
        description="The supporting or contradicting sentence; for NOT_ENOUGH_INFO the closest candidate; null when "
        "no passage had a sentence.",
    )
    cited: list[int] = Field(
        default_factory=list, description="Passage numbers the sentence's `[n]` markers name in `answer`."
    )
    written: list[int] = Field(
        default_factory=list, description="Passage numbers the model's markers named before the check."
    )
    repointed: bool = Field(
        default=False,
        description="True when the check changed the sentence's markers to the passage that supports it.",
    )
    quote: bool = Field(
        default=False,
        description="True for a sentence quoted from a passage in an extractive answer (not the model's words).",
    )


class SupportReport(BaseModel):
    """What the support check found and did to an answer (`SUPPORT_CHECK`, `agent.core.support`)."""

    mode: SupportMode = Field(description="The check's mode for this answer.")
    sentences: list[SentenceSupport] = Field(
        default_factory=list, description="Every sentence of `answer`, in order, with its label."
    )
    supported: int = Field(default=0, description="Sentences of the model's answer labelled SUPPORT.")
    unsupported: int = Field(
        default=0, description="Sentences of the model's answer not labelled SUPPORT (flagged, or removed in strict)."
    )
    removed: int = Field(default=0, description="Unsupported sentences removed (`strict`).")
    repeated: int = Field(default=0, description="Repeated sentences of the model's answer collapsed into one.")
    repointed: int = Field(default=0, description="Sentences whose markers were changed to their supporting passage.")
    extractive: bool = Field(
        default=False,
        description="True when no sentence of the model's answer was supported and the answer is instead quotes of "
        "the best evidence sentences, labelled as quotes.",
    )
    generated: str = Field(
        default="",
        description="The model's answer before the check (equal to `answer` when the check changed nothing).",
    )


class RetrievedPassage(BaseModel):
    """A passage retrieved for an answer, cited or not: what a rating of the answer records
    (`agent.core.feedback`)."""

    chunk_id: str = Field(description="Chunk id, as in `Citation.chunk_id`.")
    doc_id: str = Field(description="Document id.")
    score: float = Field(description="Retrieval score of the chunk.")
    passage: int = Field(description="Passage number in the answer's prompt, from 1.")
    title: str = Field(default="", description="Document title.")


def new_answer_id() -> str:
    """A fresh answer id: a random UUID as text (`AskResult.answer_id`)."""
    return str(uuid4())


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
    answer_id: str = Field(
        default_factory=new_answer_id,
        description="This response's id (a UUID): what a rating refers to (`POST /v1/feedback`). Every response has "
        "its own, an answer from the answer cache included; the OpenAI-compatible route's completion id is "
        "`chatcmpl-<answer_id>`.",
    )
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
    support: SupportReport | None = Field(
        default=None,
        description="Per-sentence support labels and sentence-level citations (`SUPPORT_CHECK`); null when the "
        "check is off, or for a refusal.",
    )
    retrieved: list[RetrievedPassage] = Field(
        default_factory=list,
        exclude=True,
        description="Every passage retrieved for the answer, cited or not, by passage number; for the Python API and "
        "the feedback record (`agent.core.feedback`), left out of the `/v1/ask` and `rag ask --json` object.",
    )
    failed_tool_calls: int = Field(
        default=0,
        exclude=True,
        description="Tool calls of the run that did not succeed (invalid arguments, a tool's retry request): the "
        "answer may be degraded, so it is never cached; for the Python API, left out of every JSON object.",
    )
    usage: TokenUsage = Field(
        default_factory=TokenUsage,
        exclude=True,
        description="Token usage of the answer's LLM requests; for the Python API and the OpenAI-compatible route "
        "(`usage`), left out of the `/v1/ask` and `rag ask --json` object.",
    )

    def to_json_dict(self) -> dict[str, object]:
        """The `rag ask --json` object: answer, citations (doc_id, chunk_id, score, passage, title, page, section,
        location, text, span, boxes), answer_id, dropped_citations, timings_ms, refused, policy, searches, truncated,
        dropped_passages, cached, support."""
        return self.model_dump()
