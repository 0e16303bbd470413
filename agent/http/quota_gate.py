"""`QuotaGate`: an API key's quotas checked before any work, and its usage recorded after (pure ASGI middleware).

It sits inside the key guard (`agent.http.guards.BearerKeyGuard`, which leaves the holder's key in
`scope["state"][HOLDER_STATE]`) and outside admission control (`agent.http.admission_gate.AdmissionGate`), so a key
over its quota is refused before its body is read and never takes an admission slot. On a key holder's `POST` to a
metered path (`METERED_PATHS`: the answer paths) it asks the app's quotas (`AppState.quotas`,
`agent.core.quotas.Quotas.admit`, which reserves the most tokens the answer may use until its usage is recorded): a
refusal is 429 `quota_exceeded` with `Retry-After` (the OpenAI routes get OpenAI's
error shape from `agent.http.openai_errors.OpenAIErrorShape`, outside it). A request let through runs inside a meter
(`agent.core.quotas.metering`) to which its answers add their token usage and timings; that usage, with the request,
is recorded just before the response's last body message is sent (so a caller that reads `/v1/usage` after its answer
ends sees it). A recording that fails is logged; the answer is not failed for it.

MCP is metered per tool call instead (`agent.http.mcp.meter_caller`): `initialize`, notifications and `tools/list`
are not answer requests, and a tool call over the quota must be a tool error the client can show, not an HTTP 429.
A2A likewise per task (`agent.http.a2a_tasks`): an A2A task over the quota is a rejected task. Both record their
usage with `metered_answer`.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agent.core.errors import QuotaExceededError
from agent.core.keys import ApiKey, Usage
from agent.core.quotas import Quotas, Reservation, metering
from agent.http.admission_gate import ANSWER_PATHS
from agent.http.errors import error_response, failure_of
from agent.http.guards import HOLDER_STATE
from agent.http.state import scope_state

METERED_PATHS = ANSWER_PATHS
"""The paths whose `POST` by a key holder is checked against its quotas and recorded in its usage. `/mcp` and `/a2a`
are not: their answers (`ask` tool calls, tasks) are metered one by one, their protocol messages not at all."""

log = logging.getLogger(__name__)


def _quotas(scope: Scope) -> Quotas | None:
    """The app's quotas (`AppState.quotas`, opened by its lifespan with the API keys); None without them."""
    state = scope_state(scope)
    return None if state is None else state.quotas


class QuotaGate:
    """Refuse a key holder's request over its quotas; record the usage of the ones let through (module docstring)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        key: Any = scope.get("state", {}).get(HOLDER_STATE) if scope["type"] == "http" else None
        quotas = _quotas(scope)
        if (
            not isinstance(key, ApiKey)
            or quotas is None
            or scope["method"] != "POST"
            or scope["path"].rstrip("/") not in METERED_PATHS
        ):
            await self.app(scope, receive, send)
            return
        try:
            reservation = await quotas.admit(key)
        except QuotaExceededError as exc:
            await error_response(failure_of(exc))(scope, receive, send)
            return
        recorded = False

        async def recording_send(message: Message) -> None:
            nonlocal recorded
            if message["type"] == "http.response.body" and not message.get("more_body", False) and not recorded:
                recorded = True
                await record_usage(quotas, key, used, reservation)
            await send(message)

        with metering() as used:
            used.requests = 1
            try:
                await self.app(scope, receive, recording_send)
            finally:
                if not recorded:  # the response never ended normally (the client left, an error)
                    recorded = True
                    await record_usage(quotas, key, used, reservation)


async def record_usage(quotas: Quotas, key: ApiKey, used: Usage, reservation: Reservation) -> None:
    """Record what an answer of `key` used (`Quotas.record`, giving back what `reservation` held beyond it); a
    recording that fails is logged, never raised."""
    try:
        await quotas.record(key, used, reservation)
    except Exception:
        log.warning("could not record the usage of API key %d", key.id, exc_info=True)


@asynccontextmanager
async def metered_answer(quotas: Quotas, key: ApiKey, reservation: Reservation) -> AsyncIterator[None]:
    """One answer request of `key`, admitted with `reservation` (`Quotas.admit`): the block runs inside a meter
    (`agent.core.quotas.metering`, one request) whose usage is recorded when it ends, however it ends."""
    with metering() as used:
        used.requests = 1
        try:
            yield
        finally:
            await record_usage(quotas, key, used, reservation)
