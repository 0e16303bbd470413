"""Quotas of API keys in memory (`agent.core.quotas`): requests per minute, tokens per UTC day, a key's own limits
over the defaults, the meter of a request, the bounded `key` label of the metrics."""

from __future__ import annotations

import asyncio
from datetime import UTC, date, datetime

import pytest
from prometheus_client import CollectorRegistry

from agent.config.settings import Settings
from agent.core.errors import QuotaExceededError
from agent.core.quotas import (
    OTHER_KEYS,
    InMemoryUsage,
    KeyLabels,
    QuotaMetrics,
    Quotas,
    meter_answer,
    metering,
    seconds_to_next_utc_day,
    utc_day,
)
from agent.core.results import AskResult, TokenUsage
from tools.records import ApiKey, Usage

NOON = datetime(2026, 3, 1, 12, 0, tzinfo=UTC).timestamp()


def key(key_id: int = 1, rpm: int | None = None, tpd: int | None = None) -> ApiKey:
    return ApiKey(key_id, f"k{key_id}", ("default",), datetime.now(UTC), None, rpm, tpd)


def quotas(registry: CollectorRegistry | None = None, clock: float = NOON, **settings: object) -> Quotas:
    return Quotas(
        Settings.model_validate(settings),
        InMemoryUsage(),
        QuotaMetrics.create(registry or CollectorRegistry()),
        clock=lambda: clock,
    )


def refusal(limit: str, key_id: int, registry: CollectorRegistry) -> float:
    value = registry.get_sample_value("rag_key_quota_refusals_total", {"key": str(key_id), "limit": limit})
    return value or 0.0


async def test_a_key_over_its_requests_per_minute_is_refused_with_a_retry_after_within_the_minute() -> None:
    registry = CollectorRegistry()
    q = quotas(registry, key_requests_per_minute=3)
    for _ in range(3):
        await q.check(key())
    with pytest.raises(QuotaExceededError) as refused:
        await q.check(key())
    assert refused.value.limit == "requests_per_minute" and 1 <= refused.value.retry_after_s <= 60
    assert refused.value.kind == "quota_exceeded"
    await q.check(key(2))  # another key has its own window
    assert refusal("requests_per_minute", 1, registry) == 1
    assert registry.get_sample_value("rag_key_requests_total", {"key": "1"}) == 3


async def test_a_key_s_own_limits_win_over_the_defaults_and_none_is_unlimited() -> None:
    q = quotas(key_requests_per_minute=1, key_tokens_per_day=10)
    assert q.limits_of(key()) == (1, 10)
    assert q.limits_of(key(rpm=5, tpd=7)) == (5, 7)
    assert quotas().limits_of(key()) == (None, None)
    for _ in range(50):
        await quotas().check(key())
    own = key(rpm=2)
    await q.check(own)
    await q.check(own)
    with pytest.raises(QuotaExceededError):
        await q.check(own)


async def test_the_day_s_token_budget_refuses_the_request_after_the_one_that_reached_it() -> None:
    registry = CollectorRegistry()
    q = quotas(registry, key_tokens_per_day=100)
    await q.check(key())
    await q.record(key(), Usage(1, 60, 30))
    await q.check(key())  # 90 < 100: still served (the answer that crosses the budget is finished)
    await q.record(key(), Usage(1, 5, 10))
    with pytest.raises(QuotaExceededError) as refused:
        await q.check(key())
    assert refused.value.limit == "tokens_per_day"
    assert refused.value.retry_after_s == pytest.approx(12 * 3600)
    assert "105 of its 100" in str(refused.value)
    assert refusal("tokens_per_day", 1, registry) == 1
    assert registry.get_sample_value("rag_key_tokens_total", {"key": "1", "kind": "prompt"}) == 65
    assert registry.get_sample_value("rag_key_tokens_total", {"key": "1", "kind": "completion"}) == 40
    rows = await q.usage.report(date(2026, 3, 1))
    assert [(r.key_id, r.day, r.usage) for r in rows] == [(1, date(2026, 3, 1), Usage(2, 65, 40))]


async def test_tokens_another_process_recorded_count_once_the_cache_expires() -> None:
    now = [NOON]
    usage = InMemoryUsage()
    q = Quotas(
        Settings(key_tokens_per_day=10, api_keys_cache_s=5),
        usage,
        QuotaMetrics.create(CollectorRegistry()),
        clock=lambda: now[0],
    )
    await q.check(key())
    await usage.record(1, utc_day(NOON), Usage(1, 20, 0))  # written by another process
    await q.check(key())  # the cached 0 is trusted for API_KEYS_CACHE_S
    now[0] += 5
    with pytest.raises(QuotaExceededError):
        await q.check(key())


def test_seconds_to_the_next_utc_midnight() -> None:
    assert seconds_to_next_utc_day(NOON) == 12 * 3600
    assert seconds_to_next_utc_day(datetime(2026, 3, 1, tzinfo=UTC).timestamp()) == 24 * 3600


def test_the_key_label_is_capped_then_other() -> None:
    labels = KeyLabels(cap=2)
    assert [labels(7), labels(8), labels(9), labels(7), labels(10)] == ["7", "8", OTHER_KEYS, "7", OTHER_KEYS]


async def test_the_meter_adds_every_answer_of_the_request_and_of_its_tasks() -> None:
    def result(prompt: int, completion: int) -> AskResult:
        return AskResult(
            answer="a",
            citations=[],
            timings_ms={"embed": 2.0, "llm": 10.0, "total": 15.0},
            usage=TokenUsage(input_tokens=prompt, output_tokens=completion, requests=1),
        )

    async def in_a_task() -> None:
        meter_answer(result(50, 5))

    meter_answer(result(1, 1))  # no meter open: nothing happens
    with metering() as used:
        meter_answer(result(100, 20))
        await asyncio.create_task(in_a_task())
    assert used == Usage(0, 150, 25, 4.0, 20.0)


async def test_answers_in_progress_reserve_their_most_until_their_usage_is_recorded() -> None:
    registry = CollectorRegistry()
    q = quotas(registry, key_tokens_per_day=1000, answer_token_budget=600)
    first = await q.admit(key())
    second = await q.admit(key())  # 600 + 400: the day is held
    assert (first.tokens, second.tokens) == (600, 400)
    with pytest.raises(QuotaExceededError) as refused:
        await q.admit(key())
    assert refused.value.limit == "tokens_per_day" and refused.value.retry_after_s == 180.0
    assert "answers in progress" in str(refused.value) and refusal("tokens_per_day", 1, registry) == 1
    await q.record(key(), Usage(1, 100, 50), first)  # 150 used in place of 600 held
    third = await q.admit(key())
    assert third.tokens == 1000 - 150 - 400
    q.release(second)
    q.release(second)  # once only
    assert (await q.admit(key())).tokens == 1000 - 150 - 450
    unlimited = quotas()
    assert (await unlimited.admit(key())).tokens == 0
