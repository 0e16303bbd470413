"""The `rag serve` app over the in-memory documents and a scripted model, driven by the official A2A client
(`a2a-sdk`) in-process, with the events of a task gathered as the client yields them."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
from a2a.client import ClientConfig, create_client
from a2a.helpers.proto_helpers import get_data_parts, get_text_parts, new_data_part, new_text_part
from a2a.types import Artifact, Message, Role, SendMessageRequest, TaskState, TaskStatus
from fastapi import FastAPI

from agent.core.keys import KeyRing
from agent.core.quotas import Quotas
from agent.http.deps import app_state


@dataclass
class Outcome:
    """What the client saw of one task: its states in order, its artifacts and its last status message."""

    states: list[TaskState] = field(default_factory=list)
    artifacts: list[Artifact] = field(default_factory=list)
    message: Message | None = None
    task_id: str = ""

    def seen(self, status: TaskStatus) -> None:
        """Add a status the client received."""
        self.states.append(status.state)
        if status.HasField("message"):
            self.message = status.message

    @property
    def state(self) -> TaskState:
        """The last state."""
        return self.states[-1]

    @property
    def error(self) -> dict[str, Any]:
        """The data part of the last status message (a task that failed or was rejected)."""
        assert self.message is not None
        return dict(get_data_parts(list(self.message.parts))[0])

    @property
    def error_text(self) -> str:
        """The text of the last status message."""
        assert self.message is not None
        return "\n".join(get_text_parts(list(self.message.parts)))

    def answer(self) -> tuple[str, dict[str, Any]]:
        """The text and the structured data of the one `answer` artifact."""
        assert len(self.artifacts) == 1 and self.artifacts[0].name == "answer", self.artifacts
        parts = list(self.artifacts[0].parts)
        return "\n".join(get_text_parts(parts)), dict(get_data_parts(parts)[0])


@asynccontextmanager
async def served(
    app: FastAPI, keys: KeyRing | None = None, quotas: Quotas | None = None
) -> AsyncIterator[httpx.AsyncClient]:
    """`app` with its lifespan run (and `keys`, `quotas` set as its lifespan would), and an httpx client over it."""
    transport = httpx.ASGITransport(app=app)
    async with app.router.lifespan_context(app):
        if keys is not None:
            app_state(app).keys = keys  # a test app's lifespan brings no keys
        app_state(app).quotas = quotas
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost", timeout=30) as http:
            yield http


def question(text: str, options: dict[str, Any] | None = None) -> SendMessageRequest:
    """A `SendMessage` request asking `text`, with a data part of `options` when given."""
    parts = [new_text_part(text)] + ([new_data_part(options)] if options else [])
    return SendMessageRequest(message=Message(message_id="m1", role=Role.ROLE_USER, parts=parts))


async def ask(
    http: httpx.AsyncClient,
    token: str | None,
    text: str,
    options: dict[str, Any] | None = None,
    *,
    streaming: bool = True,
) -> Outcome:
    """Ask `text` with the A2A client over `http` (sending `Authorization: Bearer <token>`), reading the card at
    `/a2a`; the task's outcome as the client saw it: streamed events, or the one task `SendMessage` answers."""
    if token is not None:
        http.headers["Authorization"] = f"Bearer {token}"
    client = await create_client("http://localhost/a2a", ClientConfig(httpx_client=http, streaming=streaming))
    outcome = Outcome()
    async for event in client.send_message(question(text, options)):
        if event.HasField("task"):
            outcome.task_id = event.task.id
            outcome.seen(event.task.status)
            outcome.artifacts.extend(event.task.artifacts)
        elif event.HasField("status_update"):
            outcome.seen(event.status_update.status)
        elif event.HasField("artifact_update"):
            outcome.artifacts.append(event.artifact_update.artifact)
    return outcome
