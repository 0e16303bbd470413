"""Feedback on answers: every answer is remembered with what it rests on, and the key that asked may rate it (docs/
feedback.md).

- `record_of`: the `tools.feedback.AnswerRecord` of an answer: question, searches, retrieved passages with scores,
  cited passages, support labels, scope, LLM model, policy, top_k, prompts' version and the answer-changing settings
  (`agent.core.answer_cache.answer_settings`); the Postgres store adds the corpus version.
- `FeedbackDesk`: remembers answers in the background (a failing or slow write never slows or fails the answer: it
  is logged), rates them, lists, counts and deletes ratings, scoped by owner (the API key id that asked; None: the
  admin, who sees all). Counts `rag_feedback_total{rating}` (prometheus-client, the process's default registry).

An answer id may be given as the answer's UUID or as the OpenAI-compatible route's completion id
(`chatcmpl-<answer id>`); `answer_id_of` normalises both.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, date, datetime
from uuid import UUID

from prometheus_client import REGISTRY, Counter

from agent.config.settings import Settings
from agent.core.answer import AnswerRequest
from agent.core.answer_cache import PROMPT_VERSION, answer_settings
from agent.core.errors import AgentError, InputError
from agent.core.results import AskResult
from agent.core.wiring import settings_store
from tools.access import UNRESTRICTED, Access
from tools.feedback import (
    MAX_COMMENT_CHARS,
    MAX_LIST,
    MAX_SOURCE_CHARS,
    RATINGS,
    AnswerRecord,
    DayCount,
    FeedbackLog,
    FeedbackQuery,
    Rated,
    Rating,
)
from tools.scope import DEFAULT_COLLECTION
from tools.store import VectorStore
from tools.store.feedback import PostgresFeedback

log = logging.getLogger(__name__)

COMPLETION_PREFIX = "chatcmpl-"
"""The OpenAI-compatible route's completion ids are `chatcmpl-<answer id>`."""

FEEDBACK_TOTAL = Counter(
    "rag_feedback", "Ratings of answers received, by rating (up, down).", ["rating"], registry=REGISTRY
)
for _rating in RATINGS:
    FEEDBACK_TOTAL.labels(_rating)

DRAIN_S = 5.0
"""Longest wait for the background writes of answer records when the app closes, seconds."""


class AnswerNotFoundError(AgentError):
    """No answer record with this id for the caller (never answered, expired, deleted, feedback off, or asked with
    another API key); HTTP 404."""

    kind = "answer_not_found"

    def __init__(self, answer_id: str) -> None:
        self.answer_id = answer_id
        super().__init__(
            f"answer {answer_id} is not known: rate an answer's `answer_id` (or its completion id) from this API key, "
            "within FEEDBACK_RETENTION_DAYS"
        )


def answer_id_of(value: str, name: str = "answer_id") -> str:
    """The answer id (a UUID as text, lower case, with dashes) of `value`: an answer id, or a completion id
    `chatcmpl-<answer id>`.

    Raises:
        InputError: neither (the message names `name`).
    """
    raw = value.strip().removeprefix(COMPLETION_PREFIX)
    try:
        return str(UUID(raw))
    except ValueError:
        raise InputError(
            f"{name}={value[:80]!r}; expected an answer id (a UUID) or a completion id chatcmpl-<uuid>"
        ) from None


def check_text(value: str | None, name: str, limit: int) -> str | None:
    """`value` stripped (None or blank: None), or InputError naming `name` for a NUL character or more than `limit`
    characters."""
    if value is None:
        return None
    if "\x00" in value:
        raise InputError(f"{name} holds a NUL character (\\u0000); expected text without NUL")
    if len(value) > limit:
        raise InputError(f"{name} has {len(value)} characters; expected at most {limit}")
    return value.strip() or None


