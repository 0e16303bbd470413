"""A scripted model and app for conversation tests: a subject, a follow-up, the texts a turn sends, and the HTTP app
served in-process over them (`ConversationServed`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
from pydantic_ai.messages import ModelMessage, TextPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from agent.config.settings import Settings
from agent.core.app import RagApp
from agent.core.wiring import Services
from agent.http import create_app
from agent.http.deps import get_rag
from tests.agent_corpus import DOCUMENTS
from tools.in_memory import InMemoryCollection
from tools.in_memory_conversations import InMemoryConversations

SUBJECT = "Vitamin B12 deficiency and homocysteine"


FOLLOW_UP = "and what about its side effects?"  # no word in common with any document: alone it is refused


class Model:
    """A FunctionModel that answers `reply` and records the messages of every request."""

    def __init__(self, reply: str = "It raises it [1].") -> None:
        self.reply = reply
        self.seen: list[list[ModelMessage]] = []
        self.model = FunctionModel(stream_function=self.stream)

    async def stream(self, messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        self.seen.append(list(messages))
        yield self.reply


def app(model: Model, **settings: Any) -> tuple[RagApp, InMemoryConversations]:
    conversations = InMemoryConversations()
    collection = InMemoryCollection(DOCUMENTS)
    services = Services(collection, collection, model.model, conversations=conversations)
    return RagApp(Settings.model_validate({"refusal_min_score": 0.3} | settings), services), conversations


def texts(messages: list[ModelMessage]) -> list[tuple[str, str]]:
    """(role, text) of the user prompts and model texts in `messages`."""
    out: list[tuple[str, str]] = []
    for message in messages:
        for part in message.parts:
            if isinstance(part, UserPromptPart) and isinstance(part.content, str):
                out.append(("user", part.content))
            elif isinstance(part, TextPart):
                out.append(("model", part.content))
    return out


class ConversationServed:
    """The app, its model and collection, and an ASGI client factory."""

    def __init__(self, **update: Any) -> None:
        settings = Settings.model_validate({"refusal_min_score": 0.3} | update)
        self.model = Model()
        self.collection = InMemoryCollection(DOCUMENTS)
        self.rag = RagApp(settings, Services(self.collection, self.collection, self.model.model))
        self.app = create_app(settings)
        self.app.dependency_overrides[get_rag] = lambda: self.rag

    def client(self, **headers: str) -> httpx.AsyncClient:
        transport = httpx.ASGITransport(app=self.app, raise_app_exceptions=False)
        return httpx.AsyncClient(transport=transport, base_url="http://rag", headers=headers, timeout=30)
