"""`InMemoryFeedback`: the `tools.feedback.FeedbackLog` of tests and of apps built without Postgres (a
`agent.core.wiring.Services` made by hand); the same behaviour as `tools.store.feedback.PostgresFeedback`, kept in one
process' memory (no corpus versions: `AnswerRecord.corpus_version` stays as given)."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, date, datetime, timedelta

from tools.access import UNRESTRICTED, Access
from tools.feedback import AnswerRecord, DayCount, FeedbackQuery, Rated, Rating, matches
from tools.records import cites_readable


class InMemoryFeedback:
    """Records and ratings in dicts; safe within one event loop (no method awaits between its reads and writes)."""

    def __init__(self) -> None:
        self.records: dict[str, AnswerRecord] = {}
        self.ratings: dict[str, Rated] = {}
        self.chunk_groups: dict[str, tuple[str, ...]] = {}
        """chunk id -> the groups of its document, for the chunks records name (the store's `chunks.groups`); a
        chunk absent here is readable by everyone (public, or deleted since)."""

    def _visible(self, answer_id: str, owner: str | None, access: Access = UNRESTRICTED) -> AnswerRecord | None:
        record = self.records.get(answer_id)
        if record is None or (owner is not None and record.owner != owner) or not self._readable(record, access):
            return None
        return record

    def _readable(self, record: AnswerRecord, access: Access) -> bool:
        """Whether `access` may read every passage `record` holds (the store's `rag_citations_readable`)."""
        return cites_readable([*record.retrieved, *record.cited], self.chunk_groups, access)

    async def remember(self, record: AnswerRecord, retention_days: int) -> None:
        """Store `record` (an id stored already is ignored); drop records older than `retention_days`."""
        now = datetime.now(UTC)
        if record.answer_id not in self.records:
            self.records[record.answer_id] = record.model_copy(update={"created_at": record.created_at or now})
        cutoff = now - timedelta(days=retention_days)
        for old in [k for k, r in self.records.items() if r.created_at is not None and r.created_at < cutoff]:
            self.records.pop(old)
            self.ratings.pop(old, None)

    async def rate(
        self, answer_id: str, owner: str | None, rating: Rating, comment: str | None, right_source: str | None
    ) -> Rated | None:
        """Rate the owner's answer; a None comment or source keeps the earlier rating's."""
        record = self._visible(answer_id, owner)
        if record is None:
            return None
        earlier = self.ratings.get(answer_id)
        if earlier is not None:
            comment = comment if comment is not None else earlier.comment
            right_source = right_source if right_source is not None else earlier.right_source
        rated = Rated(
            answer_id=answer_id,
            rating=rating,
            comment=comment,
            right_source=right_source,
            rated_at=datetime.now(UTC),
            record=record,
        )
        self.ratings[answer_id] = rated
        return rated

    async def get(self, answer_id: str, owner: str | None, *, access: Access = UNRESTRICTED) -> Rated | None:
        return self.ratings.get(answer_id) if self._visible(answer_id, owner, access) is not None else None

    async def record(self, answer_id: str, owner: str | None, *, access: Access = UNRESTRICTED) -> AnswerRecord | None:
        return self._visible(answer_id, owner, access)

    async def find(self, query: FeedbackQuery) -> list[Rated]:
        found = [r for r in self.ratings.values() if matches(r, query) and self._readable(r.record, query.access)]
        found.sort(key=lambda r: (r.rated_at, r.answer_id), reverse=True)
        return found[: query.limit]

    async def delete(self, answer_id: str, owner: str | None) -> bool:
        if self._visible(answer_id, owner) is None:
            return False
        self.records.pop(answer_id)
        self.ratings.pop(answer_id, None)
        return True

    async def counts(self, owner: str | None, since: date) -> list[DayCount]:
        days: dict[date, dict[str, int]] = defaultdict(lambda: {"up": 0, "down": 0})
        for rated in await self.find(FeedbackQuery(owner=owner, limit=len(self.ratings) or 1)):
            day = rated.rated_at.astimezone(UTC).date()
            if day >= since:
                days[day][rated.rating] += 1
        return [DayCount(day, v["up"], v["down"]) for day, v in sorted(days.items())]
