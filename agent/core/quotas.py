"""Quotas and usage of API keys: how many answer requests a key may make per minute and how many LLM tokens per UTC
day, checked before any work (`Quotas.check`), and what each answered request used, added up per key and day
(`Quotas.record`, the `key_usage` table of `tools.store.usage`).

- Requests per minute: a moving 60 s window of the `limits` package over its in-memory storage, so the count is per
  `rag serve` process: N processes behind a balancer let a key make up to N times its limit.
- Tokens per day: prompt + completion tokens of the key's `key_usage` row of today (UTC), read at most every
  `API_KEYS_CACHE_S` seconds per key; this process adds what it records to the value it holds, so its own answers
  count at once and other processes' within that time. A key is refused once it has reached its budget (the answer
  that crosses it is finished; the next one is refused).
- Answers in progress count too: a request let through (`Quotas.admit`) reserves the most its answer may use,
  `ANSWER_TOKEN_BUDGET` (at most what is left of the key's day), until its usage is recorded (`Quotas.record`, which
  puts the reported tokens in its place) or it ends without any (`Quotas.release`). So concurrent requests cannot
  all pass a budget they would overrun together: with 1,000 tokens left and a 16,000-token budget per answer, one
  answer runs at a time. Reservations are per process, like the request window.
- A key's own limits (`api_keys.requests_per_minute`, `tokens_per_day`) win over the settings' defaults
  (`KEY_REQUESTS_PER_MINUTE`, `KEY_TOKENS_PER_DAY`); None everywhere is unlimited. The admin key has no quota.
- The usage of one request is gathered by a meter (`metering`, a context variable the HTTP layer opens around the
  request) to which every answer of it adds its token usage and timings (`meter_answer`, called by `RagApp`).

Metrics (default registry, `METRICS`): `rag_key_requests_total{key}` (requests that passed the quotas),
`rag_key_tokens_total{key,kind}` (kind `prompt` / `completion`), `rag_key_quota_refusals_total{key,limit}` (limit
`requests_per_minute` / `tokens_per_day`). The `key` label is the key's id; at most `MAX_KEY_LABELS` distinct ids
get their own label, later ones share `other`, so the series stay bounded.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Protocol

from cachetools import TTLCache
from limits import RateLimitItemPerMinute, storage, strategies
from prometheus_client import REGISTRY, CollectorRegistry, Counter

from agent.config.settings import Settings
from agent.core.errors import QuotaExceededError
from agent.core.results import AskResult
from tools.records import ApiKey, Usage, UsageRow

MAX_KEY_LABELS = 100
"""Distinct key ids with a `key` label of their own in the metrics; later keys are counted under `other`."""
OTHER_KEYS = "other"

_METER: ContextVar[Usage | None] = ContextVar("rag_key_usage_meter", default=None)


@contextmanager
def metering() -> Iterator[Usage]:
    """Gather the usage of what runs inside (and of the tasks it starts): every `meter_answer` adds to the yielded
    `Usage` (its `requests` stays 0: the caller counts the request)."""
    used = Usage()
    token = _METER.set(used)
    try:
        yield used
    finally:
        _METER.reset(token)


def meter_answer(result: AskResult) -> None:
    """Add an answer's token usage and its `embed` / `llm` timings to the open meter (`metering`); nothing when none
    is open."""
    used = _METER.get()
    if used is None:
        return
    used.prompt_tokens += result.usage.input_tokens
    used.completion_tokens += result.usage.output_tokens
    used.embed_ms += result.timings_ms.get("embed", 0.0)
    used.llm_ms += result.timings_ms.get("llm", 0.0)


class UsageLog(Protocol):
    """Where the usage of keys is kept (`tools.store.usage.PostgresUsage`; `InMemoryUsage` for tests)."""

    async def record(self, key_id: int, day: date, used: Usage) -> None:
        """Add `used` to key `key_id`'s usage of `day`."""
        ...

    async def tokens_on(self, key_id: int, day: date) -> int:
        """Prompt + completion tokens of key `key_id` on `day`."""
        ...

    async def report(self, since: date, key_id: int | None = None) -> list[UsageRow]:
        """Every key's (or key `key_id`'s) usage per day from `since` on, by day then key id."""
        ...


