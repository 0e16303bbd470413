"""The tasks of `/a2a` (`agent.http.a2a`): where they are kept and how each one is answered, over `fasta2a`'s
task manager.

Each A2A `message/send` (`SendMessage`) or `message/stream` makes a task that answers its message's question through
`RagApp.ask` as the caller that sent it (`TaskCaller`, found by `agent.http.a2a.A2aGate` and held in
`REQUEST_CALLER` while the request runs):

- the question is the message's text parts; a data part may name a `collection`, a `filter` (`tools.scope` grammar)
  and `top_k`, within the caller's collections (`CallerIdentity.scope`);
- a key holder's task is held to its quotas (`agent.core.quotas.Quotas.admit`, its usage recorded when it ends) and
  takes its place in admission control as its key (`AdmissionController.enter`);
- the result is one artifact `answer`: the answer with its sources as text (`agent.http.mcp_server.answer_text`) and
  the structured answer as a data part (`AnswerOutput`: answer, citations, refused, truncated, support labels);
- a refusal before any work (a key over its quota, an overloaded service, a bad input, a collection outside the key)
  ends the task `rejected`, a failure of the answer (the LLM, the embedder, the store) `failed`; either way with an
  agent message whose text is `kind: message (retryable)` and whose data part is `{"error", "detail", "retryable",
  "retry_after_s"}`, which an A2A client shows.

Tasks run concurrently in the endpoint's task group (`AnswerBroker`), from the moment they are sent; they are kept in
memory (`CallerTasks`: the last `MAX_TASKS` ended ones, each visible only to the caller that made it, and to the
admin). At shutdown a task still running ends `failed` with `shutting_down` (retryable).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Self

import anyio
import anyio.abc
from fasta2a.broker import Broker, TaskOperation
from fasta2a.schema import (
    STREAM_ENDING_STATES,
    Artifact,
    Message,
    Part,
    SendMessageRequest,
    SendMessageResponse,
    StreamResponse,
    Task,
    TaskArtifactUpdateEvent,
    TaskIdParams,
    TaskSendParams,
    TaskState,
    TaskStatusUpdateEvent,
)
from fasta2a.storage import InMemoryStorage
from fasta2a.task_manager import TaskManager

from agent.core.answer import AnswerRequest
from agent.core.app import RagApp
from agent.core.errors import InputError, OverloadedError, QuotaExceededError
from agent.core.failures import Failure, describe
from agent.core.keys import ApiKey
from agent.core.quotas import Quotas
from agent.http.deps import CallerIdentity
from agent.http.errors import ApiError
from agent.http.mcp_server import answer_output, answer_text
from agent.http.quota_gate import metered_answer
from agent.http.shutdown import CUT_DETAIL

log = logging.getLogger(__name__)

MAX_TASKS = 1000
"""Ended tasks kept for `tasks/get` (the oldest go first); running tasks are always kept."""


END_REPORT_S = 5.0
"""Seconds a cancelled task has to record and publish its end (`canceled`, or `failed` at shutdown)."""


@dataclass(frozen=True)
class TaskCaller:
    """Who sent an A2A request: what it may see (`identity`), for a key holder its key (`key`, for quotas), and the
    request's cut (`cut`: set when the shutdown drain ends the request, `agent.http.shutdown.cut_of`; the tasks it
    started then end `failed` with `shutting_down`, which the client receives before its stream or answer ends)."""

    identity: CallerIdentity
    key: ApiKey | None = None
    cut: asyncio.Event | None = None

    @property
    def owner(self) -> str | None:
        """Whose tasks these are (`CallerIdentity.owner`: a key holder's key id as text, `sub:<subject>` for a
        signed-in user); None for the admin (who sees every task)."""
        return self.identity.owner

    @property
    def tenant(self) -> int | str | None:
        """Whose fair share of admission control its answers take, as over HTTP (`agent.http.admission_gate.tenant_of`):
        the key's id, `sub:<subject>` for a signed-in user, None for the admin."""
        return self.identity.key_id if self.identity.key_id is not None else self.owner


REQUEST_CALLER: ContextVar[TaskCaller | None] = ContextVar("a2a_request_caller", default=None)
"""The caller of the A2A request being served (set by `agent.http.a2a.A2aGate` around it)."""


