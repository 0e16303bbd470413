"""The scripted LLM the in-process HTTP, OpenAI-route and MCP tests stream from."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo


class ScriptedModel:
    """The fake LLM behind `FunctionModel(stream_function=model.stream)`: streams `text` in 5-character pieces (or
    raises `error`) after `gate` opens, when set; `started` is set on a call, `cancelled` when it is cancelled while
    waiting; records the messages, model settings and tool names it was sent."""

    def __init__(self) -> None:
        self.text = "It does [1]."
        self.error: Exception | None = None
        self.gate: asyncio.Event | None = None
        self.started = asyncio.Event()
        self.cancelled = False
        self.seen: list[list[ModelMessage]] = []
        self.settings: list[dict[str, Any]] = []
        self.tools: list[list[str]] = []

    async def stream(self, messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        self.seen.append(list(messages))
        self.settings.append(dict(info.model_settings or {}))
        self.tools.append([tool.name for tool in info.function_tools])
        self.started.set()
        try:
            if self.gate is not None:
                await self.gate.wait()
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        if self.error is not None:
            raise self.error
        for i in range(0, len(self.text), 5):
            yield self.text[i : i + 5]
