"""The tasks of `/a2a` without HTTP: who sees a task, how many ended tasks are kept, what a task's options read,
and how a task still running ends when the server stops."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest
from fasta2a.schema import Message, Part, TaskSendParams

from agent.core.errors import InputError
from agent.core.quotas import Quotas
from agent.http.a2a_tasks import (
    REQUEST_CALLER,
    AnswerBroker,
    CallerTasks,
    TaskAnswers,
    TaskCaller,
    read_message,
    utc_now,
    whole_number,
)
from agent.http.deps import CallerIdentity
from tests.agent_corpus import COVERED
from tests.mcp_rig import rag_app
from tests.scripted_model import ScriptedModel as Model

ADMIN = TaskCaller(CallerIdentity(None))


def holder(key_id: int) -> TaskCaller:
    """A key holder of `default` (no quota key: unmetered)."""
    return TaskCaller(CallerIdentity(("default",), key_id))


def message(*parts: Part) -> Message:
    return Message(role="user", parts=list(parts), message_id="m")


async def submitted(tasks: CallerTasks, caller: TaskCaller) -> str:
    """The id of a task `caller` submits."""
    token = REQUEST_CALLER.set(caller)
    try:
        return (await tasks.submit_task("c", message(Part(text="q"))))["id"]
    finally:
        REQUEST_CALLER.reset(token)


async def loaded(tasks: CallerTasks, caller: TaskCaller, task_id: str) -> Any:
    token = REQUEST_CALLER.set(caller)
    try:
        return await tasks.load_task(task_id)
    finally:
        REQUEST_CALLER.reset(token)


async def test_a_task_is_seen_by_its_key_and_the_admin_only() -> None:
    tasks = CallerTasks()
    task_id = await submitted(tasks, holder(1))
    assert (await loaded(tasks, holder(1), task_id))["id"] == task_id
    assert (await loaded(tasks, ADMIN, task_id))["id"] == task_id
    assert await loaded(tasks, holder(2), task_id) is None


async def test_only_the_last_ended_tasks_are_kept_and_running_ones_never_go() -> None:
    tasks = CallerTasks(max_tasks=2)
    running = await submitted(tasks, ADMIN)
    ended = []
    for _ in range(4):
        ended.append(await submitted(tasks, ADMIN))
        await tasks.update_task(ended[-1], "completed")
    await submitted(tasks, ADMIN)  # makes room: keeps the last ended ones and every running one
    assert running in tasks.tasks and ended[-1] in tasks.tasks
    assert not set(ended[:3]) & set(tasks.tasks) and set(tasks.owners) == set(tasks.tasks)


async def test_timestamps_are_rfc_3339_in_utc() -> None:
    tasks = CallerTasks()
    task_id = await submitted(tasks, ADMIN)
    updated = await tasks.update_task(task_id, "working")
    for stamp in (utc_now(), updated["status"]["timestamp"]):
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z", stamp), stamp


def test_a_message_reads_as_its_text_and_its_first_object_data_part() -> None:
    asked = message(Part(text="What"), Part(data=[1]), Part(data={"top_k": 3.0}), Part(text="  "), Part(text="why?"))
    assert read_message(asked) == ("What\n\nwhy?", {"top_k": 3.0})
    with pytest.raises(InputError, match="no question"):
        read_message(message(Part(data={"top_k": 3})))


@pytest.mark.parametrize(("given", "read"), [(None, None), (3, 3), (10.0, 10), (100, 100)])
def test_top_k_is_a_whole_number_from_1_to_100(given: Any, read: int | None) -> None:
    assert whole_number(given) == read


@pytest.mark.parametrize("given", [0, 101, 2.5, True, "5", [5]])
def test_top_k_refuses_anything_else(given: Any) -> None:
    with pytest.raises(InputError, match="top_k"):
        whole_number(given)


async def test_a_task_running_when_the_server_stops_ends_failed_shutting_down() -> None:
    model = Model()
    model.gate = asyncio.Event()  # the answer never ends on its own
    rag = rag_app(model)
    tasks = CallerTasks()
    broker = AnswerBroker(storage=tasks)
    no_quotas: Quotas | None = None
    broker.runner = TaskAnswers(lambda: (rag, no_quotas), broker, tasks).run
    async with rag:
        async with broker:
            task_id = await submitted(tasks, ADMIN)
            token = REQUEST_CALLER.set(ADMIN)
            try:
                params = TaskSendParams(id=task_id, context_id="c", message=message(Part(text=COVERED)))
                await broker.run_task(params)
            finally:
                REQUEST_CALLER.reset(token)
            await asyncio.wait_for(model.started.wait(), 30)
        task = tasks.tasks[task_id]
    assert model.cancelled and task["status"]["state"] == "failed"
    parts = task["status"]["message"]["parts"]
    assert parts[1]["data"]["error"] == "shutting_down" and parts[1]["data"]["retryable"] is True