class CallerTasks(InMemoryStorage[Any]):
    """`fasta2a`'s in-memory task storage, each task visible only to the caller that sent it (and the admin), with
    at most `max_tasks` ended tasks kept.

    Args:
        max_tasks: ended tasks kept; when more end, the oldest are forgotten (`tasks/get` then finds none).
    """

    def __init__(self, max_tasks: int = MAX_TASKS) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # fasta2a's own, unannotated
        self.max_tasks = max_tasks
        self.owners: dict[str, str | None] = {}

    def visible(self, task_id: str) -> bool:
        """Whether the current request's caller (`REQUEST_CALLER`; outside a request: anyone) may see `task_id`."""
        caller = REQUEST_CALLER.get()
        if task_id not in self.tasks:
            return False
        return caller is None or caller.owner is None or self.owners.get(task_id) == caller.owner

    async def load_task(self, task_id: str, history_length: int | None = None) -> Task | None:
        """The task, None when it is not kept or not the caller's."""
        return await super().load_task(task_id, history_length) if self.visible(task_id) else None

    async def submit_task(self, context_id: str, message: Message) -> Task:
        """A new `submitted` task for `message`, owned by the request's caller."""
        self._forget_ended()
        task = await super().submit_task(context_id, message)
        caller = REQUEST_CALLER.get()
        self.owners[task["id"]] = None if caller is None else caller.owner
        task["status"]["timestamp"] = utc_now()
        return task

    async def update_task(
        self,
        task_id: str,
        state: TaskState,
        new_artifacts: list[Artifact] | None = None,
        new_messages: list[Message] | None = None,
    ) -> Task:
        """The task in `state` (with artifacts and messages added), its timestamp in UTC."""
        task = await super().update_task(task_id, state, new_artifacts, new_messages)
        task["status"]["timestamp"] = utc_now()
        return task

    def _forget_ended(self) -> None:
        ended = [task_id for task_id, task in self.tasks.items() if task["status"]["state"] in STREAM_ENDING_STATES]
        for task_id in ended[: max(0, len(ended) - self.max_tasks + 1)]:  # dicts keep insertion order: oldest first
            del self.tasks[task_id]
            self.owners.pop(task_id, None)


async def stop_when_set(event: asyncio.Event, scope: anyio.CancelScope) -> None:
    """Cancel `scope` once `event` is set."""
    await event.wait()
    scope.cancel()


def utc_now() -> str:
    """Now as RFC 3339 in UTC (`2026-01-02T03:04:05.678901Z`): the one form A2A 1.0's protobuf clients read
    (`fasta2a`'s own storage writes local time without an offset, which they refuse)."""
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


Runner = Callable[[TaskSendParams, TaskCaller], Awaitable[None]]
"""Runs one task to its end as its caller (`TaskAnswers.run`)."""


@dataclass
class AnswerBroker(Broker):
    """A `fasta2a` broker that starts each task at once, concurrently, in its own task group (`fasta2a`'s in-memory
    broker would hand them to one worker, one after the other), as the caller of the request that sent it.

    Attributes:
        runner: runs a task to its end (set before the broker is entered).
        storage: the tasks; a cancel is obeyed only for a task the caller may see.
    """

    runner: Runner | None = None
    storage: CallerTasks = field(default_factory=CallerTasks)
    _group: anyio.abc.TaskGroup | None = field(default=None, init=False)
    _running: dict[str, anyio.CancelScope] = field(default_factory=dict, init=False)
    canceled: set[str] = field(default_factory=set, init=False)
    finished: dict[str, anyio.Event] = field(default_factory=dict, init=False)

    async def __aenter__(self) -> Self:
        self._group = anyio.create_task_group()
        await self._group.__aenter__()
        return self

    async def __aexit__(self, exc_type: Any, exc_value: Any, traceback: Any) -> bool | None:
        group, self._group = self._group, None
        if group is None:
            return None
        group.cancel_scope.cancel()  # the server stops: tasks still running end `failed` (shutting_down)
        return await group.__aexit__(exc_type, exc_value, traceback)

    async def run_task(self, params: TaskSendParams) -> None:
        """Start the task now, as the caller of the current request."""
        if self._group is None or self.runner is None:
            raise RuntimeError("the A2A broker is not running")
        caller = REQUEST_CALLER.get()
        if caller is None:
            raise RuntimeError("an A2A task came without a caller")
        self.finished[params["id"]] = anyio.Event()
        self._group.start_soon(self._run, self.runner, params, caller)

    async def _run(self, runner: Runner, params: TaskSendParams, caller: TaskCaller) -> None:
        with anyio.CancelScope() as scope:
            self._running[params["id"]] = scope
            stop = None if caller.cut is None else asyncio.ensure_future(stop_when_set(caller.cut, scope))
            try:
                await runner(params, caller)
            finally:
                if stop is not None:
                    stop.cancel()
                self._running.pop(params["id"], None)
                self.canceled.discard(params["id"])
                self.finished.pop(params["id"]).set()

    async def until_finished(self, task_id: str) -> None:
        """Wait until the task started for `task_id` has ended (at once when none runs)."""
        finished = self.finished.get(task_id)
        if finished is not None:
            await finished.wait()

    async def cancel_task(self, params: TaskIdParams) -> None:
        """Cancel the caller's running task (its answer stops; it ends `canceled`); others are left alone."""
        task_id = params["id"]
        running = self._running.get(task_id)
        if running is not None and self.storage.visible(task_id):
            self.canceled.add(task_id)
            running.cancel()

    async def receive_task_operations(self) -> AsyncIterator[TaskOperation]:
        """Nothing: tasks are run by the broker itself, never handed to a worker."""
        return
        yield  # pragma: no cover - an async generator that yields nothing


