"""Admission control for answers (agent/core/admission.py): slots, the FIFO queue, refusals with their retry time,
deadline, cancellation while queued, service-rate estimate and metrics. Pure logic: a manual clock, no real time."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable

import pytest
from prometheus_client import CollectorRegistry

from agent.core.admission import AdmissionController, AdmissionMetrics, ServiceRate, Ticket
from agent.core.errors import OverloadedError
from agent.core.failures import Failure, describe
from agent.http.errors import error_response


class ManualClock:
    """Time that moves only on `advance`; `sleep` returns once the clock has been advanced past its wake time."""

    def __init__(self) -> None:
        self.t = 0.0
        self._sleepers: list[tuple[float, asyncio.Future[None]]] = []

    def now(self) -> float:
        return self.t

    async def sleep(self, seconds: float) -> None:
        wake = asyncio.get_running_loop().create_future()
        self._sleepers.append((self.t + seconds, wake))
        if seconds <= 0:
            wake.set_result(None)
        await wake

    def advance(self, seconds: float) -> None:
        self.t += seconds
        for at, wake in self._sleepers:
            if at <= self.t and not wake.done():
                wake.set_result(None)


async def settle() -> None:
    """Let every ready task run until none is ready (event loop turns, no time passes)."""
    for _ in range(20):
        await asyncio.sleep(0)


def controller(
    max_in_progress: int = 2, queue_max: int = 3, deadline_s: float = 10.0
) -> tuple[AdmissionController, ManualClock, AdmissionMetrics, CollectorRegistry]:
    clock, registry = ManualClock(), CollectorRegistry()
    metrics = AdmissionMetrics.create(registry)
    admission = AdmissionController(max_in_progress, queue_max, deadline_s, clock=clock, metrics=metrics)
    return admission, clock, metrics, registry


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float:
    value = registry.get_sample_value(name, labels)
    assert value is not None, name
    return value


async def complete(admission: AdmissionController, clock: ManualClock, durations_s: list[float]) -> None:
    """Run one answer per duration through a free slot, one after another, so the service rate is measured."""
    for duration in durations_s:
        async with admission.admit():
            clock.advance(duration)


def waiting(ticket: Ticket, positions: list[int]) -> asyncio.Task[None]:
    return asyncio.create_task(ticket.wait(positions.append))


async def three_queued() -> tuple[
    AdmissionController, CollectorRegistry, Ticket, list[Ticket], list[list[int]], list[asyncio.Task[None]]
]:
    """A one-slot controller (queue of 5) whose slot is taken by the returned holder ticket, and three tickets
    queued behind it, each awaited by a task that records the positions it is told (settled: all told once)."""
    admission, _, _, registry = controller(max_in_progress=1, queue_max=5)
    holder = admission.enter()
    tickets = [admission.enter() for _ in range(3)]
    positions: list[list[int]] = [[], [], []]
    tasks = [waiting(t, p) for t, p in zip(tickets, positions, strict=True)]
    await settle()
    return admission, registry, holder, tickets, positions, tasks


async def test_free_slots_admit_at_once_and_the_rest_queue_then_refuse_when_full() -> None:
    admission, _, _, registry = controller(max_in_progress=2, queue_max=3)
    first, second = admission.enter(), admission.enter()
    assert first.admitted and second.admitted and admission.in_progress == 2
    queued = [admission.enter() for _ in range(3)]
    assert [t.admitted for t in queued] == [False] * 3
    assert [t.position for t in queued] == [1, 2, 3]
    with pytest.raises(OverloadedError, match="ANSWER_QUEUE_MAX=3") as refused:
        admission.enter()
    assert refused.value.kind == "overloaded" and refused.value.reason == "queue_full"
    assert refused.value.retry_after_s == 10.0  # no answer completed yet: the deadline
    assert "retry in 10 s" in str(refused.value)
    assert sample(registry, "rag_admission_rejections_total", reason="queue_full") == 1
    assert sample(registry, "rag_admission_queue_length") == 3
    assert sample(registry, "rag_answers_in_progress") == 2


async def test_a_freed_slot_goes_to_the_head_of_the_queue_in_arrival_order() -> None:
    admission, registry, holder, tickets, positions, tasks = await three_queued()
    assert positions == [[1], [2], [3]]
    holder.close()
    await settle()
    assert tasks[0].done() and not tasks[1].done() and not tasks[2].done()
    assert positions == [[1], [2, 1], [3, 2]]
    assert admission.in_progress == 1 and admission.queue_length == 2
    tickets[0].close()
    await settle()
    assert tasks[1].done() and not tasks[2].done() and positions[2] == [3, 2, 1]
    tickets[1].close()
    await settle()
    tickets[2].close()
    assert admission.in_progress == 0 and admission.queue_length == 0
    assert sample(registry, "rag_answers_in_progress") == 0 and sample(registry, "rag_admission_queue_length") == 0
    # an arrival with a free slot and nobody waiting is admitted at once again
    assert admission.enter().admitted


async def test_a_wait_that_cannot_be_promised_is_refused_at_once_with_retry_after_from_the_service_rate() -> None:
    admission, clock, _, registry = controller(max_in_progress=2, queue_max=100, deadline_s=10.0)
    await complete(admission, clock, [4.0, 4.0])  # mean duration 4 s over 2 slots: 0.5 answers/s
    assert admission.rate.per_s == pytest.approx(0.5)
    admission.enter(), admission.enter()
    # the 95th percentile of the wait at position p: (p + 1.645 √p) / 0.5 s; 8.65 s at 2, 11.7 s at 3
    assert admission.promised_wait_s(2) == pytest.approx((2 + 1.645 * 2**0.5) / 0.5)
    queued = [admission.enter() for _ in range(2)]
    with pytest.raises(
        OverloadedError, match=r"expected wait 6\.0 s at queue position 3 \(95th percentile 11\.7 s\)"
    ) as refused:
        admission.enter()
    assert refused.value.reason == "expected_wait"
    assert refused.value.retry_after_s == pytest.approx(6.0)  # the mean: 3 places drain at 0.5/s
    assert admission.queue_length == len(queued) == 2  # the refused request holds nothing
    assert sample(registry, "rag_admission_rejections_total", reason="expected_wait") == 1
    assert sample(registry, "rag_admission_rejections_total", reason="queue_full") == 0


async def test_a_queued_answer_past_the_deadline_is_still_answered_while_the_queue_moves() -> None:
    """The deadline is the promise made at the door; a waiter the estimate was wrong about is served, not refused."""
    admission, clock, _, registry = controller(max_in_progress=1, queue_max=5, deadline_s=10.0)
    await complete(admission, clock, [1.0])  # 1 answer/s: position 1 is promised (1 + 1.645) s
    holder = admission.enter()
    late = admission.enter()
    task = waiting(late, [])
    await settle()
    clock.advance(15.0)  # the answer in progress runs long: 15 s waited, past the 10 s deadline
    await settle()
    assert not task.done()
    holder.close()
    await settle()
    assert task.done() and task.exception() is None and late.admitted
    assert sample(registry, "rag_admission_rejections_total", reason="deadline") == 0


async def test_a_cancelled_waiter_leaves_the_queue_and_those_behind_move_up() -> None:
    admission, registry, holder, tickets, positions, tasks = await three_queued()
    tasks[0].cancel()  # the client at the head disconnects
    await settle()
    assert tasks[0].cancelled() and tickets[0].position is None
    assert admission.queue_length == 2 and positions[1:] == [[2, 1], [3, 2]]
    holder.close()
    await settle()
    assert tasks[1].done() and tickets[1].admitted and not tickets[0].admitted
    assert sample(registry, "rag_admission_queue_length") == 1
    assert sample(registry, "rag_admission_rejections_total", reason="deadline") == 0


async def test_a_slot_granted_to_a_waiter_cancelled_in_the_same_turn_passes_to_the_next() -> None:
    admission, _, _, _ = controller(max_in_progress=1, queue_max=5)
    holder = admission.enter()
    first, second = admission.enter(), admission.enter()
    tasks = [waiting(first, []), waiting(second, [])]
    await settle()
    tasks[0].cancel()
    holder.close()  # grants `first` before its task sees the cancellation
    await settle()
    assert tasks[0].cancelled() and tasks[1].done() and second.admitted
    assert admission.in_progress == 1 and admission.queue_length == 0


async def test_a_waiter_of_a_stalled_queue_is_refused_after_twice_the_deadline_and_leaves_it() -> None:
    admission, clock, _, registry = controller(max_in_progress=1, queue_max=5, deadline_s=10.0)
    admission.enter()  # never finishes: the service stalled
    late, later = admission.enter(), admission.enter()
    clock.advance(4.0)
    task_late, task_later = waiting(late, []), waiting(later, [])
    await settle()
    clock.advance(15.9)
    await settle()
    assert not task_late.done()  # 19.9 s waited
    clock.advance(0.1)
    await settle()
    with pytest.raises(
        OverloadedError, match=r"waited 20\.0 s in the queue, twice ANSWER_QUEUE_DEADLINE_S=10"
    ) as refused:
        task_late.result()
    assert refused.value.reason == "deadline"
    with pytest.raises(OverloadedError, match="ANSWER_QUEUE_DEADLINE_S=10"):
        task_later.result()
    assert admission.queue_length == 0 and admission.in_progress == 1
    assert sample(registry, "rag_admission_rejections_total", reason="deadline") == 2
    assert sample(registry, "rag_admission_queue_wait_seconds_count") == 3  # one admitted at once, two expired
    assert sample(registry, "rag_admission_queue_wait_seconds_sum") == pytest.approx(40.0)


async def test_admit_holds_a_slot_for_its_body_and_measures_its_duration() -> None:
    admission, clock, _, registry = controller(max_in_progress=1, queue_max=1)
    seen: list[int] = []

    async def answer(duration: float) -> None:
        async with admission.admit(seen.append):
            assert admission.in_progress == 1
            await clock.sleep(duration)

    first = asyncio.create_task(answer(3.0))
    await settle()
    second = asyncio.create_task(answer(5.0))
    await settle()
    assert seen == [1] and admission.queue_length == 1
    clock.advance(3.0)
    await settle()
    assert first.done() and admission.rate.mean_s == pytest.approx(3.0)
    assert sample(registry, "rag_admission_queue_wait_seconds_sum") == pytest.approx(3.0)
    clock.advance(5.0)
    await settle()
    assert second.done() and admission.in_progress == 0
    assert admission.rate.mean_s == pytest.approx(3.0 + 0.2 * (5.0 - 3.0))


async def test_a_cancelled_answer_frees_its_slot_without_feeding_the_service_rate() -> None:
    admission, clock, _, _ = controller(max_in_progress=1, queue_max=0)
    started = asyncio.Event()

    async def answer() -> None:
        async with admission.admit():
            started.set()
            await clock.sleep(100.0)

    task = asyncio.create_task(answer())
    await started.wait()
    with pytest.raises(OverloadedError, match="0 answers queued"):
        admission.enter()  # queue_max 0: all slots busy means refused
    clock.t = 50.0
    task.cancel()
    await settle()
    assert admission.in_progress == 0 and admission.rate.mean_s is None


async def test_an_error_in_the_answer_frees_its_slot_and_counts_as_service_time() -> None:
    admission, clock, _, _ = controller()

    async def failing() -> None:
        async with admission.admit():
            clock.advance(2.0)
            raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        await failing()
    assert admission.in_progress == 0 and admission.rate.mean_s == 2.0


def test_service_rate_is_slots_over_the_moving_average_of_durations() -> None:
    rate = ServiceRate(slots=4)
    assert rate.per_s is None
    rate.observe(8.0)
    assert rate.per_s == pytest.approx(0.5)
    rate.observe(18.0)  # 8 + 0.2 * (18 - 8) = 10
    assert rate.mean_s == pytest.approx(10.0) and rate.per_s == pytest.approx(0.4)
    with pytest.raises(ValueError, match="alpha"):
        ServiceRate(slots=1, alpha=0.0)


@pytest.mark.parametrize(
    ("build", "setting"),
    [
        (lambda: AdmissionController(0, 1, 1.0), "ANSWER_MAX_IN_PROGRESS=0"),
        (lambda: AdmissionController(1, -1, 1.0), "ANSWER_QUEUE_MAX=-1"),
        (lambda: AdmissionController(1, 1, 0.0), "ANSWER_QUEUE_DEADLINE_S=0"),
        (lambda: AdmissionController(1, 1, 1.0, key_share=0.0), "ANSWER_KEY_SHARE=0.0"),
        (lambda: AdmissionController(1, 1, 1.0, key_share=1.5), "ANSWER_KEY_SHARE=1.5"),
    ],
)
def test_bounds_out_of_range_name_their_setting(build: Callable[[], object], setting: str) -> None:
    with pytest.raises(ValueError, match=setting):
        build()


def share_controller(
    max_in_progress: int = 2, queue_max: int = 4, key_share: float = 0.5
) -> tuple[AdmissionController, ManualClock, CollectorRegistry]:
    clock, registry = ManualClock(), CollectorRegistry()
    metrics = AdmissionMetrics.create(registry)
    admission = AdmissionController(
        max_in_progress, queue_max, 100.0, clock=clock, metrics=metrics, key_share=key_share
    )
    return admission, clock, registry


async def test_a_flooding_key_holds_only_its_share_of_the_queue_and_another_key_is_served_next() -> None:
    admission, _, registry = share_controller(max_in_progress=2, queue_max=4, key_share=0.5)
    held = [admission.enter("flood"), admission.enter("flood")]  # every slot
    flood_waiting = [admission.enter("flood"), admission.enter("flood")]  # its share: 2 of the 4 places
    with pytest.raises(OverloadedError, match="this API key holds 2 of the queue's 4 places") as refused:
        admission.enter("flood")
    assert refused.value.reason == "key_share"
    assert sample(registry, "rag_admission_rejections_total", reason="key_share") == 1
    steady_positions: list[int] = []
    flood_positions: list[list[int]] = [[], []]
    steady = admission.enter("steady")  # the queue still has room for another key
    flood_tasks = [waiting(t, p) for t, p in zip(flood_waiting, flood_positions, strict=True)]
    steady_task = waiting(steady, steady_positions)
    await settle()
    # the steady key holds no slot: it is served before the flooder's earlier waiters
    assert steady_positions == [1] and flood_positions == [[2], [3]]
    held[0].close()
    await settle()
    assert steady_task.done() and not any(t.done() for t in flood_tasks)
    assert flood_positions == [[2, 1], [3, 2]]
    held[1].close()  # now each key holds one slot: the flooder's oldest waiter is next
    await settle()
    assert flood_tasks[0].done() and not flood_tasks[1].done()
    for ticket in (steady, *flood_waiting):
        ticket.close()
    await asyncio.gather(*flood_tasks, return_exceptions=True)
    assert admission.in_progress == 0 and admission.queue_length == 0


async def test_waiters_of_two_keys_alternate_by_slots_held_then_arrival() -> None:
    admission, _, _ = share_controller(max_in_progress=1, queue_max=6, key_share=1.0)
    admission.enter("a")
    order = [admission.enter(k) for k in ("a", "a", "a", "b", "b")]
    # a holds one slot: b's first waiter is served first, then by level (slots held + own waiters ahead), arrival
    assert [t.position for t in order] == [2, 4, 5, 1, 3]
    # the next of b would be level 2 (after a's second waiter, its equal that came first); a new key's level 0 is
    # level with b's first waiter, which came first
    assert admission._arrival_position("b") == 5 and admission._arrival_position("c") == 2


async def test_requests_without_a_key_are_one_tenant_with_the_whole_queue() -> None:
    admission, _, _ = share_controller(max_in_progress=1, queue_max=3, key_share=0.34)
    admission.enter()
    queued = [admission.enter() for _ in range(3)]  # not bounded by the key share: plain FIFO
    assert [t.position for t in queued] == [1, 2, 3]
    with pytest.raises(OverloadedError) as refused:
        admission.enter()
    assert refused.value.reason == "queue_full"
    with pytest.raises(OverloadedError):
        admission.check("a key")  # a full queue refuses every key


async def test_a_closed_ticket_cannot_wait() -> None:
    admission, _, _, _ = controller()
    ticket = admission.enter()
    ticket.close()
    ticket.close()  # idempotent
    wait: Awaitable[None] = ticket.wait()
    with pytest.raises(RuntimeError, match="closed"):
        await wait
    assert admission.in_progress == 0


def test_an_overloaded_refusal_is_a_503_with_its_own_retry_after_and_a_one_line_message() -> None:
    refusal = OverloadedError("overloaded: 4 answers queued (ANSWER_QUEUE_MAX=4); retry in 8 s", 7.2, "queue_full")
    failure = describe(refusal)
    assert failure == Failure("overloaded", str(refusal), retryable=True, retry_after_s=7.2)
    response = error_response(failure)
    assert response.status_code == 503 and response.headers["retry-after"] == "8"
    assert json.loads(bytes(response.body)) == {"error": "overloaded", "detail": str(refusal)}


async def test_a_position_callback_that_raises_fails_no_other_request_and_loses_no_slot() -> None:
    admission, _, _ = share_controller(max_in_progress=1, queue_max=4, key_share=1.0)
    holder = admission.enter("a")
    waiter = admission.enter("a")

    def broken(position: int) -> None:
        raise RuntimeError(f"position {position}")

    task = asyncio.ensure_future(waiter.wait(broken))  # its first report raises inside `wait` itself: its own error
    await settle()
    assert task.done() and isinstance(task.exception(), RuntimeError)
    assert waiter.position is None and admission.queue_length == 0  # it left the queue: no slot is handed to it
    second = admission.enter("a")
    third_positions: list[int] = []
    third = admission.enter("b")
    waiting_third = waiting(third, third_positions)
    await settle()
    second._on_position = broken  # a waiter whose callback raises when the queue changes under it
    fourth = admission.enter("c")  # reports every waiter's new position: must not raise here
    holder.close()  # hands the slot over (to `second`, the earliest of equals) and reports again: no raise either
    await settle()
    assert second.admitted and not waiting_third.done() and admission.in_progress == 1
    assert third_positions[-1] == 1
    for ticket in (second, third, fourth):
        ticket.close()
    await asyncio.gather(waiting_third, return_exceptions=True)
    assert admission.in_progress == 0 and admission.queue_length == 0
