"""Admission control for answers: at most `ANSWER_MAX_IN_PROGRESS` answers in progress per process, a bounded FIFO
queue (`ANSWER_QUEUE_MAX`) in front of them, and an immediate refusal (`agent.core.errors.OverloadedError`, with a retry
time) when the queue is full or the answer could not be promised a slot within `ANSWER_QUEUE_DEADLINE_S`. The
decision is taken before any embedding or LLM work, so a refused request costs next to nothing, and an answer that
is queued is answered: the queue refuses none of its waiters unless the service stalls.

    ticket = admission.enter()            # synchronous: refuses now, or holds a slot or a queue place
    async with ticket.slot(on_position):  # waits for a slot (reporting its queue position), holds it, frees it
        ...                               # the answer's work (embedding, search, LLM)

`async with admission.admit(on_position):` does both. A task cancelled while queued (its client disconnected)
leaves the queue. A freed slot goes straight to a waiter: while anyone waits, no arrival takes a slot (though an
arrival of a key holding fewer slots is queued ahead of earlier waiters, below).

Fair share between keys: every ticket belongs to a tenant (the caller's API key id; None for requests without a key).
A freed slot goes to the waiting tenant that holds the fewest slots, its oldest waiter first (ties: the earliest
arrival), so a tenant that floods the service cannot starve one that asks now and then: with one tenant this is the
plain FIFO queue. A keyed tenant holds at most `ANSWER_KEY_SHARE` of the queue's places (at least one); one more of
its requests is refused at once (`key_share`), so the queue always has room for the other keys. This is fair
queuing by least attained service (Demers, Keshav and Shenker, "Analysis and simulation of a fair queueing
algorithm", SIGCOMM 1989, with equal weights and one unit per answer). A waiter's queue position is its place in that
service order: the m-th waiter of a tenant holding a slots is served at level a + m, in order of level, then arrival.

Service rate: answers complete at `ANSWER_MAX_IN_PROGRESS / W` per second while every slot is busy, W the mean
time an answer holds its slot (Little's law, L = λW, with L the slots in use). W is an exponentially weighted
moving average of the measured durations (`ServiceRate`), so the estimate follows the load.

The promise: a new arrival at queue position p waits for p slots to free. With every slot busy, slots free about as
a Poisson process of that rate r, so the wait for p of them is Erlang(p, r) distributed: mean p / r, standard
deviation √p / r. The arrival is queued when the 95th percentile of that wait, (p + 1.645 √p) / r (normal
approximation), is within `ANSWER_QUEUE_DEADLINE_S`, else refused at once (`expected_wait`); so few queued answers
wait past it, and none is refused for that. `Retry-After` is the mean drain time p / r. Until the first answer
completes the rate is unknown: then only the queue bound refuses at once. A waiter is refused only after twice the
deadline in the queue (`deadline`): the bound of a queue whose service stalled (an LLM that stopped answering) or
whose rate was not known yet; `2 × ANSWER_QUEUE_DEADLINE_S + ANSWER_TIMEOUT_S` bounds an admitted answer's time.

Metrics (prometheus-client, the process's default registry, served at the HTTP API's `/metrics`):
`rag_admission_queue_length` (gauge), `rag_admission_queue_wait_seconds` (histogram, every admitted or expired
answer; 0 for one admitted at once), `rag_answers_in_progress` (gauge), `rag_admission_rejections_total` (counter,
label `reason`: `queue_full`, `expected_wait`, `deadline`, `key_share`).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import math
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Hashable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Literal, Protocol

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram

from agent.core.errors import OverloadedError

log = logging.getLogger(__name__)

RejectionReason = Literal["queue_full", "expected_wait", "deadline", "key_share"]
"""Why an answer was refused: the queue was full, its wait could not be promised within the deadline, it waited
twice the deadline in the queue (the service stalled), or its key already holds its share of the queue."""
REASONS: tuple[RejectionReason, ...] = ("queue_full", "expected_wait", "deadline", "key_share")

Tenant = Hashable
"""Whose answer a ticket is: the caller's API key id, or None for a request without a key (one shared tenant)."""

PositionFn = Callable[[int], None]
"""Receives a queued answer's position (1 = next to be admitted) when it starts waiting and each time it changes
(up as slots free, or down when an arrival of a key holding fewer slots is served first). Called from the task that
changed the queue: it must be quick (e.g. `asyncio.Queue.put_nowait`); one that raises is logged and ignored."""