class WaitingTaskManager(TaskManager):
    """`fasta2a`'s task manager whose `message/send` (`SendMessage`) answers when the task has ended, as A2A 1.0
    asks by default, rather than at once with the task `submitted` (`returnImmediately` is not read: `fasta2a`
    drops it). A client that leaves while it waits leaves the task running (`GetTask` finds it)."""

    broker: AnswerBroker

    async def send_message(self, request: SendMessageRequest) -> SendMessageResponse:
        """Send the message, and answer with its task once it has ended."""
        response: SendMessageResponse = await super().send_message(request)
        result = response.get("result")
        task = None if result is None else result.get("task")
        if result is not None and task is not None:
            await self.broker.until_finished(task["id"])
            result["task"] = await self.storage.load_task(task["id"]) or task
        return response


def error_part(failure: Failure) -> list[Part]:
    """The parts of a task's error message: `kind: message (retryable)` as text, and the same as data."""
    text = failure.message if failure.message.startswith(failure.kind) else f"{failure.kind}: {failure.message}"
    data: dict[str, Any] = {"error": failure.kind, "detail": failure.message, "retryable": failure.retryable}
    if failure.retry_after_s is not None:
        data["retry_after_s"] = failure.retry_after_s
    return [
        Part(text=text + (" (retryable)" if failure.retryable else "")),
        Part(data=data, media_type="application/json"),
    ]


REFUSALS = (QuotaExceededError, OverloadedError, InputError, ApiError)
"""What ends a task `rejected`: refused before any answer work."""


def failure_of(exc: BaseException) -> tuple[TaskState, Failure] | None:
    """The end state and failure of an exception raised by a task; None for a bug."""
    if isinstance(exc, ApiError):
        return "rejected", Failure(exc.kind, str(exc.detail))
    failure = describe(exc)
    if failure is None:
        return None
    return ("rejected" if isinstance(exc, REFUSALS) else "failed"), failure


Opened = Callable[[], tuple[RagApp, Quotas | None]]
"""The app's opened `RagApp` and its quotas (None without keys), read when a task starts."""


