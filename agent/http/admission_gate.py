"""`AdmissionGate`: admission control's place taken before a request's body is read (pure ASGI middleware).

Under overload most answer requests are refused (`agent.core.admission`). A refusal decided in the route first costs
the body's read, its JSON parse and validation, the caller's key and every other dependency, all on the event loop
that also streams the admitted answers. The gate takes the request's place in the app's admission controller
(`AdmissionController.enter`) as soon as a `POST` reaches an answer path (`ANSWER_PATHS`), after the host, key and
body-size guards, and answers 503 `overloaded` with `Retry-After` at once when it is refused (the OpenAI routes get
OpenAI's error shape from `agent.http.openai_errors.OpenAIErrorShape`, outside it). The place is taken, not only
asked about: when 128 clients arrive at once, each is decided in the order it reached the gate, before any of them
reads its body, so the refused ones cost no route work even while the admitted ones are still parsing theirs (a
gate that only asked whether the queue would refuse let every arrival of a burst through, since none had taken its
place yet: `rag bench burst`, docs/benchmarks.md). The ticket waits in `scope["state"]` (`TICKET_STATE`) for the
route (`agent.http.deps.admitted`, `openai_chat`), and the gate closes it when the response has ended, whatever the
route did (closing is idempotent). A malformed body is still a 422 whenever the service is not overloaded.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from agent.core.admission import AdmissionController, Tenant, Ticket
from agent.core.errors import OverloadedError
from agent.http.errors import error_response, failure_of
from agent.http.guards import HOLDER_STATE, SUBJECT_STATE
from agent.http.state import scope_state

ANSWER_PATHS = frozenset({"/v1/ask", "/v1/ask/stream", "/v1/chat/completions"})
"""The paths whose `POST` takes a place in admission control (`agent.http.deps.Admitted`, `openai_chat`). `/mcp` and
`/a2a` are not: their answers (`ask` tool calls, A2A tasks) take theirs one by one, and a refusal is a tool error or a
rejected task, not a 503."""


TICKET_STATE = "rag_admission_ticket"
"""The key of `scope["state"]` where `AdmissionGate` leaves the request's admission `Ticket` for the route."""


def gate_ticket(scope: Scope) -> Ticket | None:
    """The admission ticket `AdmissionGate` took for this request, or None (not an answer path, or no gate)."""
    ticket: Ticket | None = scope.get("state", {}).get(TICKET_STATE)
    return ticket


def request_ticket(admission: AdmissionController, scope: Scope) -> Ticket:
    """The request's admission ticket: the one the gate took before the body was read, else one taken now (an app
    without the gate), with the caller's fair share (`tenant_of`).

    Raises:
        agent.core.errors.OverloadedError: refused at once (503 with Retry-After).
    """
    return gate_ticket(scope) or admission.enter(tenant_of(scope))


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
    """Take an answer request's place in admission control, or refuse it, before its body is read (module
    docstring).

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
                    ticket = rag.admission.enter(tenant_of(scope))
                except OverloadedError as exc:
                    await error_response(failure_of(exc))(scope, receive, send)
                    return
                scope.setdefault("state", {})[TICKET_STATE] = ticket
                try:
                    await self.app(scope, receive, send)
                finally:
                    ticket.close()
                return
        await self.app(scope, receive, send)