@dataclass
class InMemoryUsage:
    """`PostgresUsage` in memory, for tests of the interfaces (names are the key ids as text)."""

    rows: dict[tuple[int, date], Usage] = field(default_factory=dict)

    async def record(self, key_id: int, day: date, used: Usage) -> None:
        """See `PostgresUsage.record`."""
        row = self.rows.setdefault((key_id, day), Usage())
        row.requests += used.requests
        row.prompt_tokens += used.prompt_tokens
        row.completion_tokens += used.completion_tokens
        row.embed_ms += used.embed_ms
        row.llm_ms += used.llm_ms

    async def tokens_on(self, key_id: int, day: date) -> int:
        """See `PostgresUsage.tokens_on`."""
        row = self.rows.get((key_id, day))
        return 0 if row is None else row.tokens

    async def report(self, since: date, key_id: int | None = None) -> list[UsageRow]:
        """See `PostgresUsage.report`."""
        return [
            UsageRow(k, str(k), d, u)
            for (k, d), u in sorted(self.rows.items(), key=lambda item: (item[0][1], item[0][0]))
            if d >= since and key_id in (None, k)
        ]


@dataclass
class Reservation:
    """Tokens held for one admitted request of key `key_id` on UTC `day` until its usage is recorded (`tokens`: 0
    for a key without a token budget)."""

    key_id: int
    day: date
    tokens: int = 0


class KeyLabels:
    """The `key` label of a key id: the id as text for the first `cap` distinct ids seen, `other` after."""

    def __init__(self, cap: int = MAX_KEY_LABELS) -> None:
        self.cap = cap
        self.seen: set[int] = set()

    def __call__(self, key_id: int) -> str:
        if key_id in self.seen:
            return str(key_id)
        if len(self.seen) < self.cap:
            self.seen.add(key_id)
            return str(key_id)
        return OTHER_KEYS


@dataclass(frozen=True)
class QuotaMetrics:
    """The per-key metrics of one registry (names in the module docstring)."""

    requests: Counter
    tokens: Counter
    refusals: Counter
    labels: KeyLabels

    @classmethod
    def create(cls, registry: CollectorRegistry, cap: int = MAX_KEY_LABELS) -> QuotaMetrics:
        """Register the three counters in `registry`.

        Raises:
            ValueError: they are registered there already (prometheus-client's duplicate check).
        """
        return cls(
            Counter(
                "rag_key_requests", "Answer requests of an API key that passed its quotas.", ["key"], registry=registry
            ),
            Counter(
                "rag_key_tokens",
                "LLM tokens of an API key's answers, by kind: prompt, completion.",
                ["key", "kind"],
                registry=registry,
            ),
            Counter(
                "rag_key_quota_refusals",
                "Requests refused for an API key's quota, by limit: requests_per_minute, tokens_per_day.",
                ["key", "limit"],
                registry=registry,
            ),
            KeyLabels(cap),
        )


METRICS = QuotaMetrics.create(REGISTRY)
"""The process's per-key metrics (default registry)."""


def utc_day(now_s: float) -> date:
    """The UTC date of a Unix time in seconds."""
    return datetime.fromtimestamp(now_s, UTC).date()


def seconds_to_next_utc_day(now_s: float) -> float:
    """Seconds from Unix time `now_s` to the next UTC midnight, > 0."""
    midnight = datetime.combine(utc_day(now_s) + timedelta(days=1), datetime.min.time(), UTC)
    return midnight.timestamp() - now_s


