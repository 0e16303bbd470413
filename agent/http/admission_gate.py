"""`AdmissionGate`: admission control's refusal taken before a request's body is read (pure ASGI middleware).

Under overload most answer requests are refused (`agent.core.admission`). A refusal decided in the route's
`Admitted` dependency first costs the body's read, its JSON parse and validation, the caller's key and every other
dependency, all on the event loop that also streams the admitted answers. The gate asks the app's admission
controller (`AdmissionController.check`) as soon as a `POST` reaches an answer path (`ANSWER_PATHS`), after the
host, key and body-size guards, and answers 503 `overloaded` with `Retry-After` at once when the queue would refuse
it (the OpenAI routes get OpenAI's error shape from `agent.http.openai_errors.OpenAIErrorShape`, outside it). A
request it lets through takes its place in the route as before (`enter()` decides again), so a malformed body is
still a 422 whenever the service is not overloaded.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from agent.core.admission import Tenant
from agent.core.errors import OverloadedError
from agent.http.errors import error_response, failure_of
from agent.http.guards import HOLDER_STATE, SUBJECT_STATE
from agent.http.state import scope_state

ANSWER_PATHS = frozenset({"/v1/ask", "/v1/ask/stream", "/v1/chat/completions"})
"""The paths whose `POST` takes a place in admission control (`agent.http.deps.Admitted`, `openai_chat`). `/mcp` and
`/a2a` are not: their answers (`ask` tool calls, A2A tasks) take theirs one by one, and a refusal is a tool error or a
rejected task, not a 503."""


def tenant_of(scope: Scope) -> Tenant:
    """The admission tenant of a request (`agent.core.admission.Tenant`): the id of the API key `BearerKeyGuard`
    found for it, `sub:<subject>` for a signed-in user's accepted token, or None (no key, the admin key, a keyless
    server)."""
    state = scope.get("state", {})
    holder, subject = state.get(HOLDER_STATE), state.get(SUBJECT_STATE)
    if holder is not None:
        key_id: int = holder.id
        return key_id
    return None if subject is None else f"sub:{subject}"


class AdmissionGate:
    """Refuse an answer request the admission queue would refuse, before its body is read (module docstring).

    Args:
        app: the rest of the application; the admission controller is the one of the app's opened `RagApp`
            (`AppState.rag`'s `admission`; until the lifespan opened it, every request passes).
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST" and scope["path"] in ANSWER_PATHS:
            state = scope_state(scope)
            rag = None if state is None else state.rag
            if rag is not None:
                try:
                    rag.admission.check(tenant_of(scope))
                except OverloadedError as exc:
                    await error_response(failure_of(exc))(scope, receive, send)
                    return
        await self.app(scope, receive, send)
