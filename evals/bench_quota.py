"""How long `rag serve` takes to refuse an API key over its quota (`rag bench quota`): 429 `quota_exceeded` latency
p50/p95 in ms, one client serially and 16 clients at once, for each limit (requests per minute, tokens per day) on
`/v1/chat/completions` (OpenAI's error shape) and `/v1/ask`.

The server is the real HTTP app (`agent.http.create_app`: host and key guards, the quota gate, admission, the OpenAI
error shape) under uvicorn on a loopback port, in a thread of this process, over an in-memory `RagApp` whose LLM
counts its calls (the refusals must make none) and in-memory keys and usage (`agent.core.keys.InMemoryKeys`,
`agent.core.quotas.InMemoryUsage`): a refusal reads Postgres at most once per `API_KEYS_CACHE_S` per key (the token
sum), so the figures are those of the cached path every other refusal takes. The client is `httpx` in this process,
so its own time is included. Percentiles: `tools.stats.percentiles`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from prometheus_client import CollectorRegistry
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo, FunctionModel

from agent.config.settings import Settings
from agent.core.app import RagApp
from agent.core.keys import InMemoryKeys
from agent.core.quotas import InMemoryUsage, QuotaMetrics, Quotas
from agent.core.wiring import Services
from agent.http import create_app
from agent.http.deps import app_state
from evals.machine import machine_info
from evals.plots import emit_report
from infra.threaded_server import ThreadedServer
from tools.in_memory import InMemoryCollection
from tools.records import Usage
from tools.stats import percentiles

CONCURRENCY = 16
"""Clients at once in the concurrent phase."""
LIMIT_MS = 50.0
"""The refusal's latency budget (p95), ms."""


@dataclass(frozen=True)
class QuotaBenchParams:
    """Requests per phase (`requests`), after `warmup` unmeasured ones."""

    requests: int = 400
    warmup: int = 50


class CountingModel:
    """The LLM behind `FunctionModel`: counts its calls and answers one word."""

    def __init__(self) -> None:
        self.calls = 0

    async def stream(self, messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        self.calls += 1
        yield "ok"


async def _timed(client: httpx.AsyncClient, path: str, body: dict[str, Any]) -> float:
    """One request's latency in ms; it must be a 429 `quota_exceeded` with `Retry-After`."""
    start = time.perf_counter()
    response = await client.post(path, json=body)
    elapsed = (time.perf_counter() - start) * 1000
    if response.status_code != 429 or "Retry-After" not in response.headers or "quota_exceeded" not in response.text:
        raise RuntimeError(f"expected a 429 quota_exceeded, got {response.status_code}: {response.text[:200]}")
    return elapsed


async def _phase(
    url: str, token: str, path: str, body: dict[str, Any], params: QuotaBenchParams, clients: int
) -> list[float]:
    """`params.requests` refusals by `clients` clients at once, each on its own connection, opened and warmed
    (`params.warmup` refusals in all) before any is measured, so connection set-up is not counted."""
    headers = {"Authorization": f"Bearer {token}"}
    per_client = max(1, params.requests // clients)
    latencies: list[float] = []
    opened = [httpx.AsyncClient(base_url=url, headers=headers, timeout=30) for _ in range(clients)]
    try:
        for i in range(max(params.warmup, clients)):
            await _timed(opened[i % clients], path, body)

        async def client_loop(client: httpx.AsyncClient) -> None:
            for _ in range(per_client):
                latencies.append(await _timed(client, path, body))

        await asyncio.gather(*(client_loop(c) for c in opened))
    finally:
        for client in opened:
            await client.aclose()
    return latencies


def _summary(latencies: list[float]) -> dict[str, float | int]:
    return {k: v if k == "n" else round(float(v), 2) for k, v in percentiles(latencies, (50, 95, 99)).items()}


async def run_quota_bench(params: QuotaBenchParams) -> dict[str, Any]:
    """Every (limit, path, clients) phase: latency percentiles in ms, the LLM calls made (must be 0), the machine."""
    settings = Settings.model_validate({"refusal_min_score": 0.3, "api_keys_cache_s": 5.0})
    model = CountingModel()
    collection = InMemoryCollection()
    rag = RagApp(settings, Services(collection, collection, FunctionModel(stream_function=model.stream), {}))
    app = create_app(settings, rag=rag)
    keys, usage = InMemoryKeys(), InMemoryUsage()
    _, rpm_token = await keys.create(["default"], "rpm", requests_per_minute=1)
    tpd_key, tpd_token = await keys.create(["default"], "tpd", tokens_per_day=1)
    today = datetime.now(UTC).date()
    await usage.record(tpd_key.id, today, Usage(1, 1, 1))  # its day's budget is spent
    bodies: dict[str, dict[str, Any]] = {
        "/v1/chat/completions": {"model": "triton-rag", "messages": [{"role": "user", "content": "q"}]},
        "/v1/ask": {"question": "q"},
    }
    phases: list[dict[str, Any]] = []
    with ThreadedServer(app) as served:
        app_state(app).keys = keys  # after the lifespan, which opens none for a given RagApp
        app_state(app).quotas = Quotas(settings, usage, QuotaMetrics.create(CollectorRegistry()))
        async with httpx.AsyncClient(base_url=served.url, headers={"Authorization": f"Bearer {rpm_token}"}) as c:
            first = await c.post("/v1/ask", json={"question": "q"})  # the one request of its minute
            if first.status_code != 200:
                raise RuntimeError(f"the first request of the minute was refused: {first.text[:200]}")
        calls_before = model.calls
        for limit, token in (("requests_per_minute", rpm_token), ("tokens_per_day", tpd_token)):
            for path, body in bodies.items():
                for clients in (1, CONCURRENCY):
                    latencies = await _phase(served.url, token, path, body, params, clients)
                    phases.append({"limit": limit, "path": path, "clients": clients, "ms": _summary(latencies)})
    worst_p95 = max(float(p["ms"]["p95"]) for p in phases)
    return {
        "benchmark": "quota refusals (rag bench quota)",
        "params": {"requests": params.requests, "warmup": params.warmup, "concurrency": CONCURRENCY},
        "phases": phases,
        "llm_calls_during_refusals": model.calls - calls_before,
        "worst_p95_ms": round(worst_p95, 2),
        "within_budget": worst_p95 < LIMIT_MS,
        "budget_ms": LIMIT_MS,
        "machine": machine_info({"limits": "moving window, in-process memory"}),
    }


def run_quota_bench_command(params: QuotaBenchParams, as_json: bool, output: Path) -> None:
    """Run the bench, write its JSON to `output`, print a table (or the JSON with `as_json`)."""
    emit_report(asyncio.run(run_quota_bench(params)), as_json, output, render)


def render(results: dict[str, Any], console: Any) -> None:
    """A rich table of the refusal latency per limit, path and clients, then the LLM calls and the worst p95."""
    from rich.table import Table

    table = Table("limit", "path", "clients", "p50 ms", "p95 ms", "p99 ms", title="quota refusals (429)")
    for p in results["phases"]:
        ms = p["ms"]
        table.add_row(p["limit"], p["path"], str(p["clients"]), str(ms["p50"]), str(ms["p95"]), str(ms["p99"]))
    console.print(table)
    console.print(
        f"LLM calls during refusals: {results['llm_calls_during_refusals']}; worst p95 {results['worst_p95_ms']} ms "
        f"(budget {LIMIT_MS:g} ms)"
    )
