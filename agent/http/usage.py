"""`GET /v1/usage?days=N`: what API keys used per UTC day (`agent.core.quotas`, the `key_usage` table): a key holder
sees its own key's rows, the admin key every key's."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request

from agent.core.keys import report_json
from agent.core.quotas import utc_day
from agent.http.deps import Caller, app_state
from agent.http.errors import ERROR_RESPONSES, ApiError

MAX_DAYS = 366
"""Most days one request may cover."""

router = APIRouter(tags=["usage"], responses=ERROR_RESPONSES)


@router.get("/v1/usage")
async def usage(
    request: Request,
    caller: Caller,
    days: Annotated[int, Query(ge=1, le=MAX_DAYS, description="UTC days covered, today included.")] = 7,
) -> dict[str, Any]:
    """Usage per key and UTC day over the last `days` days, today included: `{"days", "since": "YYYY-MM-DD",
    "usage": [{"key_id", "key_name", "day", "requests", "prompt_tokens", "completion_tokens", "total_tokens",
    "embed_ms", "llm_ms"}], "totals": {...}}` (rows by day then key id; a key holder gets only its own key's rows, a
    signed-in user none).
    404 `not_found` on a server without API keys."""
    quotas = app_state(request.app).quotas
    if quotas is None:
        raise ApiError(404, "not_found", "this server keeps no usage: it has no API keys table")
    since = utc_day(quotas.clock()) - timedelta(days=days - 1)
    keyless = caller.collections is not None and caller.key_id is None  # a signed-in user: no key, no usage rows
    return report_json(days, since, [] if keyless else await quotas.usage.report(since, caller.key_id))
