"""`agent.http.loop_lag`: a loop blocked for 0.3 s shows as one late wake-up in the histogram. No server; the
blocking call makes the lag, so a slower machine only makes it larger."""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest
from prometheus_client import CollectorRegistry

from agent.http.loop_lag import lag_histogram, watch_loop_lag


def late_samples(registry: CollectorRegistry, bound: str) -> float:
    """Samples of `rag_event_loop_lag_seconds` later than `bound` seconds."""
    total = registry.get_sample_value("rag_event_loop_lag_seconds_count") or 0.0
    within = registry.get_sample_value("rag_event_loop_lag_seconds_bucket", {"le": bound}) or 0.0
    return total - within


async def test_a_blocked_loop_is_recorded_as_lag() -> None:
    registry = CollectorRegistry()
    watcher = asyncio.create_task(watch_loop_lag(lag_histogram(registry), interval_s=0.01))
    while not registry.get_sample_value("rag_event_loop_lag_seconds_count"):  # noqa: ASYNC110 - nothing signals it
        await asyncio.sleep(0.01)
    before = late_samples(registry, "0.25")
    time.sleep(0.3)  # noqa: ASYNC251 - blocks the loop on purpose: the watcher wakes at least 0.29 s late
    await asyncio.sleep(0.05)
    watcher.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await watcher
    assert late_samples(registry, "0.25") >= before + 1


async def test_the_interval_must_be_positive() -> None:
    with pytest.raises(ValueError, match="interval_s=0"):
        await watch_loop_lag(lag_histogram(CollectorRegistry()), interval_s=0)