PROMISE_Z = 1.645
"""Standard normal quantile of the promised wait: 95 % of queued answers get a slot within `ANSWER_QUEUE_DEADLINE_S`
when the service rate holds (the 95th percentile of a normal distribution is its mean + 1.645 standard deviations)."""

QUEUE_LIMIT_DEADLINES = 2.0
"""A queued answer is refused after this many `ANSWER_QUEUE_DEADLINE_S` in the queue: the bound of a stalled
service; a queue that moves at its measured rate serves its waiters well before (`PROMISE_Z`)."""

EWMA_ALPHA = 0.2
"""Weight of the newest duration in the moving average of answer durations: the estimate follows a change of load
within about 1 / 0.2 = 5 answers while one slow answer moves it by a fifth of its excess."""


class Clock(Protocol):
    """Monotonic time in seconds and a sleep on the same time line (tests inject a manual clock)."""

    def now(self) -> float:
        """Seconds on a monotonic time line."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Return once `seconds` have passed on `now`'s time line."""
        ...


class MonotonicClock:
    """`time.monotonic` and `asyncio.sleep` (the event loop's clock is `time.monotonic` too)."""

    def now(self) -> float:
        """`time.monotonic()`, seconds."""
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        """`asyncio.sleep(seconds)`."""
        await asyncio.sleep(seconds)


@dataclass(frozen=True)
class AdmissionMetrics:
    """The admission metrics of one registry (names in the module docstring)."""

    queue_length: Gauge
    queue_wait: Histogram
    in_progress: Gauge
    rejections: Counter

    @classmethod
    def create(cls, registry: CollectorRegistry) -> AdmissionMetrics:
        """Register the four metrics in `registry` (every rejection reason starts at 0).

        Raises:
            ValueError: they are registered there already (prometheus-client's duplicate check).
        """
        metrics = cls(
            Gauge("rag_admission_queue_length", "Answers waiting for a slot.", registry=registry),
            Histogram(
                "rag_admission_queue_wait_seconds",
                "Time an answer waited in the admission queue, seconds (0 when admitted at once).",
                buckets=(0.001, 0.01, 0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0),
                registry=registry,
            ),
            Gauge("rag_answers_in_progress", "Answers holding a slot (embedding, search, LLM).", registry=registry),
            Counter(
                "rag_admission_rejections",
                "Answers refused by admission control, by reason: queue_full, expected_wait, deadline, key_share.",
                ["reason"],
                registry=registry,
            ),
        )
        for reason in REASONS:
            metrics.rejections.labels(reason)
        return metrics


METRICS = AdmissionMetrics.create(REGISTRY)
"""The process's admission metrics (default registry)."""


class ServiceRate:
    """Answers per second with every slot busy: `slots / W`, W an exponentially weighted moving average of the
    measured answer durations (Little's law; see the module docstring).

    Args:
        slots: answers in progress at once (`ANSWER_MAX_IN_PROGRESS`).
        alpha: weight of the newest duration, in (0, 1].
    """

    def __init__(self, slots: int, alpha: float = EWMA_ALPHA) -> None:
        if not 0 < alpha <= 1:
            raise ValueError(f"alpha={alpha}: expected 0 < alpha <= 1")
        self.slots = slots
        self.alpha = alpha
        self.mean_s: float | None = None

    def observe(self, duration_s: float) -> None:
        """Add one answer's time in its slot, seconds (>= 0)."""
        duration_s = max(0.0, duration_s)
        self.mean_s = duration_s if self.mean_s is None else self.mean_s + self.alpha * (duration_s - self.mean_s)

    @property
    def per_s(self) -> float | None:
        """Answers per second, or None before the first measured answer (or while the mean duration is 0)."""
        if not self.mean_s:
            return None
        return self.slots / self.mean_s