class Quotas:
    """The quotas of API keys and the record of their usage (module docstring).

    Args:
        settings: `KEY_REQUESTS_PER_MINUTE`, `KEY_TOKENS_PER_DAY` (defaults of keys without their own) and
            `API_KEYS_CACHE_S` (how long a day's token sum read from `usage` is trusted).
        usage: where usage is kept and read (`PostgresUsage`).
        metrics: default: the process's `METRICS`.
        clock: Unix time in seconds (default `time.time`; tests pass their own). The requests-per-minute window of the
            `limits` package keeps its own clock.
    """

    def __init__(
        self,
        settings: Settings,
        usage: UsageLog,
        metrics: QuotaMetrics | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.usage = usage
        self.metrics = metrics or METRICS
        self.clock = clock
        self.window = strategies.MovingWindowRateLimiter(storage.MemoryStorage())
        # (key, day) -> [tokens]: a list, so that `record` adds to it without renewing the entry's time to live
        self._tokens: TTLCache[tuple[int, date], list[int]] = TTLCache(
            maxsize=4 * MAX_KEY_LABELS, ttl=settings.api_keys_cache_s, timer=clock
        )
        self._reserved: dict[tuple[int, date], int] = {}  # (key, day) -> tokens held by answers in progress

    def limits_of(self, key: ApiKey) -> tuple[int | None, int | None]:
        """The key's requests per minute and tokens per day: its own, else the settings' (None: unlimited)."""
        rpm = key.requests_per_minute if key.requests_per_minute is not None else self.settings.key_requests_per_minute
        tpd = key.tokens_per_day if key.tokens_per_day is not None else self.settings.key_tokens_per_day
        return rpm, tpd

    async def tokens_today(self, key_id: int, now_s: float) -> int:
        """The key's tokens of the UTC day of `now_s`, from the cache (`cachetools.TTLCache`) when read within
        `API_KEYS_CACHE_S` (plus what this process recorded since)."""
        day = utc_day(now_s)
        cached = self._tokens.get((key_id, day))
        if cached is not None:
            return cached[0]
        tokens = await self.usage.tokens_on(key_id, day)
        self._tokens[(key_id, day)] = [tokens]
        return tokens

    async def check(self, key: ApiKey) -> None:
        """Let a request of `key` through, counting it in its minute's window, or refuse it; nothing is reserved
        (`admit` does)."""
        await self._check(key)

    async def admit(self, key: ApiKey) -> Reservation:
        """`check`, then reserve for the request the most tokens its answer may use (`ANSWER_TOKEN_BUDGET`, at most
        what is left of the key's day), held until `record` or `release` is given the reservation.

        Raises:
            QuotaExceededError, StoreError: see `check`.
        """
        day, left = await self._check(key)
        # no await since the check: no other request of the key was let through in between
        reservation = Reservation(key.id, day, 0 if left is None else min(self.settings.answer_token_budget, left))
        if reservation.tokens:
            self._reserved[(key.id, day)] = self._reserved.get((key.id, day), 0) + reservation.tokens
        return reservation

    def release(self, reservation: Reservation) -> None:
        """Give back what `reservation` held (once; again is a no-op)."""
        where = (reservation.key_id, reservation.day)
        if reservation.tokens and where in self._reserved:
            self._reserved[where] -= reservation.tokens
            if self._reserved[where] <= 0:
                del self._reserved[where]
        reservation.tokens = 0

    async def _check(self, key: ApiKey) -> tuple[date, int | None]:
        """`check`: the UTC day and the tokens left of it (used and reserved taken off; None: no budget).

        Raises:
            QuotaExceededError: the key has reached its tokens of today (`retry_after_s`: to the next UTC midnight),
                or answers in progress hold the rest of them (`retry_after_s`: `ANSWER_TIMEOUT_S`, by when they have
                ended), or made its requests of the last 60 s (`retry_after_s`: until the oldest leaves the window).
            StoreError: the day's tokens could not be read.
        """
        rpm, tpd = self.limits_of(key)
        now_s = self.clock()
        day = utc_day(now_s)
        left: int | None = None
        if tpd is not None:
            used = await self.tokens_today(key.id, now_s)
            reserved = self._reserved.get((key.id, day), 0)
            if used >= tpd:
                self._refused(key, "tokens_per_day")
                raise QuotaExceededError(
                    f"API key {key.id} has used {used} of its {tpd} LLM tokens of today (UTC); try again tomorrow",
                    "tokens_per_day",
                    seconds_to_next_utc_day(now_s),
                )
            if used + reserved >= tpd:
                self._refused(key, "tokens_per_day")
                raise QuotaExceededError(
                    f"API key {key.id} has used {used} of its {tpd} LLM tokens of today (UTC) and its answers in "
                    f"progress may use the other {tpd - used}; retry when they have ended",
                    "tokens_per_day",
                    min(self.settings.answer_timeout_s, seconds_to_next_utc_day(now_s)),
                )
            left = tpd - used - reserved
        if rpm is not None:
            item = RateLimitItemPerMinute(rpm)
            if not self.window.hit(item, str(key.id)):
                reset_at = self.window.get_window_stats(item, str(key.id)).reset_time
                self._refused(key, "requests_per_minute")
                raise QuotaExceededError(
                    f"API key {key.id} has made its {rpm} requests of the last minute; retry after the Retry-After "
                    "seconds",
                    "requests_per_minute",
                    max(1.0, math.ceil(reset_at - time.time())),
                )
        self.metrics.requests.labels(self.metrics.labels(key.id)).inc()
        return day, left

    def _refused(self, key: ApiKey, limit: str) -> None:
        self.metrics.refusals.labels(self.metrics.labels(key.id), limit).inc()

    async def record(self, key: ApiKey, used: Usage, reservation: Reservation | None = None) -> None:
        """Add one request's usage to the key's row of today (UTC) and to the cached token sum, in place of what its
        `reservation` held (given back once the write is done, or has failed); count its tokens.

        Raises:
            StoreError: the usage could not be written.
        """
        now_s = self.clock()
        day = utc_day(now_s)
        cached = self._tokens.get((key.id, day))
        if cached is not None:  # counted at once
            cached[0] += used.tokens
        label = self.metrics.labels(key.id)
        self.metrics.tokens.labels(label, "prompt").inc(used.prompt_tokens)
        self.metrics.tokens.labels(label, "completion").inc(used.completion_tokens)
        try:
            await self.usage.record(key.id, day, used)
        finally:  # held until the usage is written: never a moment with neither counted
            if reservation is not None:
                self.release(reservation)