@dataclass
class TaskAnswers:
    """Answers tasks (`run`) with the app's `RagApp`, and reports them on `broker`'s event bus and in `storage`."""

    opened: Opened
    broker: AnswerBroker
    storage: CallerTasks

    async def run(self, params: TaskSendParams, caller: TaskCaller) -> None:
        """Answer the task's question as `caller`; the task ends `completed`, `rejected`, `failed` or `canceled`."""
        task_id, context_id = params["id"], params["context_id"]
        try:
            await self._report(task_id, context_id, "working")
            artifact = await self._answer(params["message"], caller)
        except anyio.get_cancelled_exc_class():
            with anyio.move_on_after(END_REPORT_S, shield=True):  # a stalled subscriber holds no shutdown
                if task_id in self.broker.canceled:
                    await self._end(task_id, context_id, "canceled")
                else:
                    failure = Failure("shutting_down", CUT_DETAIL, retryable=True)
                    await self._end(task_id, context_id, "failed", error_part(failure))
            raise
        except Exception as exc:
            ended = failure_of(exc)
            if ended is None:
                log.exception("A2A task %s failed", task_id)
            state, failure = ended or ("failed", Failure("internal_error", f"the answer failed ({type(exc).__name__})"))
            await self._end(task_id, context_id, state, error_part(failure))
        else:
            await self.storage.update_task(task_id, "completed", new_artifacts=[artifact])
            update = TaskArtifactUpdateEvent(task_id=task_id, context_id=context_id, artifact=artifact, last_chunk=True)
            await self._emit(task_id, StreamResponse(artifact_update=update))
            await self._end(task_id, context_id, "completed")

    async def _answer(self, message: Message, caller: TaskCaller) -> Artifact:
        question, options = read_message(message)
        scope = caller.identity.scope(options.get("filter"), options.get("collection"))
        top_k = whole_number(options.get("top_k"))
        rag, quotas = self.opened()
        async with quota_held(quotas, caller.key):
            request = AnswerRequest(question, top_k=top_k, scope=scope)
            ticket = rag.admission.enter(caller.tenant)
            try:
                result = await rag.ask(request, admission=ticket)
            finally:
                ticket.close()  # (idempotent: the answer closed it already)
        output = answer_output(result)
        parts = [
            Part(text=answer_text(output)),
            Part(data=output.model_dump(mode="json"), media_type="application/json"),
        ]
        return Artifact(artifact_id=str(uuid.uuid4()), name="answer", parts=parts)

    async def _report(self, task_id: str, context_id: str, state: TaskState, parts: list[Part] | None = None) -> None:
        task = await self.storage.update_task(task_id, state)
        status = task["status"]
        if parts:
            status["message"] = Message(
                role="agent", parts=parts, message_id=str(uuid.uuid4()), task_id=task_id, context_id=context_id
            )
        update = TaskStatusUpdateEvent(task_id=task_id, context_id=context_id, status=status)
        await self._emit(task_id, StreamResponse(status_update=update))

    async def _end(self, task_id: str, context_id: str, state: TaskState, parts: list[Part] | None = None) -> None:
        await self._report(task_id, context_id, state, parts)
        await self.broker.event_bus.close(task_id)

    async def _emit(self, task_id: str, event: StreamResponse) -> None:
        await self.broker.event_bus.emit(task_id, event)


def read_message(message: Message) -> tuple[str, dict[str, Any]]:
    """The question of a message (its text parts, joined by blank lines) and its options (the first data part that
    is an object: `collection`, `filter`, `top_k`).

    Raises:
        InputError: no text.
    """
    texts = [part["text"] for part in message.get("parts", []) if isinstance(part.get("text"), str)]
    question = "\n\n".join(t for t in texts if t.strip())
    if not question.strip():
        raise InputError("the message holds no question: send it as a text part")
    options: dict[str, Any] = next((p["data"] for p in message.get("parts", []) if isinstance(p.get("data"), dict)), {})
    return question, options


def whole_number(top_k: Any) -> int | None:
    """A data part's `top_k`: a whole number from 1 to 100, also when sent as `10.0` (protobuf clients, such as
    `a2a-sdk`'s, send every JSON number as a double); None when not given.

    Raises:
        InputError: anything else.
    """
    if top_k is None:
        return None
    if isinstance(top_k, float) and top_k.is_integer():
        top_k = int(top_k)
    if not isinstance(top_k, int) or isinstance(top_k, bool) or not 1 <= top_k <= 100:
        raise InputError(f"top_k={top_k!r}; expected a whole number from 1 to 100")
    return top_k


@asynccontextmanager
async def quota_held(quotas: Quotas | None, key: ApiKey | None) -> AsyncIterator[None]:
    """A key holder's answer held to its quotas (`Quotas.admit`, which raises `QuotaExceededError` for a key over
    one) and its usage recorded when the block ends; the admin, and an app without quotas, pass unmetered."""
    if key is None or quotas is None:
        yield
        return
    async with metered_answer(quotas, key, await quotas.admit(key)):
        yield