class AdmissionController:
    """Slots, queue and deadline for the answers of one process (see the module docstring). Use from one event loop.

    Args:
        max_in_progress: answers holding a slot at once (`ANSWER_MAX_IN_PROGRESS`, >= 1).
        queue_max: answers waiting for a slot at most (`ANSWER_QUEUE_MAX`, >= 0; 0 refuses whenever all slots are
            busy).
        deadline_s: the wait an answer is queued for at most, 95th percentile, seconds (`ANSWER_QUEUE_DEADLINE_S`,
            > 0); a waiter is refused after twice it.
        clock: time source (default `MonotonicClock`).
        metrics: where to report (default the process's `METRICS`).
        key_share: the fraction of the queue's places one API key may hold (`ANSWER_KEY_SHARE`, in (0, 1]; at least
            one place); requests without a key (tenant None) are not bounded by it.

    Raises:
        ValueError: a bound out of range (the message names the setting).
    """

    def __init__(
        self,
        max_in_progress: int,
        queue_max: int,
        deadline_s: float,
        *,
        clock: Clock | None = None,
        metrics: AdmissionMetrics | None = None,
        key_share: float = 1.0,
    ) -> None:
        if max_in_progress < 1:
            raise ValueError(f"ANSWER_MAX_IN_PROGRESS={max_in_progress}: expected at least 1")
        if queue_max < 0:
            raise ValueError(f"ANSWER_QUEUE_MAX={queue_max}: expected 0 or more")
        if not deadline_s > 0:
            raise ValueError(f"ANSWER_QUEUE_DEADLINE_S={deadline_s}: expected more than 0 seconds")
        if not 0 < key_share <= 1:
            raise ValueError(f"ANSWER_KEY_SHARE={key_share}: expected more than 0 and at most 1")
        self.max_in_progress = max_in_progress
        self.queue_max = queue_max
        self.deadline_s = deadline_s
        self.key_queue_max = max(1, math.floor(key_share * queue_max))
        self.clock: Clock = clock or MonotonicClock()
        self.metrics = metrics or METRICS
        self.rate = ServiceRate(max_in_progress)
        self._in_progress = 0
        self._queue: deque[Ticket] = deque()  # in arrival order
        self._holding: collections.Counter[Tenant] = collections.Counter()  # slots held per tenant
        self._queued: collections.Counter[Tenant] = collections.Counter()  # queue places held per tenant

    @property
    def in_progress(self) -> int:
        """Answers holding a slot now."""
        return self._in_progress

    @property
    def queue_length(self) -> int:
        """Answers waiting for a slot now."""
        return len(self._queue)

    def expected_wait_s(self, position: int) -> float | None:
        """Seconds an answer at queue `position` (1 = next) expects to wait: position / the measured service rate
        (the mean of its Erlang-distributed wait); None while the rate is unknown."""
        rate = self.rate.per_s
        return None if rate is None else position / rate

    def promised_wait_s(self, position: int) -> float | None:
        """The wait of an answer at queue `position` that 95 % of waits stay within at the measured service rate:
        (position + 1.645 √position) / rate, seconds (the module docstring); None while the rate is unknown."""
        rate = self.rate.per_s
        return None if rate is None else (position + PROMISE_Z * math.sqrt(position)) / rate

    @property
    def queue_limit_s(self) -> float:
        """Longest wait in the queue before a waiter is refused (`deadline`), seconds: twice the deadline."""
        return QUEUE_LIMIT_DEADLINES * self.deadline_s

    def retry_after_s(self, position: int | None = None) -> float:
        """When a refused request may retry, seconds: the time the queue ahead of its `position` (default: the back
        of the queue) takes to drain at the measured service rate (the deadline while the rate is unknown), at least
        1 s."""
        wait = self.expected_wait_s(position or len(self._queue) + 1)
        return max(1.0, self.deadline_s if wait is None else wait)

    def enter(self, tenant: Tenant = None) -> Ticket:
        """Take a slot if one is free and nobody waits, else a place in the queue; synchronous, so the decision is
        made before the caller does any work.

        Args:
            tenant: whose answer it is (`Tenant`: the caller's API key id, None without a key).

        Returns:
            A `Ticket`: admitted already, or queued (wait for its slot with `Ticket.slot` / `Ticket.wait`). The
            caller must close it (`Ticket.slot` does).

        Raises:
            OverloadedError: the queue holds `queue_max` answers (`queue_full`), the tenant's key holds its share of
                the queue (`key_share`), or the 95th percentile of the wait at the arrival's queue position
                (`promised_wait_s`) exceeds the deadline (`expected_wait`); `retry_after_s` from `retry_after_s()`.
        """
        if self._in_progress < self.max_in_progress and not self._queue:
            self._in_progress += 1
            self._holding[tenant] += 1
            self.metrics.in_progress.inc()
            self.metrics.queue_wait.observe(0.0)
            return Ticket(self, tenant, admitted=True)
        self.check(tenant)
        ticket = Ticket(self, tenant, admitted=False)
        self._queue.append(ticket)
        self._queued[tenant] += 1
        self.metrics.queue_length.inc()
        self._moved_up()
        return ticket

    def check(self, tenant: Tenant = None) -> None:
        """Refuse now what `enter(tenant)` would refuse now, without taking anything (`enter` asks it before
        queueing). A caller that only asks must still call `enter()`, which decides again: between the two, other
        arrivals may take the places (the HTTP app's admission gate therefore calls `enter` itself).

        Raises:
            OverloadedError: as `enter()` (`queue_full`, `key_share`, `expected_wait`), counted in
                `rag_admission_rejections`.
        """
        if self._in_progress < self.max_in_progress and not self._queue:
            return
        if len(self._queue) >= self.queue_max:
            raise self._refusal("queue_full", f"{len(self._queue)} answers queued (ANSWER_QUEUE_MAX={self.queue_max})")
        if tenant is not None and self._queued[tenant] >= self.key_queue_max:
            raise self._refusal(
                "key_share",
                f"this API key holds {self._queued[tenant]} of the queue's {self.queue_max} places (ANSWER_KEY_SHARE)",
                self._arrival_position(tenant),
            )
        position = self._arrival_position(tenant)
        promised = self.promised_wait_s(position)
        if promised is not None and promised > self.deadline_s:
            raise self._refusal(
                "expected_wait",
                f"expected wait {self.expected_wait_s(position):.1f} s at queue position {position} (95th percentile "
                f"{promised:.1f} s) exceeds ANSWER_QUEUE_DEADLINE_S={self.deadline_s:g}",
                position,
            )

    def _level(self, tenant: Tenant, index: int) -> int:
        """The service level of a tenant's waiter with `index` waiters of its own ahead: the slots the tenant would
        hold when it is served (`Tenant` order: the lowest level first)."""
        return self._holding[tenant] + index

    def _service_order(self) -> list[Ticket]:
        """The waiters in the order slots would go to them if no other slot freed meanwhile: by level (slots held
        by their tenant plus its waiters ahead), then arrival."""
        ahead: collections.Counter[Tenant] = collections.Counter()
        keyed: list[tuple[int, int, Ticket]] = []
        for arrival, ticket in enumerate(self._queue):
            keyed.append((self._level(ticket.tenant, ahead[ticket.tenant]), arrival, ticket))
            ahead[ticket.tenant] += 1
        return [ticket for _, _, ticket in sorted(keyed, key=lambda k: (k[0], k[1]))]

    def _arrival_position(self, tenant: Tenant) -> int:
        """The queue position (1 = next) an arrival of `tenant` would take now in the service order."""
        level = self._level(tenant, self._queued[tenant])
        ahead: collections.Counter[Tenant] = collections.Counter()
        before = 0
        for ticket in self._queue:
            if self._level(ticket.tenant, ahead[ticket.tenant]) <= level:
                before += 1
            ahead[ticket.tenant] += 1
        return before + 1

    @asynccontextmanager
    async def admit(self, on_position: PositionFn | None = None) -> AsyncIterator[None]:
        """`enter()` then `Ticket.slot(on_position)`: hold a slot for the body.

        Raises:
            OverloadedError: refused at once, or twice the deadline passed in the queue.
        """
        async with self.enter().slot(on_position):
            yield

    def _refusal(self, reason: RejectionReason, why: str, position: int | None = None) -> OverloadedError:
        self.metrics.rejections.labels(reason).inc()
        retry = self.retry_after_s(position)
        return OverloadedError(
            f"overloaded: {self._in_progress} of ANSWER_MAX_IN_PROGRESS={self.max_in_progress} answers in progress; "
            f"{why}; retry in {math.ceil(retry)} s",
            retry_after_s=retry,
            reason=reason,
        )

    def _release(self, tenant: Tenant) -> None:
        """`tenant` freed a slot: hand it to the first waiter of the service order, or count it free."""
        self._holding[tenant] -= 1
        if self._holding[tenant] == 0:
            del self._holding[tenant]
        if self._queue:
            head = self._service_order()[0]
            self._queue.remove(head)
            self._take_place_back(head.tenant)
            self._holding[head.tenant] += 1
            self.metrics.queue_length.dec()
            head._grant()
            self._moved_up()
        else:
            self._in_progress -= 1
            self.metrics.in_progress.dec()

    def _leave(self, ticket: Ticket) -> None:
        """A queued ticket gave up (cancelled, expired): remove it and move those behind it up."""
        self._queue.remove(ticket)
        self._take_place_back(ticket.tenant)
        self.metrics.queue_length.dec()
        self._moved_up()

    def _take_place_back(self, tenant: Tenant) -> None:
        self._queued[tenant] -= 1
        if self._queued[tenant] == 0:
            del self._queued[tenant]

    def _moved_up(self) -> None:
        """Tell every waiter its position in the service order (each reports only a change). A position callback
        that raises is logged and left out: it runs inside another request's `enter`, `close` or slot hand-over,
        which must not fail for it."""
        for position, ticket in enumerate(self._service_order(), start=1):
            try:
                ticket._report(position)
            except Exception:
                log.exception("an admission queue position callback failed")

    def position_of(self, ticket: Ticket) -> int | None:
        """`ticket`'s place in the service order (1 = next), or None when it is not queued."""
        if ticket not in self._queue:
            return None
        return self._service_order().index(ticket) + 1