def parse_since(raw: str | None, option: str = "--since") -> datetime | None:
    """A `since` filter given as text: an ISO 8601 date or time, naive ones in UTC; None for None.

    Raises:
        InputError: not ISO 8601 (the message names `option`).
    """
    if raw is None:
        return None
    try:
        parsed = datetime.fromisoformat(raw)
    except ValueError:
        raise InputError(f"{option} {raw!r}; expected an ISO 8601 date or time, e.g. 2026-12-01") from None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def _collection_of(chunk_id: str) -> str:
    """The collection in a chunk id (`<collection>::<doc_id>#<n>` outside `default`)."""
    head, sep, _ = chunk_id.partition("::")
    return head if sep else DEFAULT_COLLECTION


def record_of(request: AnswerRequest, result: AskResult, settings: Settings) -> AnswerRecord:
    """What is remembered of `result`, answered for `request` (module docstring)."""
    scope = request.scope
    scoped = scope is not None and scope.collections is not None
    retrieved = [p.model_dump(mode="json") for p in result.retrieved]
    if scoped and scope is not None and scope.collections is not None:
        collections = sorted(set(scope.collections))
    else:
        collections = sorted({_collection_of(p.chunk_id) for p in result.retrieved})
    return AnswerRecord(
        answer_id=result.answer_id,
        owner=request.owner,
        question=request.question,
        answer=result.answer,
        searches=list(result.searches),
        retrieved=retrieved,
        cited=[
            {"chunk_id": c.chunk_id, "doc_id": c.doc_id, "score": c.score, "passage": c.passage, "title": c.title}
            for c in result.citations
        ],
        support=None if result.support is None else result.support.model_dump(mode="json"),
        refused=result.refused,
        cached=result.cached,
        truncated=result.truncated,
        collections=collections,
        scoped=scoped,
        filter=dict(scope.to_filter()) if scope is not None else {},
        llm_model=settings.llm_model,
        policy=result.policy,
        top_k=request.top_k or settings.top_k,
        prompts=PROMPT_VERSION,
        settings=answer_settings(settings),
    )


