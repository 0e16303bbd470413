"""`tools.feedback.FeedbackLog`: the in-memory double and the Postgres store answer alike (records, ratings that
replace and merge, owners, filters, counts per day, deletes, retention)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from uuid import uuid4

from tests.contracts.ports import stored_chunk
from tools.access import NOBODY, UNRESTRICTED, caller_access
from tools.feedback import AnswerRecord, FeedbackLog, FeedbackQuery

PASSAGE = {"chunk_id": "b12#0", "doc_id": "b12", "score": 0.5, "passage": 1, "title": "Vitamin B12"}


def record(owner: str | None = None, collections: tuple[str, ...] = ("default",), **update: object) -> AnswerRecord:
    fields: dict[str, object] = {
        "answer_id": str(uuid4()),
        "owner": owner,
        "question": "What raises homocysteine?",
        "answer": "B12 deficiency [1].",
        "searches": ["What raises homocysteine?"],
        "retrieved": [PASSAGE, PASSAGE | {"chunk_id": "folate#0", "doc_id": "folate", "passage": 2}],
        "cited": [PASSAGE],
        "support": {"mode": "flag", "sentences": [{"index": 0, "label": "SUPPORT"}]},
        "collections": list(collections),
        "scoped": owner is not None,
        "llm_model": "scripted",
        "policy": "always",
        "top_k": 5,
        "settings": {"retrieval_mode": "hybrid"},
    }
    return AnswerRecord.model_validate(fields | update)


async def test_a_rating_keeps_the_record_it_rates_and_a_second_one_replaces_it(feedback_log: FeedbackLog) -> None:
    answer = record()
    await feedback_log.remember(answer, 90)
    await feedback_log.remember(answer.model_copy(update={"question": "changed"}), 90)  # the first one stays
    assert await feedback_log.get(answer.answer_id, None) is None  # not rated yet
    stored = await feedback_log.record(answer.answer_id, None)
    assert stored is not None and stored.question == "What raises homocysteine?" and stored.created_at is not None
    rated = await feedback_log.rate(answer.answer_id, None, "down", "wrong vitamin <b>", None)
    assert rated is not None and (rated.rating, rated.comment, rated.right_source) == (
        "down",
        "wrong vitamin <b>",
        None,
    )
    assert rated.record.cited == [PASSAGE] and rated.record.retrieved[1]["doc_id"] == "folate"
    assert rated.record.support == answer.support and rated.record.settings == {"retrieval_mode": "hybrid"}
    again = await feedback_log.rate(answer.answer_id, None, "up", None, "folate")
    assert again is not None and (again.rating, again.comment, again.right_source) == (
        "up",
        "wrong vitamin <b>",
        "folate",
    )
    assert [r.answer_id for r in await feedback_log.find(FeedbackQuery())] == [answer.answer_id]


async def test_a_key_sees_and_rates_only_its_own_answers(feedback_log: FeedbackLog) -> None:
    mine, theirs = record(owner="1", collections=("a",)), record(owner="2", collections=("b",))
    for r in (mine, theirs):
        await feedback_log.remember(r, 90)
    assert await feedback_log.rate(theirs.answer_id, "1", "up", None, None) is None
    assert await feedback_log.rate(str(uuid4()), "1", "up", None, None) is None
    assert await feedback_log.rate(mine.answer_id, "1", "up", None, None) is not None
    assert await feedback_log.rate(theirs.answer_id, None, "down", None, None) is not None  # the admin
    assert (
        await feedback_log.get(theirs.answer_id, "1") is None
        and await feedback_log.record(theirs.answer_id, "1") is None
    )
    assert [r.answer_id for r in await feedback_log.find(FeedbackQuery(owner="1"))] == [mine.answer_id]
    assert {r.answer_id for r in await feedback_log.find(FeedbackQuery())} == {mine.answer_id, theirs.answer_id}
    assert not await feedback_log.delete(theirs.answer_id, "1")
    assert await feedback_log.get(theirs.answer_id, None) is not None


async def test_filters_counts_and_deletes(feedback_log: FeedbackLog) -> None:
    up, down, other = record(collections=("a",)), record(collections=("a",)), record(collections=("b",))
    for r in (up, down, other):
        await feedback_log.remember(r, 90)
    await feedback_log.rate(up.answer_id, None, "up", None, None)
    await feedback_log.rate(down.answer_id, None, "down", None, None)
    await feedback_log.rate(other.answer_id, None, "down", None, None)
    assert [r.answer_id for r in await feedback_log.find(FeedbackQuery(rating="up"))] == [up.answer_id]
    assert {r.answer_id for r in await feedback_log.find(FeedbackQuery(collection="a"))} == {
        up.answer_id,
        down.answer_id,
    }
    assert await feedback_log.find(FeedbackQuery(since=datetime.now(UTC) + timedelta(hours=1))) == []
    assert len(await feedback_log.find(FeedbackQuery(limit=2))) == 2
    today = datetime.now(UTC).date()
    counts = await feedback_log.counts(None, today - timedelta(days=1))
    assert [(c.day, c.up, c.down) for c in counts] == [(today, 1, 2)]
    assert counts[0].to_json() == {"day": today.isoformat(), "up": 1, "down": 2, "total": 3}
    assert await feedback_log.delete(down.answer_id, None)
    assert await feedback_log.record(down.answer_id, None) is None and not await feedback_log.delete(
        down.answer_id, None
    )
    assert [(c.up, c.down) for c in await feedback_log.counts(None, today)] == [(1, 1)]


async def test_records_older_than_the_retention_go_with_their_ratings(feedback_log: FeedbackLog) -> None:
    old = record()
    await feedback_log.remember(old, 1)
    await feedback_log.rate(old.answer_id, None, "up", None, None)
    if hasattr(feedback_log, "records"):  # the double: age it by hand
        feedback_log.records[old.answer_id] = old.model_copy(
            update={"created_at": datetime.now(UTC) - timedelta(days=2)}
        )
    else:
        pool = feedback_log.vectors.pool  # type: ignore[attr-defined]
        await pool.execute(
            "UPDATE answer_records SET created_at = now() - interval '2 days' WHERE answer_id = $1::uuid",
            old.answer_id,
        )
    await feedback_log.remember(record(), 1)  # a write expires what is past the retention
    assert await feedback_log.record(old.answer_id, None) is None and await feedback_log.find(FeedbackQuery()) == []


async def test_a_record_holding_a_passage_the_reader_may_not_read_is_not_returned(feedback_log: FeedbackLog) -> None:
    secret = await stored_chunk(feedback_log, "secret", ["eng"])
    hidden = record(retrieved=[PASSAGE, PASSAGE | {"chunk_id": secret, "doc_id": "secret", "passage": 2}])
    shown = record(cited=[PASSAGE | {"chunk_id": "gone#0"}])  # a chunk deleted since hides nothing
    for answer in (hidden, shown):
        await feedback_log.remember(answer, 90)
        await feedback_log.rate(answer.answer_id, None, "up", None, None)
    for access, visible in (
        (NOBODY, {shown.answer_id}),
        (caller_access(["ops"]), {shown.answer_id}),
        (caller_access(["eng"]), {shown.answer_id, hidden.answer_id}),
        (UNRESTRICTED, {shown.answer_id, hidden.answer_id}),
    ):
        found = await feedback_log.find(FeedbackQuery(access=access))
        assert {r.answer_id for r in found} == visible
        assert (await feedback_log.get(hidden.answer_id, None, access=access) is not None) == (
            hidden.answer_id in visible
        )
        assert (await feedback_log.record(hidden.answer_id, None, access=access) is not None) == (
            hidden.answer_id in visible
        )
        assert await feedback_log.record(shown.answer_id, None, access=access) is not None
