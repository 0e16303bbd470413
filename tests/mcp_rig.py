"""An MCP client connected in-process to the app over scripted models, and the text of a tool result."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from mcp import Client
from mcp_types import CallToolResult, TextContent
from pydantic_ai.models.function import FunctionModel

from agent.config.settings import Settings
from agent.core.app import RagApp
from agent.core.wiring import Services
from agent.http.mcp_server import build_mcp_server
from tests.agent_corpus import DOCUMENTS
from tests.scripted_model import ScriptedModel as Model
from tools.in_memory import InMemoryCollection


def rag_app(model: Model, **update: Any) -> RagApp:
    """A `RagApp` over the in-memory `DOCUMENTS` and `model`."""
    settings = Settings.model_validate({"refusal_min_score": 0.3, "answer_timeout_s": 10.0} | update)
    collection = InMemoryCollection(DOCUMENTS)
    return RagApp(settings, Services(collection, collection, FunctionModel(stream_function=model.stream)))


@asynccontextmanager
async def connected(rag: RagApp) -> AsyncIterator[Client]:
    """The SDK's client connected in-process to the MCP server over the opened `rag`."""
    async with rag, Client(build_mcp_server(lambda: rag)) as client:
        yield client


def text_of(result: CallToolResult) -> str:
    """The text of a result's single text block."""
    assert len(result.content) == 1 and isinstance(result.content[0], TextContent), result.content
    return result.content[0].text