class FeedbackDesk:
    """Records of answers and their ratings for one app (module docstring).

    Args:
        log: where they are kept (`tools.store.feedback.PostgresFeedback`, `tools.in_memory_feedback.InMemoryFeedback`).
        settings: the app's settings (`FEEDBACK_RETENTION_DAYS`, what a record holds).
    """

    def __init__(self, log: FeedbackLog, settings: Settings) -> None:
        self.log = log
        self.settings = settings
        self._pending: dict[str, asyncio.Task[None]] = {}

    @property
    def enabled(self) -> bool:
        """False with `FEEDBACK_RETENTION_DAYS=0`: nothing is remembered, nothing can be rated."""
        return self.settings.feedback_retention_days > 0

    def remember(self, request: AnswerRequest, result: AskResult) -> None:
        """Write the record of `result` in the background; a failure is logged (the answer is not affected)."""
        if not self.enabled:
            return
        try:
            record = record_of(request, result, self.settings)
        except Exception:  # a record is best-effort: the answer is good without it
            log.warning("could not build the feedback record of answer %s", result.answer_id, exc_info=True)
            return
        task = asyncio.ensure_future(self._write(record))
        self._pending[record.answer_id] = task
        task.add_done_callback(lambda _: self._pending.pop(record.answer_id, None))

    async def _write(self, record: AnswerRecord) -> None:
        try:
            await self.log.remember(record, self.settings.feedback_retention_days)
        except Exception:  # best-effort, logged
            log.warning("could not store the feedback record of answer %s", record.answer_id, exc_info=True)

    async def settled(self, answer_id: str | None = None) -> None:
        """Wait for the background write of `answer_id`'s record (None: every pending one, at most `DRAIN_S`)."""
        if answer_id is not None:
            task = self._pending.get(answer_id)
            if task is not None:
                await asyncio.shield(task)
            return
        pending = list(self._pending.values())
        if pending:
            await asyncio.wait(pending, timeout=DRAIN_S)

    async def rate(
        self,
        answer_id: str,
        rating: Rating,
        *,
        comment: str | None = None,
        right_source: str | None = None,
        owner: str | None = None,
    ) -> Rated:
        """Rate the owner's answer `answer_id` (or completion id): a second rating replaces the first, keeping its
        comment and right source unless new ones are given.

        Raises:
            InputError: a bad id or rating, a comment over `MAX_COMMENT_CHARS` or a source over `MAX_SOURCE_CHARS`
                characters, or a NUL character in either.
            AnswerNotFoundError: no such answer for `owner` (None: the admin, any answer).
            StoreError (`tools.store.errors`): the store failed.
        """
        answer_id = answer_id_of(answer_id)
        if rating not in RATINGS:
            raise InputError(f"rating={rating!r}; expected up or down")
        comment = check_text(comment, "comment", MAX_COMMENT_CHARS)
        right_source = check_text(right_source, "right_source", MAX_SOURCE_CHARS)
        await self.settled(answer_id)
        rated = await self.log.rate(answer_id, owner, rating, comment, right_source)
        if rated is None:
            raise AnswerNotFoundError(answer_id)
        FEEDBACK_TOTAL.labels(rating).inc()
        return rated

    async def rating(self, answer_id: str, owner: str | None = None, *, access: Access = UNRESTRICTED) -> Rated:
        """The rating of the owner's answer. Raises InputError (bad id), AnswerNotFoundError (none, or its record
        holds a passage `access` may not read)."""
        answer_id = answer_id_of(answer_id)
        await self.settled(answer_id)
        rated = await self.log.get(answer_id, owner, access=access)
        if rated is None:
            raise AnswerNotFoundError(answer_id)
        return rated

    async def record(self, answer_id: str, owner: str | None = None, *, access: Access = UNRESTRICTED) -> AnswerRecord:
        """The owner's record of an answer, rated or not. Raises InputError (bad id), AnswerNotFoundError (none, or
        it holds a passage `access` may not read)."""
        answer_id = answer_id_of(answer_id)
        await self.settled(answer_id)
        found = await self.log.record(answer_id, owner, access=access)
        if found is None:
            raise AnswerNotFoundError(answer_id)
        return found

    async def find(
        self,
        owner: str | None = None,
        rating: Rating | None = None,
        since: datetime | None = None,
        collections: Sequence[str] | None = None,
        limit: int = 1000,
        *,
        access: Access = UNRESTRICTED,
    ) -> list[Rated]:
        """Ratings of `owner`'s answers (None: all), most recent first, filtered by rating, time and collection
        (several collections: any of them); only those whose records hold no passage `access` may not read.

        Raises:
            InputError: `limit` outside 1..`MAX_LIST`.
        """
        if not 1 <= limit <= MAX_LIST:
            raise InputError(f"limit={limit}; expected 1..{MAX_LIST}")
        if not collections:
            return await self.log.find(FeedbackQuery(owner, rating, since, None, limit, access))
        found: dict[str, Rated] = {}
        for name in collections:
            for rated in await self.log.find(FeedbackQuery(owner, rating, since, name, limit, access)):
                found[rated.answer_id] = rated
        return sorted(found.values(), key=lambda r: (r.rated_at, r.answer_id), reverse=True)[:limit]

    async def delete(self, answer_id: str, owner: str | None = None) -> None:
        """Delete the owner's answer record and its rating.

        Raises:
            InputError: a bad id. AnswerNotFoundError: none for `owner`.
        """
        answer_id = answer_id_of(answer_id)
        await self.settled(answer_id)
        if not await self.log.delete(answer_id, owner):
            raise AnswerNotFoundError(answer_id)

    async def counts(self, owner: str | None = None, since: date | None = None) -> list[DayCount]:
        """Ratings per UTC day from `since` (default: every day kept), oldest first."""
        return await self.log.counts(owner, since or date.min)


@asynccontextmanager
async def stored_feedback(settings: Settings) -> AsyncIterator[tuple[FeedbackDesk, VectorStore]]:
    """The feedback of the configured database (`rag feedback`, `rag eval export-feedback`) and its store (for the
    documents' texts), opened without Triton or the LLM.

    Raises:
        StoreError (`tools.store.errors`): Postgres is unreachable.
    """
    async with settings_store(settings) as store:
        yield FeedbackDesk(PostgresFeedback(store), settings), store
