"""The scopes an API-key check was asked for, shared by the key and scoped-route tests."""

from __future__ import annotations

from typing import Any

from agent.core.answer import AnswerRequest
from agent.core.app import RagApp
from agent.core.results import AskResult
from tools.scope import SearchScope


def scopes_asked(rag: RagApp) -> list[SearchScope | None]:
    """The search scope of every answer `rag.ask` is asked for from now on, in order (a spy around the method)."""
    scopes: list[SearchScope | None] = []
    ask = rag.ask

    async def spy(request: AnswerRequest | str, **kwargs: Any) -> AskResult:
        assert isinstance(request, AnswerRequest)
        scopes.append(request.scope)
        return await ask(request, **kwargs)

    rag.ask = spy  # type: ignore[method-assign]
    return scopes


