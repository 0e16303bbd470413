"""API key quotas and usage on a real Postgres: keys made and changed with `rag keys create|update`, the HTTP app
(in-process, the scripted model) over the keys and `key_usage` tables as `rag serve` opens them. A key over its
requests per minute gets 429 + Retry-After in OpenAI's shape with no LLM call; the usage table holds exactly the
usage the OpenAI responses reported; a spent token budget refuses the next request; a key sees only its own usage,
the admin key all; `rag keys usage --json` prints the same rows."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from pydantic import SecretStr

from agent.config.settings import Settings
from agent.core.keys import CachedKeys
from agent.core.quotas import Quotas
from agent.http.deps import app_state, get_keys
from tests.agent_corpus import COVERED
from tests.conftest import run_cli
from tests.openai_rig import Rig, ask
from tools.store.keys import PostgresKeys, open_keys

ADMIN_KEY = "admin-secret"


async def keys_cli(settings: Settings, database_url: str, *args: str) -> Any:
    """`rag keys ARGS --json` on `database_url`; its JSON."""
    env = {"DATABASE_URL": database_url}
    result = await asyncio.to_thread(run_cli, settings, "keys", *args, "--json", extra_env=env)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def served(keys: PostgresKeys, **settings: Any) -> Rig:
    """The app over the real keys and usage, as `create_app`'s lifespan opens them."""
    rig = Rig(api_key=SecretStr(ADMIN_KEY), **settings)
    cached = CachedKeys(keys, rig.settings.api_keys_cache_s)
    app_state(rig.app).keys = cached
    app_state(rig.app).quotas = Quotas(rig.settings, keys.usage)
    rig.app.dependency_overrides[get_keys] = lambda: cached
    return rig


async def test_quotas_and_usage_of_keys_made_with_the_cli(settings: Settings, fresh_db: str) -> None:
    limited = await keys_cli(settings, fresh_db, "create", "--collections", "default", "--requests-per-minute", "2")
    other = await keys_cli(settings, fresh_db, "create", "--collections", "default", "--name", "other")
    assert (limited["requests_per_minute"], limited["tokens_per_day"]) == (2, None)
    async with open_keys(fresh_db) as keys:
        rig = served(keys, api_keys_cache_s=0)
        reported = []
        async with rig.http(Authorization=f"Bearer {limited['token']}") as client:
            for _ in range(2):
                answered = await client.post("/v1/chat/completions", json=ask())
                assert answered.status_code == 200, answered.text
                reported.append(answered.json()["usage"])
            calls = len(rig.model.seen)
            refused = await client.post("/v1/chat/completions", json=ask())
            assert refused.status_code == 429 and 1 <= int(refused.headers["Retry-After"]) <= 60
            error = refused.json()["error"]
            assert (error["code"], error["type"]) == ("quota_exceeded", "rate_limit_error")
            assert len(rig.model.seen) == calls  # the LLM saw no call for it
            mine = (await client.get("/v1/usage")).json()
        assert [(r["key_id"], r["requests"]) for r in mine["usage"]] == [(limited["id"], 2)]
        for kind in ("prompt_tokens", "completion_tokens", "total_tokens"):
            assert mine["totals"][kind] == sum(u[kind] for u in reported) > 0, kind

        # the key's own limit cleared, a token budget that its usage so far has spent
        spent = mine["totals"]["total_tokens"]
        changed = await keys_cli(
            settings,
            fresh_db,
            "update",
            str(limited["id"]),
            "--requests-per-minute",
            "default",
            "--tokens-per-day",
            str(spent),
        )
        assert (changed["requests_per_minute"], changed["tokens_per_day"]) == (None, spent)
        rig = served(keys, api_keys_cache_s=0)
        async with rig.http(Authorization=f"Bearer {limited['token']}") as client:
            refused = await client.post("/v1/ask", json={"question": "q"})
            assert refused.status_code == 429 and refused.json()["error"] == "quota_exceeded"
            assert int(refused.headers["Retry-After"]) <= 24 * 3600
        assert not rig.model.seen
        async with rig.http(Authorization=f"Bearer {other['token']}") as client:
            assert (await client.post("/v1/ask", json={"question": "q"})).status_code == 200
            theirs = (await client.get("/v1/usage", params={"days": 2})).json()
        assert [r["key_id"] for r in theirs["usage"]] == [other["id"]]
        async with rig.http(Authorization=f"Bearer {ADMIN_KEY}") as client:
            every = (await client.get("/v1/usage")).json()
        assert sorted(r["key_id"] for r in every["usage"]) == [limited["id"], other["id"]]

    printed = await keys_cli(settings, fresh_db, "usage", "--days", "2")
    assert set(printed) == {"days", "since", "usage", "totals"} and printed["days"] == 2
    assert printed["usage"] == every["usage"] and printed["totals"] == every["totals"]
    assert set(printed["usage"][0]) == {
        "key_id",
        "key_name",
        "day",
        "requests",
        "prompt_tokens",
        "completion_tokens",
        "total_tokens",
        "embed_ms",
        "llm_ms",
    }
    assert printed["totals"]["requests"] == 3


async def test_concurrent_answers_cannot_overrun_a_day_s_token_budget(fresh_db: str) -> None:
    """30 answers asked at once by a key with 1,000 tokens a day (the usage in Postgres): the first admitted reserves
    what is left of the day (an answer may use up to ANSWER_TOKEN_BUDGET), so the other 29 are refused with 429
    while it runs; once its usage is recorded, in place of its reservation, the next request is let through."""
    async with open_keys(fresh_db) as keys:
        _, token = await keys.create(["default"], "budget", tokens_per_day=1000)
        rig = served(keys, api_keys_cache_s=0)
        rig.model.gate = asyncio.Event()
        async with rig.http(Authorization=f"Bearer {token}") as client:
            asks = [asyncio.create_task(client.post("/v1/ask", json={"question": COVERED})) for _ in range(30)]
            await asyncio.wait_for(rig.model.started.wait(), 60)
            running: set[asyncio.Task[Any]] = set(asks)
            while len(running) > 1:  # until every request but the admitted one is answered (or none is, in 5 s)
                done, running = await asyncio.wait(running, timeout=5, return_when=asyncio.FIRST_COMPLETED)
                if not done:
                    break
            rig.model.gate.set()
            statuses = sorted(r.status_code for r in await asyncio.gather(*asks))
            assert statuses == [200] + [429] * 29
            refused = [r for r in map(asyncio.Task.result, asks) if r.status_code == 429]
            assert "answers in progress" in refused[0].json()["detail"]
            assert int(refused[0].headers["Retry-After"]) <= rig.settings.answer_timeout_s
            again = await client.post("/v1/ask", json={"question": COVERED})  # the reservation was given back
            assert again.status_code == 200, again.text
            mine = (await client.get("/v1/usage")).json()
        assert mine["totals"]["requests"] == 2 and 0 < mine["totals"]["total_tokens"] < 1000
