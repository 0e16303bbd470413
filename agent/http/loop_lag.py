"""Event-loop lag of the serving process, as a Prometheus histogram.

Every request, stream and refusal of `rag serve` runs on one asyncio event loop; when that loop is busy (or the
process gets no CPU: on the local machine the LLM engine shares its two cores), everything waits, refusals included.
`watch_loop_lag` sleeps `interval_s` again and again and records how late each wake-up came
(`rag_event_loop_lag_seconds`, served at `/metrics`), which is the wait any callback ready at that moment had.
The same measure as Node.js' `monitorEventLoopDelay` and the `event_loop_lag` of aiohttp's and uvloop's users.
"""

from __future__ import annotations

import asyncio

from prometheus_client import REGISTRY, CollectorRegistry, Histogram

LAG_BUCKETS_S = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
"""Bucket bounds of the lag histogram, seconds (1 ms to 5 s; the refusal target is 0.25 s here, 0.1 s in
production)."""


def lag_histogram(registry: CollectorRegistry = REGISTRY) -> Histogram:
    """`rag_event_loop_lag_seconds` in `registry`.

    Raises:
        ValueError: it is registered there already (prometheus-client's duplicate check).
    """
    return Histogram(
        "rag_event_loop_lag_seconds",
        "How late the event loop of rag serve woke a sleeper, seconds (sampled every 0.1 s).",
        buckets=LAG_BUCKETS_S,
        registry=registry,
    )


LOOP_LAG = lag_histogram()
"""The process's loop-lag histogram (default registry)."""


async def watch_loop_lag(histogram: Histogram = LOOP_LAG, interval_s: float = 0.1) -> None:
    """Sleep `interval_s` (seconds, > 0) in a loop and observe each wake-up's delay past it, seconds, into
    `histogram`; runs until cancelled.

    Raises:
        ValueError: `interval_s` is not above 0.
    """
    if not interval_s > 0:
        raise ValueError(f"interval_s={interval_s}: expected more than 0 seconds")
    loop = asyncio.get_running_loop()
    while True:
        start = loop.time()
        await asyncio.sleep(interval_s)
        histogram.observe(max(0.0, loop.time() - start - interval_s))
