"""Refusals under a burst (`rag bench burst`): how long a refused answer request waits for its 503 when 128 clients
arrive at once, and under open-loop (Poisson) arrivals, measured by a load generator that is not itself starved.

The server is the real HTTP app (`agent.http.create_app`: guards, admission gate, admission control) under uvicorn in
a **separate process** (`python -m evals.bench_burst --serve PORT`), over an in-memory `RagApp` whose LLM holds each
answer's slot `answer_s` seconds (`evals.bench_fairness.SlowModel`), keyless. The load generator is this process: it
raises its own priority (niceness -10 when allowed; otherwise the server gets +10, so the difference is the same) and
speaks plain HTTP/1.1 over asyncio streams (no client library on the hot path), one fresh connection per request,
as clients that arrive do (`Connection: close`).

- **Burst**: `clients` connections opened at the same instant (a shared start event), each sending one `POST
  /v1/ask`; the first `ANSWER_MAX_IN_PROGRESS + ANSWER_QUEUE_MAX` are admitted, the rest refused. Latency = connect
  + request until the response's status line. Repeated `bursts` times (each after the last one's answers finished),
  after one warm-up burst that is not counted.
- **Open loop**: arrivals at `rate` per second (exponential gaps, seeded) for `seconds`, never waiting for the server.

Each phase reports the refusals' p50/p95/p99/max (ms) with their count; bursts also as the median over bursts of each
burst's p99 with its spread (`evals.repeats`), judged against `TARGET_P99_MS`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from evals.machine import machine_info
from evals.repeats import judged
from tools.stats import percentiles

TARGET_P99_MS = 250.0
"""A refusal's p99 here (2 shared cores), burst and open loop alike."""
BODY = json.dumps({"question": "Vitamin B12 deficiency and homocysteine"}).encode()


@dataclass(frozen=True)
class BurstParams:
    """The load: `bursts` bursts of `clients` at once; `rate` arrivals/s for `seconds` in the open loop (0: none);
    each admitted answer holds its slot `answer_s`; the server's `max_in_progress` and `queue_max`."""

    clients: int = 128
    bursts: int = 5
    rate: float = 100.0
    seconds: float = 10.0
    answer_s: float = 1.0
    max_in_progress: int = 4
    queue_max: int = 16
    seed: int = 0


def request_bytes(host: str, port: int) -> bytes:
    """One `POST /v1/ask` with a JSON question, `Connection: close`."""
    head = (
        f"POST /v1/ask HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(BODY)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + BODY


async def one_request(host: str, port: int, payload: bytes) -> tuple[int, float]:
    """Connect, send `payload`, read to the status line: (HTTP status or 0 on a connection error, ms to it); the
    rest of the response is read and the connection closed afterwards, outside the figure."""
    start = time.perf_counter()
    try:
        reader, writer = await asyncio.open_connection(host, port)
    except OSError:
        return 0, (time.perf_counter() - start) * 1000
    try:
        writer.write(payload)
        await writer.drain()
        line = await reader.readline()
        elapsed = (time.perf_counter() - start) * 1000
        parts = line.split()
        status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
        await reader.read()
        return status, elapsed
    except OSError:
        return 0, (time.perf_counter() - start) * 1000
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


def summarize(results: Sequence[tuple[int, float]]) -> dict[str, Any]:
    """Counts per status and the refusals' (503) latency percentiles and max, ms."""
    refused = [ms for status, ms in results if status == 503]
    statuses: dict[str, int] = {}
    for status, _ in results:
        statuses[str(status)] = statuses.get(str(status), 0) + 1
    stats: dict[str, float | int | None] = {
        k: (v if k == "n" else round(float(v), 1)) for k, v in percentiles(refused).items()
    }
    stats["max"] = round(max(refused), 1) if refused else None
    return {"statuses": statuses, "refusal_ms": stats}


async def burst(host: str, port: int, clients: int) -> list[tuple[int, float]]:
    """`clients` requests started at the same instant; their (status, ms)."""
    payload = request_bytes(host, port)
    go = asyncio.Event()

    async def client() -> tuple[int, float]:
        await go.wait()
        return await one_request(host, port, payload)

    tasks = [asyncio.create_task(client()) for _ in range(clients)]
    await asyncio.sleep(0.05)  # every task waits on the event
    go.set()
    return list(await asyncio.gather(*tasks))


async def open_loop(host: str, port: int, rate: float, seconds: float, seed: int) -> list[tuple[int, float]]:
    """Poisson arrivals at `rate`/s for `seconds`; each request on its own connection, never waited for."""
    payload = request_bytes(host, port)
    rng = np.random.default_rng(seed)
    tasks: list[asyncio.Task[tuple[int, float]]] = []
    start = time.perf_counter()
    due = start
    while due - start < seconds:
        due += float(rng.exponential(1.0 / rate))
        await asyncio.sleep(max(0.0, due - time.perf_counter()))
        tasks.append(asyncio.create_task(one_request(host, port, payload)))
    return list(await asyncio.gather(*tasks))


def prioritise(server: subprocess.Popen[bytes]) -> str:
    """Give this process (the load generator) the CPU first: niceness -10 for it when allowed, else +10 for the
    server. Returns which was done."""
    try:
        os.setpriority(os.PRIO_PROCESS, 0, -10)
        return "load generator at niceness -10, server at 0"
    except PermissionError:
        os.setpriority(os.PRIO_PROCESS, server.pid, 10)
        return "load generator at niceness 0, server at 10"


async def wait_ready(host: str, port: int, timeout_s: float = 60.0) -> None:
    """Until `GET /health` answers at all (any status).

    Raises:
        TimeoutError: nothing answered in `timeout_s` seconds.
    """
    deadline = time.perf_counter() + timeout_s
    payload = f"GET /health HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode()
    while time.perf_counter() < deadline:
        status, _ = await one_request(host, port, payload)
        if status:
            return
        await asyncio.sleep(0.2)
    raise TimeoutError(f"the burst server on {host}:{port} did not answer /health in {timeout_s} s")


async def measure(params: BurstParams, host: str, port: int) -> dict[str, Any]:
    """A warm-up burst (not counted: the app's first answers import and build what later ones reuse), then the
    bursts (each after the last one's answers ended) and the open loop, against a ready server."""
    await burst(host, port, params.clients)
    bursts = []
    for _ in range(params.bursts):
        bursts.append(summarize(await burst(host, port, params.clients)))
    p99s = [float(b["refusal_ms"]["p99"]) for b in bursts if b["refusal_ms"]["n"]]
    report: dict[str, Any] = {"bursts": bursts}
    report["burst_p99_ms"] = judged(p99s, f"< {TARGET_P99_MS:g}", digits=1)
    if params.rate > 0 and params.seconds > 0:
        loop = summarize(await open_loop(host, port, params.rate, params.seconds, params.seed))
        report["open_loop"] = loop
        p99 = loop["refusal_ms"].get("p99")
        report["open_loop_p99_ms"] = judged([float(p99)] if p99 is not None else [], f"< {TARGET_P99_MS:g}", 1)
    return report


def run_burst_bench(params: BurstParams) -> dict[str, Any]:
    """Start the server process, take priority, measure, stop the server; the report of `rag bench burst --json`."""
    from infra import processes

    host, port = "127.0.0.1", processes.free_port()
    machine = machine_info({"server": "real HTTP app, in-memory RagApp, fixed answer time, own process"})
    argv = [sys.executable, "-m", "evals.bench_burst", "--serve", str(port), json.dumps(asdict(params))]
    server = subprocess.Popen(argv, env=dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1])))
    try:
        asyncio.run(wait_ready(host, port))
        priority = prioritise(server)
        report = asyncio.run(measure(params, host, port))
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    machine["load_average_1m_at_end"] = round(os.getloadavg()[0], 2)
    return {**report, "priority": priority, "params": asdict(params), "machine": machine}


