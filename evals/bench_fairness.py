"""A fair share per key under overload (`rag bench fairness`): one API key floods `rag serve` with many clients at
once while a second key asks once a second; the figure is the share of the steady key's requests answered (target
≥ 90 %), beside the flooding key's answers and refusals.

The server is the real HTTP app (`agent.http.create_app`: guards, quota gate, admission gate, admission control with
`ANSWER_KEY_SHARE` and fair queuing, `agent.core.admission`) under uvicorn on a loopback port, in a thread of this
process, over an in-memory `RagApp` whose LLM holds each answer's slot for `answer_s` seconds (a fixed service time,
so the overload is the same on every machine) and in-memory keys (`agent.core.keys.InMemoryKeys`). The flooding
clients resend at once after every answer or refusal (after the refusal's `Retry-After` when `--honour-retry-after`);
the steady key sends one request a second, each on its own timer, whatever the earlier ones are doing.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo, FunctionModel

from agent.config.settings import Settings
from agent.core.app import RagApp
from agent.core.keys import InMemoryKeys
from agent.core.wiring import Services
from agent.http import create_app
from agent.http.deps import app_state
from evals.machine import machine_info
from evals.plots import emit_report
from infra.threaded_server import ThreadedServer
from tools.in_memory import InMemoryCollection
from tools.ingest import SourceDocument
from tools.stats import percentiles

TARGET_ANSWERED = 0.90
"""The share of the steady key's requests that must be answered (200) while the other key floods."""

DOCUMENT = SourceDocument("b12", "Vitamin B12", "Vitamin B12 deficiency raises plasma homocysteine.", "bench", {})
QUESTION = "Vitamin B12 deficiency and homocysteine"


@dataclass(frozen=True)
class FairnessBenchParams:
    """The load: `flood_clients` clients of one key at once, the steady key's one request per `steady_interval_s`
    for `duration_s` seconds, each answer holding its slot `answer_s` seconds; the admission settings
    (`max_in_progress`, `queue_max`, `key_share`: `ANSWER_MAX_IN_PROGRESS`, `ANSWER_QUEUE_MAX`, `ANSWER_KEY_SHARE`).
    """

    flood_clients: int = 64
    duration_s: float = 20.0
    steady_interval_s: float = 1.0
    answer_s: float = 0.5
    max_in_progress: int = 4
    queue_max: int = 16
    key_share: float = 0.5

    def __post_init__(self) -> None:
        """Raises ValueError for a non-positive duration, interval, answer time or client count."""
        if self.flood_clients < 1 or min(self.duration_s, self.steady_interval_s, self.answer_s) <= 0:
            raise ValueError(
                f"flood_clients={self.flood_clients}, duration_s={self.duration_s}, steady_interval_s="
                f"{self.steady_interval_s}, answer_s={self.answer_s}: expected a client and positive times"
            )


