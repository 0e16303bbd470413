"""The naive setup of the embedder benchmark: FastAPI + Transformers (`evals.naive_server`) under uvicorn, called
over HTTP with httpx."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import httpx

from evals.bench_embedder.load import measured_load, n_requests, run_load, summarize
from evals.bench_embedder.params import MODEL, BenchParams, Point
from infra import processes

log = logging.getLogger(__name__)

NAIVE_NAME = "naive-embedder"
PACKAGE_ROOT = Path(__file__).resolve().parents[2]
"""The directory holding the `evals` package (the source checkout, or site-packages when installed)."""


def start_naive(params: BenchParams, port: int) -> None:
    """Start `evals.naive_server` with uvicorn (detached, PID file in the bench run dir) and wait for /health.

    Raises:
        processes.ServiceError: the port is taken or the server does not become ready in 180 s.
    """
    run_dir = params.data_dir.resolve() / "run"
    processes.require_free_ports(NAIVE_NAME, {"--port-base + 3": port})
    argv = [sys.executable, "-m", "uvicorn", "evals.naive_server:app", "--host", "127.0.0.1", "--port", str(port)]
    env = dict(os.environ, NAIVE_MODEL=MODEL, NAIVE_THREADS=str(params.threads), PYTHONPATH=str(PACKAGE_ROOT))
    env["HF_HUB_OFFLINE"] = "1"
    pid = processes.spawn(run_dir, NAIVE_NAME, argv, env=env)

    def ready() -> bool:
        try:
            return bool(httpx.get(f"http://127.0.0.1:{port}/health", timeout=2.0).json()["ready"])
        except httpx.HTTPError:
            return False

    processes.wait_until_ready(NAIVE_NAME, ready, 180.0, pid, run_dir)


async def naive_points(texts: dict[str, list[str]], params: BenchParams, port: int) -> list[Point]:
    """Sweep lengths x concurrencies against the naive server over HTTP (httpx, one connection per worker), with
    the CPU this process and the server used per point."""
    points = []
    pid = processes.read_pid(params.data_dir.resolve() / "run", NAIVE_NAME)
    limits = httpx.Limits(
        max_connections=max(params.concurrencies), max_keepalive_connections=max(params.concurrencies)
    )
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", limits=limits, timeout=120.0) as http:

        async def call(text: str) -> object:
            response = await http.post("/embed", json={"text": text})
            response.raise_for_status()
            return response.json()

        for length in params.lengths:
            for concurrency in params.concurrencies:
                await run_load(call, texts[length], min(8, concurrency), concurrency, 10.0)
                latencies, wall, client_cpu, server_cpu = await measured_load(
                    call, texts[length], n_requests(params, length), concurrency, params.max_seconds_per_point, pid
                )
                point = summarize("naive", length, concurrency, latencies, wall)
                point.client_cpu_cores, point.server_cpu_cores = client_cpu, server_cpu
                log.info("%s", point)
                points.append(point)
    return points
