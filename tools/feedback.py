"""The vocabulary of answer feedback, shared by its stores: what the service remembers of each answer
(`AnswerRecord`), a rating of it (`Rated`), the filters of a listing (`FeedbackQuery`), and the protocol every store
implements (`FeedbackLog`: `tools.store.feedback.PostgresFeedback`, `tools.in_memory_feedback.InMemoryFeedback`).

Ownership: an answer belongs to the API key that asked (`owner`, the key id as text; None: no key or the admin). Every
read and write takes an `owner`: a key's id sees and rates only that key's answers (another key's answer is not found,
exactly like a missing one); None is the admin, who sees all.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime
from typing import Any, Literal, Protocol

from pydantic import BaseModel, Field

from tools.access import UNRESTRICTED, Access

Rating = Literal["up", "down"]
RATINGS: tuple[Rating, ...] = ("up", "down")

MAX_COMMENT_CHARS = 2000
"""Longest comment a rating may carry, characters (the HTTP API's and the CLI's bound)."""
MAX_SOURCE_CHARS = 1000
"""Longest "right source" (a document or chunk id), characters."""
MAX_LIST = 10_000
"""Most ratings one listing returns."""


class AnswerRecord(BaseModel):
    """What the service answered, kept so that a rating of it can be turned into a test (`agent.core.feedback`)."""

    answer_id: str = Field(description="The answer's id (`AskResult.answer_id`).")
    owner: str | None = Field(default=None, description="The API key id that asked; None: no key or the admin.")
    created_at: datetime | None = Field(default=None, description="When it was answered (set by the store).")
    question: str = Field(description="The question as asked.")
    answer: str = Field(default="", description="The answer's text.")
    searches: list[str] = Field(default_factory=list, description="Retrieval queries actually searched, in order.")
    retrieved: list[dict[str, Any]] = Field(
        default_factory=list, description="Passages retrieved, cited or not: chunk_id, doc_id, score, passage, title."
    )
    cited: list[dict[str, Any]] = Field(
        default_factory=list, description="Cited passages: chunk_id, doc_id, score, passage, title."
    )
    support: dict[str, Any] | None = Field(
        default=None, description="The per-sentence support labels (`SupportReport`); None when not checked."
    )
    refused: bool = False
    cached: bool = False
    truncated: bool = False
    collections: list[str] = Field(
        default_factory=list,
        description="Collections the answer covered: its scope's, or (unscoped) those of its retrieved passages.",
    )
    scoped: bool = Field(default=False, description="True when the request named collections or a key narrowed it.")
    filter: dict[str, Any] = Field(default_factory=dict, description="The scope's metadata filter (`tools.scope`).")
    corpus_version: dict[str, int] | None = Field(
        default=None,
        description="Version of each collection of the scope when it was answered (`collection_versions`, set by "
        "the Postgres store); None where unknown.",
    )
    llm_model: str = ""
    policy: str = ""
    top_k: int = 0
    prompts: str = Field(default="", description="The prompts' version (`agent.core.answer_cache.PROMPT_VERSION`).")
    settings: dict[str, Any] = Field(
        default_factory=dict, description="The answer-changing settings (`agent.core.answer_cache.answer_settings`)."
    )


class Rated(BaseModel):
    """A rating and the answer it rates."""

    answer_id: str
    rating: Rating
    comment: str | None = None
    right_source: str | None = Field(default=None, description="The document or chunk id that should have answered.")
    rated_at: datetime
    record: AnswerRecord


@dataclass(frozen=True)
class FeedbackQuery:
    """Filters of a listing: the owner's ratings only (None: every owner), of one rating, rated on or after `since`
    (a UTC time), over one collection; most recent first, at most `limit`; only records whose passages `access` may
    read (`tools.access`; `UNRESTRICTED`: all)."""

    owner: str | None = None
    rating: Rating | None = None
    since: datetime | None = None
    collection: str | None = None
    limit: int = 1000
    access: Access = UNRESTRICTED


@dataclass(frozen=True)
class DayCount:
    """Ratings of one UTC day by rating."""

    day: date
    up: int = 0
    down: int = 0

    def to_json(self) -> dict[str, object]:
        return {"day": self.day.isoformat(), "up": self.up, "down": self.down, "total": self.up + self.down}


class FeedbackLog(Protocol):
    """Where answer records and their ratings are kept (module docstring on `owner`)."""

    async def remember(self, record: AnswerRecord, retention_days: int) -> None:
        """Store `record` (a second one with the same id is ignored) and delete records (with their ratings) older
        than `retention_days`."""
        ...

    async def rate(
        self, answer_id: str, owner: str | None, rating: Rating, comment: str | None, right_source: str | None
    ) -> Rated | None:
        """Rate the answer (a second rating replaces the first; a None comment or source keeps the earlier one);
        None when the owner has no such answer."""
        ...

    async def get(self, answer_id: str, owner: str | None, *, access: Access = UNRESTRICTED) -> Rated | None:
        """The answer's rating; None when it is not rated, not the owner's, or its record holds a passage `access`
        may not read."""
        ...

    async def record(self, answer_id: str, owner: str | None, *, access: Access = UNRESTRICTED) -> AnswerRecord | None:
        """The owner's record of the answer, rated or not; None when there is none or it holds a passage `access`
        may not read."""
        ...

    async def find(self, query: FeedbackQuery) -> list[Rated]:
        """Ratings matching `query`, most recently rated first."""
        ...

    async def delete(self, answer_id: str, owner: str | None) -> bool:
        """Delete the answer's record and its rating; False when the owner has no such answer."""
        ...

    async def counts(self, owner: str | None, since: date) -> list[DayCount]:
        """Ratings per UTC day from `since`, oldest first (days without ratings left out)."""
        ...


def matches(rated: Rated, query: FeedbackQuery) -> bool:
    """Whether `rated` passes `query`'s filters (the in-memory store's test; Postgres does it in SQL)."""
    if query.owner is not None and rated.record.owner != query.owner:
        return False
    if query.rating is not None and rated.rating != query.rating:
        return False
    if query.since is not None and rated.rated_at < query.since:
        return False
    return query.collection is None or query.collection in rated.record.collections
