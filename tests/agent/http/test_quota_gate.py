"""API key quotas on the HTTP API, in-process (in-memory keys and usage, the scripted model): a key over its quota is
refused with 429 `quota_exceeded` and `Retry-After` before its body is read or any LLM call, in OpenAI's shape on
the OpenAI route; the usage recorded is what the answers reported; `/v1/usage` shows a key its own rows, the admin
every key's. Against real Postgres: test_quotas_stack.py."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry
from pydantic import SecretStr

from agent.core.keys import InMemoryKeys
from agent.core.quotas import InMemoryUsage, QuotaMetrics, Quotas
from agent.http.deps import app_state, get_keys
from tests.openai_rig import Rig, ask

ADMIN_KEY = "admin-secret"


async def quota_rig(**settings: Any) -> tuple[Rig, list[str]]:
    """A rig with two API keys (the default collection) and quotas over in-memory usage; the keys' tokens."""
    keys = InMemoryKeys()
    tokens = [(await keys.create(["default"], name))[1] for name in ("a", "b")]
    rig = Rig(api_key=SecretStr(ADMIN_KEY), **settings)
    quotas = Quotas(rig.settings, InMemoryUsage(), QuotaMetrics.create(CollectorRegistry()))
    app_state(rig.app).keys = keys
    app_state(rig.app).quotas = quotas
    rig.app.dependency_overrides[get_keys] = lambda: keys
    return rig, tokens


async def test_a_key_over_its_requests_per_minute_gets_429_with_retry_after_and_no_llm_call() -> None:
    rig, (token, other) = await quota_rig(key_requests_per_minute=2)
    async with rig.http(Authorization=f"Bearer {token}") as client:
        for _ in range(2):
            assert (await client.post("/v1/chat/completions", json=ask())).status_code == 200
        calls = len(rig.model.seen)
        refused = await client.post("/v1/chat/completions", json=ask())
        assert refused.status_code == 429, refused.text
        assert 1 <= int(refused.headers["Retry-After"]) <= 60
        error = refused.json()["error"]
        assert (error["code"], error["type"]) == ("quota_exceeded", "rate_limit_error") and error["message"]
        plain = await client.post("/v1/ask", json={"question": "q"})
        assert plain.status_code == 429 and plain.json()["error"] == "quota_exceeded" and plain.headers["Retry-After"]
        not_json = await client.post("/v1/ask", content=b"{not json")  # refused before the body is read
        assert not_json.status_code == 429
        assert (await client.get("/v1/models")).status_code == 200  # only answers are metered
    assert len(rig.model.seen) == calls
    async with rig.http(Authorization=f"Bearer {other}") as client:
        assert (await client.post("/v1/chat/completions", json=ask())).status_code == 200
    async with rig.http(Authorization=f"Bearer {ADMIN_KEY}") as client:  # the admin key has no quota
        for _ in range(3):
            assert (await client.post("/v1/chat/completions", json=ask())).status_code == 200


async def test_usage_is_what_the_answers_reported_and_a_spent_token_budget_refuses_the_next_request() -> None:
    rig, (token, other) = await quota_rig(key_tokens_per_day=10_000)
    reported = []
    async with rig.http(Authorization=f"Bearer {token}") as client:
        for _ in range(3):
            answered = await client.post("/v1/chat/completions", json=ask())
            assert answered.status_code == 200, answered.text
            reported.append(answered.json()["usage"])
        mine = (await client.get("/v1/usage", params={"days": 1})).json()
    assert [(r["key_id"], r["requests"]) for r in mine["usage"]] == [(1, 3)]
    totals = mine["totals"]
    assert totals["prompt_tokens"] == sum(u["prompt_tokens"] for u in reported) > 0
    assert totals["completion_tokens"] == sum(u["completion_tokens"] for u in reported) > 0
    assert totals["total_tokens"] == sum(u["total_tokens"] for u in reported)
    assert totals["llm_ms"] > 0
    async with rig.http(Authorization=f"Bearer {other}") as client:
        assert (await client.post("/v1/ask", json={"question": "q"})).status_code == 200
        theirs = (await client.get("/v1/usage")).json()
    assert [(r["key_id"], r["requests"]) for r in theirs["usage"]] == [(2, 1)]
    async with rig.http(Authorization=f"Bearer {ADMIN_KEY}") as client:
        every = (await client.get("/v1/usage", params={"days": 3})).json()
        assert (await client.get("/v1/usage", params={"days": 0})).status_code == 422
    assert [r["key_id"] for r in every["usage"]] == [1, 2] and every["totals"]["requests"] == 4

    spent_rig, (spender, _) = await quota_rig(key_tokens_per_day=totals["total_tokens"] // 3)
    async with spent_rig.http(Authorization=f"Bearer {spender}") as client:
        assert (await client.post("/v1/chat/completions", json=ask())).status_code == 200
        calls = len(spent_rig.model.seen)
        refused = await client.post("/v1/chat/completions", json=ask(stream=True))
        assert refused.status_code == 429 and refused.json()["error"]["code"] == "quota_exceeded"
        assert int(refused.headers["Retry-After"]) <= 24 * 3600
    assert len(spent_rig.model.seen) == calls


async def test_a_streamed_answer_s_usage_is_recorded_before_the_stream_ends() -> None:
    rig, (token, _) = await quota_rig()
    async with rig.http(Authorization=f"Bearer {token}") as client:
        streamed = await client.post(
            "/v1/chat/completions", json=ask(stream=True, stream_options={"include_usage": True})
        )
        assert streamed.status_code == 200
        usage_chunk = [line for line in streamed.text.splitlines() if '"usage": {' in line or '"usage":{' in line]
        assert usage_chunk
        rows = (await client.get("/v1/usage")).json()["usage"]
    assert rows[0]["requests"] == 1 and rows[0]["total_tokens"] > 0


async def test_a_key_over_its_quota_is_refused_before_admission_control_and_takes_no_place() -> None:
    rig, (token, other) = await quota_rig(key_requests_per_minute=1, answer_max_in_progress=1, answer_queue_max=0)
    app_state(rig.app).rag = rig.rag  # what the lifespan sets: the admission gate now asks this app's controller
    async with rig.http(Authorization=f"Bearer {token}") as client:
        assert (await client.post("/v1/ask", json={"question": "q"})).status_code == 200
    held = rig.rag.admission.enter()  # the only slot is busy and nothing may queue
    try:
        async with rig.http(Authorization=f"Bearer {token}") as client:
            over = await client.post("/v1/ask", json={"question": "q"})
        assert over.status_code == 429 and over.json()["error"] == "quota_exceeded"
        async with rig.http(Authorization=f"Bearer {other}") as client:
            overloaded = await client.post("/v1/ask", json={"question": "q"})
        assert overloaded.status_code == 503 and overloaded.json()["error"] == "overloaded"
        assert rig.rag.admission.in_progress == 1 and rig.rag.admission.queue_length == 0
    finally:
        held.close()
