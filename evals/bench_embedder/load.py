"""The load generator of the embedder benchmark: the SciFact texts, closed-loop workers, and a point's summary."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence

import numpy as np
import psutil

from evals.bench_embedder.params import BenchParams, Point
from evals.scifact import claim_texts, load_corpus
from tools.records import TextKind


def load_texts() -> dict[str, list[str]]:
    """SciFact texts: `short` = the test claims, `abstract` = the first 2,000 abstracts in the form ingestion embeds
    (`CorpusDoc.content`: title, blank line, text)."""
    claims = list(claim_texts("test").values())
    abstracts = [doc.content for doc in load_corpus().values() if doc.content.strip()][:2000]
    return {"short": claims, "abstract": abstracts}


def n_requests(params: BenchParams, length: str) -> int:
    """Requests per point for texts of `length`."""
    return params.requests if length == "short" else params.abstract_requests


def kind_of(length: str) -> TextKind:
    """Short texts are queries (query prefix, if the model has one), abstracts are documents."""
    return "query" if length == "short" else "document"


def cpu_by_process(pid: int | None = None) -> dict[int, float]:
    """User + system CPU seconds used so far by process `pid` (None: this process) and each of its live children."""
    process = psutil.Process(pid)
    tree = [process, *process.children(recursive=True)] if pid is not None else [process]
    out: dict[int, float] = {}
    for proc in tree:
        try:
            times = proc.cpu_times()
        except psutil.NoSuchProcess:
            continue
        out[proc.pid] = times.user + times.system
    return out


def cpu_seconds(pid: int | None = None) -> float:
    """User + system CPU seconds used so far by process `pid` (None: this process) and its live children, s.

    A child that has exited is not counted (the servers' model processes live for the whole benchmark).
    """
    return sum(cpu_by_process(pid).values())


def cpu_used(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds used between two `cpu_by_process` snapshots: by the processes alive at the end (all of a new
    one's time), so a child that exited meanwhile (a reloaded model's stub) never makes the figure negative."""
    return sum(t - before.get(p, 0.0) for p, t in after.items())


async def measured_load(
    call: Callable[[str], Awaitable[object]],
    texts: Sequence[str],
    n: int,
    concurrency: int,
    max_seconds: float,
    server_pid: int | None,
) -> tuple[list[float], float, float, float | None]:
    """`run_load`, plus the cores used meanwhile by this process and by the server's process tree.

    On a machine with few cores the client's and the serving layer's CPU is taken from the model's: these two
    figures say how much of the gap to the in-process ceiling they explain.

    Returns:
        latencies (s), wall time (s), client cores, server cores (None when `server_pid` is None).
    """
    client0 = cpu_seconds()
    server0 = cpu_by_process(server_pid) if server_pid is not None else {}
    latencies, wall = await run_load(call, texts, n, concurrency, max_seconds)
    client = (cpu_seconds() - client0) / wall
    server = cpu_used(server0, cpu_by_process(server_pid)) / wall if server_pid is not None else None
    return latencies, wall, client, server


def summarize(setup: str, length: str, concurrency: int, latencies_s: Sequence[float], wall_s: float) -> Point:
    """A `Point` from per-request latencies (seconds) and the wall time of the point (seconds)."""
    ms = np.asarray(latencies_s, dtype=np.float64) * 1000
    p50, p95, p99 = (float(v) for v in np.percentile(ms, [50, 95, 99]))
    rps = len(ms) / wall_s
    return Point(setup, length, concurrency, len(ms), rps, rps, p50, p95, p99, 1.0, wall_s)


async def run_load(
    call: Callable[[str], Awaitable[object]], texts: Sequence[str], n: int, concurrency: int, max_seconds: float
) -> tuple[list[float], float]:
    """Send `n` calls (texts cycled) with `concurrency` workers; stop issuing after `max_seconds`.

    Returns:
        per-call latencies in seconds (completed calls only) and the wall time in seconds.
    """
    latencies: list[float] = []
    issued = 0
    start = time.perf_counter()
    deadline = start + max_seconds

    async def worker() -> None:
        nonlocal issued
        while issued < n and time.perf_counter() < deadline:
            text = texts[issued % len(texts)]
            issued += 1
            t0 = time.perf_counter()
            await call(text)
            latencies.append(time.perf_counter() - t0)

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return latencies, time.perf_counter() - start