def serve(port: int, params: BurstParams) -> None:
    """The server process: the real app over an in-memory RagApp whose answers hold their slot `answer_s`."""
    import uvicorn
    from pydantic_ai.models.function import FunctionModel

    from agent.config.settings import Settings
    from agent.core.app import RagApp
    from agent.core.wiring import Services
    from agent.http import create_app
    from evals.bench_fairness import DOCUMENT, SlowModel
    from tools.in_memory import InMemoryCollection

    settings = Settings.model_validate(
        {
            "refusal_min_score": 0.0,
            "answer_cache": False,
            "answer_max_in_progress": params.max_in_progress,
            "answer_queue_max": params.queue_max,
            "answer_queue_deadline_s": 60.0,
        }
    )
    collection = InMemoryCollection([DOCUMENT])
    model = FunctionModel(stream_function=SlowModel(params.answer_s).stream)
    app = create_app(settings, rag=RagApp(settings, Services(collection, collection, model, {})))
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


def render(report: dict[str, Any], console: Any) -> None:
    """The bursts and the open loop as a Rich table, then the verdicts."""
    from rich.table import Table

    p = report["params"]
    table = Table(
        "phase", "statuses", "refused n", "p50 ms", "p95 ms", "p99 ms", "max ms",
        title=f"refusals: bursts of {p['clients']} at once, open loop {p['rate']:g}/s; {report['priority']}",
    )  # fmt: skip
    rows = [(f"burst {i + 1}", b) for i, b in enumerate(report["bursts"])]
    if "open_loop" in report:
        rows.append(("open loop", report["open_loop"]))
    for name, phase in rows:
        ms = phase["refusal_ms"]
        statuses = ", ".join(f"{k}: {v}" for k, v in sorted(phase["statuses"].items()))
        cells = [str(ms.get(k, "-")) for k in ("n", "p50", "p95", "p99", "max")]
        table.add_row(name, statuses, *cells)
    console.print(table)
    for key in ("burst_p99_ms", "open_loop_p99_ms"):
        entry = report.get(key)
        if entry and entry["value"] is not None:
            s = entry["spread"]
            console.print(
                f"{key}: {entry['value']} ({s['low']}–{s['high']}), target {entry['target']}: {entry['verdict']}"
            )


if __name__ == "__main__" and len(sys.argv) == 4 and sys.argv[1] == "--serve":
    serve(int(sys.argv[2]), BurstParams(**json.loads(sys.argv[3])))