class SlowModel:
    """The LLM behind `FunctionModel`: holds each answer `answer_s` seconds, then answers citing passage 1."""

    def __init__(self, answer_s: float) -> None:
        self.answer_s = answer_s

    async def stream(self, messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        await asyncio.sleep(self.answer_s)
        yield "It does [1]."


REFUSAL_SETTINGS = {
    "ANSWER_KEY_SHARE": "key_share",
    "ANSWER_QUEUE_MAX": "queue_full",
    "95th percentile": "expected_wait",
    "in the queue, twice": "deadline",
}
"""A 503 `overloaded` detail's telltale -> admission control's reason (`agent.core.admission.RejectionReason`)."""


async def _ask(client: httpx.AsyncClient) -> tuple[str, float, float | None]:
    """One `/v1/ask`: its outcome (`answered`, `overloaded:<reason>`, or another error kind), latency in ms, and the
    refusal's Retry-After in seconds (None when answered)."""
    start = time.perf_counter()
    response = await client.post("/v1/ask", json={"question": QUESTION})
    elapsed = (time.perf_counter() - start) * 1000
    if response.status_code == 200:
        return "answered", elapsed, None
    retry = response.headers.get("Retry-After")
    try:
        body = response.json()
        kind, detail = str(body["error"]), str(body["detail"])
    except (ValueError, KeyError, TypeError):
        kind, detail = str(response.status_code), ""
    if kind == "overloaded":
        kind += ":" + next((r for t, r in REFUSAL_SETTINGS.items() if t in detail), "other")
    return kind, elapsed, float(retry) if retry else None


async def run_fairness_bench(params: FairnessBenchParams, honour_retry_after: bool = False) -> dict[str, Any]:
    """Flood with one key beside a steady key: each key's outcomes, latency percentiles in ms, and whether the
    steady key's answered share meets `TARGET_ANSWERED`."""
    settings = Settings.model_validate(
        {
            "refusal_min_score": 0.0,
            "answer_cache": False,
            "answer_max_in_progress": params.max_in_progress,
            "answer_queue_max": params.queue_max,
            "answer_queue_deadline_s": 30.0,
            "answer_key_share": params.key_share,
        }
    )
    collection = InMemoryCollection([DOCUMENT])
    model = FunctionModel(stream_function=SlowModel(params.answer_s).stream)
    rag = RagApp(settings, Services(collection, collection, model, {}))
    app = create_app(settings, rag=rag)
    keys = InMemoryKeys()
    _, flood_token = await keys.create(["default"], "flood")
    _, steady_token = await keys.create(["default"], "steady")
    outcomes: dict[str, Counter[str]] = {"flood": Counter(), "steady": Counter()}
    latencies: dict[str, list[float]] = {"flood": [], "steady": []}
    with ThreadedServer(app) as served:
        app_state(app).keys = keys  # after the lifespan, which opens none for a given RagApp
        end = time.perf_counter() + params.duration_s
        limits = httpx.Limits(max_connections=params.flood_clients + 64)

        def client(token: str) -> httpx.AsyncClient:
            headers = {"Authorization": f"Bearer {token}"}
            return httpx.AsyncClient(base_url=served.url, headers=headers, timeout=120, limits=limits)

        async def flood_loop(c: httpx.AsyncClient) -> None:
            while time.perf_counter() < end:
                outcome, ms, retry = await _ask(c)
                outcomes["flood"][outcome] += 1
                latencies["flood"].append(ms)
                if honour_retry_after and retry is not None:
                    await asyncio.sleep(min(retry, max(0.0, end - time.perf_counter())))

        async def steady_one(c: httpx.AsyncClient) -> None:
            outcome, ms, _ = await _ask(c)
            outcomes["steady"][outcome] += 1
            latencies["steady"].append(ms)

        async with client(flood_token) as flood, client(steady_token) as steady:
            flooders = [asyncio.create_task(flood_loop(flood)) for _ in range(params.flood_clients)]
            await asyncio.sleep(min(1.0, params.duration_s / 4))  # the flood is under way first
            asks: list[asyncio.Task[None]] = []
            while time.perf_counter() < end:
                asks.append(asyncio.create_task(steady_one(steady)))
                await asyncio.sleep(params.steady_interval_s)
            await asyncio.gather(*flooders, *asks)
    steady_sent = sum(outcomes["steady"].values())
    answered = outcomes["steady"]["answered"] / steady_sent if steady_sent else 0.0
    return {
        "benchmark": "fair share per key under overload (rag bench fairness)",
        "params": {**params.__dict__, "honour_retry_after": honour_retry_after},
        "keys": {
            key: {
                "requests": sum(outcomes[key].values()),
                "outcomes": dict(outcomes[key]),
                "ms": {k: v if k == "n" else round(float(v), 1) for k, v in percentiles(latencies[key]).items()},
            }
            for key in ("flood", "steady")
        },
        "steady_answered": round(answered, 3),
        "target_answered": TARGET_ANSWERED,
        "met": answered >= TARGET_ANSWERED,
        "machine": machine_info({"server": "in-process uvicorn, in-memory RagApp, fixed answer time"}),
    }


def run_fairness_bench_command(
    params: FairnessBenchParams, honour_retry_after: bool, as_json: bool, output: Path
) -> None:
    """Run the bench, write its JSON to `output`, print a table (or the JSON with `as_json`)."""
    emit_report(asyncio.run(run_fairness_bench(params, honour_retry_after)), as_json, output, render)


def render(results: dict[str, Any], console: Any) -> None:
    """A rich table of each key's requests, outcomes and latency, then the steady key's answered share."""
    from rich.table import Table

    table = Table("key", "requests", "outcomes", "p50 ms", "p95 ms", "p99 ms", title="one key floods, one asks 1/s")
    for key, row in results["keys"].items():
        ms = row["ms"]
        outcomes = ", ".join(f"{k} {v}" for k, v in sorted(row["outcomes"].items()))
        table.add_row(key, str(row["requests"]), outcomes, str(ms.get("p50")), str(ms.get("p95")), str(ms.get("p99")))
    console.print(table)
    verdict = "met" if results["met"] else "NOT met"
    console.print(
        f"steady key answered: {results['steady_answered']:.1%} (target ≥ {results['target_answered']:.0%}: {verdict})"
    )