class Ticket:
    """One answer's claim on a slot, from `AdmissionController.enter`: admitted, or queued until a slot is handed
    to it; `close()` frees the slot or leaves the queue. Not created directly."""

    def __init__(self, controller: AdmissionController, tenant: Tenant, *, admitted: bool) -> None:
        self._controller = controller
        self.tenant = tenant
        self._granted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._enqueued_at = controller.clock.now()
        self._on_position: PositionFn | None = None
        self._reported: int | None = None
        self._closed = False
        if admitted:
            self._granted.set_result(None)

    @property
    def admitted(self) -> bool:
        """True once the ticket holds a slot."""
        return self._granted.done() and not self._granted.cancelled()

    @property
    def position(self) -> int | None:
        """Place in the queue's service order (1 = next), or None when admitted or closed."""
        return self._controller.position_of(self)

    async def wait(self, on_position: PositionFn | None = None) -> None:
        """Return once the ticket holds a slot; report the queue position to `on_position` meanwhile (at once, then
        on every move). Cancellation or a refusal closes the ticket (it leaves the queue).

        Raises:
            OverloadedError: twice the deadline passed in the queue before a slot was free (`deadline`).
            RuntimeError: the ticket is closed.
        """
        if self._closed:
            raise RuntimeError("the admission ticket is closed")
        if self.admitted:
            return
        controller = self._controller
        self._on_position = on_position
        try:
            if (position := self.position) is not None:
                self._report(position)  # (a callback that raises here fails this wait alone: the ticket is closed)
        except BaseException:
            self.close()
            raise
        remaining = controller.queue_limit_s - (controller.clock.now() - self._enqueued_at)
        timer = asyncio.ensure_future(controller.clock.sleep(remaining))
        try:
            await asyncio.wait({self._granted, timer}, return_when=asyncio.FIRST_COMPLETED)
            if not self.admitted:
                raise controller._refusal(
                    "deadline",
                    f"waited {controller.clock.now() - self._enqueued_at:.1f} s in the queue, twice "
                    f"ANSWER_QUEUE_DEADLINE_S={controller.deadline_s:g}",
                )
        except BaseException:
            self.close()
            raise
        finally:
            timer.cancel()

    @asynccontextmanager
    async def slot(self, on_position: PositionFn | None = None) -> AsyncIterator[None]:
        """Wait for the slot (`wait`), hold it for the body, then close the ticket. The body's duration feeds the
        service-rate estimate unless the body was cancelled (a client that left says nothing about service time).

        Raises:
            OverloadedError: twice the deadline passed in the queue.
        """
        try:
            await self.wait(on_position)
            started = self._controller.clock.now()
            cancelled = False
            try:
                yield
            except asyncio.CancelledError:
                cancelled = True
                raise
            finally:
                if not cancelled:
                    self._controller.rate.observe(self._controller.clock.now() - started)
        finally:
            self.close()

    def close(self) -> None:
        """Free the slot, or leave the queue; idempotent."""
        if self._closed:
            return
        self._closed = True
        if self.admitted:
            self._controller._release(self.tenant)
        else:
            self._granted.cancel()
            self._controller.metrics.queue_wait.observe(self._controller.clock.now() - self._enqueued_at)
            self._controller._leave(self)

    def _grant(self) -> None:
        """The controller hands this queued ticket a slot (it stays counted in progress)."""
        self._granted.set_result(None)
        self._controller.metrics.queue_wait.observe(self._controller.clock.now() - self._enqueued_at)

    def _report(self, position: int) -> None:
        """Tell the waiter its position when it changed since the last report."""
        if self._on_position is not None and position != self._reported:
            self._reported = position
            self._on_position(position)
