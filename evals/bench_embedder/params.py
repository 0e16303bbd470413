"""What one `rag bench embedder` run does (`BenchParams`) and what it measures per point (`Point`)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

MODEL = "all-minilm-l6-v2"
INT8_MODEL = "all-minilm-l6-v2-int8"
SETUPS = ("triton_dynamic", "triton_no_batching", "naive", "ceiling", "triton_replicas")
"""Every setup `--setup` accepts; all but `triton_replicas` run by default."""
REPORT_CONCURRENCY = 32
"""The concurrency of the headline figures and the targets (issue: "at concurrency 32 on short queries")."""


@dataclass
class BenchParams:
    """What one benchmark run does.

    Attributes:
        requests: requests per (setup, short, concurrency) point.
        abstract_requests: requests per (setup, abstract, concurrency) point (abstracts cost ~15x a claim).
        buckets: the client's padded lengths (default `tools.embedder.length_buckets`).
        concurrencies: requests in flight, swept.
        lengths: text classes, `short` and/or `abstract`.
        setups: which of triton_dynamic, triton_no_batching, naive, ceiling to run.
        threads: model threads of every setup (ORT intra-op in Triton and in process, torch in the naive server).
        queue_delay_us: the dynamic batcher's `max_queue_delay_microseconds` for `triton_dynamic`.
        queue_delays_us: extra delays to sweep at short / concurrency 32 (empty: no sweep).
        int8: also measure the int8 model at concurrency 32 when it is exported.
        max_seconds_per_point: stop issuing requests of one point after this many seconds.
        port_base: first of the ports the benchmark's servers use (Triton gRPC/HTTP/metrics, naive server);
            0 picks free ports.
        data_dir: where the benchmark's servers keep PID files and logs.
        repeats: rounds; every point of every setup is measured once per round, the setups in a rotated order
            (`evals.repeats.rotation`), and reported as the median of the rounds with its spread.
        max_in_flight: the Triton client's in-flight limit (None: the app's `TRITON_MAX_IN_FLIGHT`).
    """

    requests: int = 200
    abstract_requests: int = 48
    buckets: tuple[int, ...] | None = None
    concurrencies: tuple[int, ...] = (1, 8, 32, 64)
    lengths: tuple[str, ...] = ("short", "abstract")
    setups: tuple[str, ...] = ("triton_dynamic", "triton_no_batching", "naive", "ceiling")
    threads: int = field(default_factory=lambda: os.cpu_count() or 1)
    queue_delay_us: int = 2000
    queue_delays_us: tuple[int, ...] = ()
    int8: bool = True
    max_seconds_per_point: float = 30.0
    port_base: int = 0
    data_dir: Path = Path(".rag/bench")
    repeats: int = 3
    max_in_flight: int | None = None


@dataclass
class Point:
    """One measured point. Latency in ms (numpy percentiles, linear interpolation) over `n` requests."""

    setup: str
    length: str
    concurrency: int
    n: int
    rps: float
    seq_per_s: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    mean_batch: float
    wall_s: float
    client_cpu_cores: float | None = None
    """CPU the benchmark's own process used over the point, in cores (CPU seconds / wall seconds)."""
    server_cpu_cores: float | None = None
    """CPU the server's process tree used over the point, in cores (None: in process, no server)."""
    round: int = 0
    """The round (0-based) of a repeated run this point was measured in."""
