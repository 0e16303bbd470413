"""The replica setup of the embedder benchmark: two Tritons on this machine, the client given both
(`TRITON_GRPC_URL=a,b`), short queries at `REPORT_CONCURRENCY`; the share of requests each server served, from
its own statistics (Triton statistics extension), next to the throughput and latency the client saw.

Both servers share the machine's cores (and those of the load generator), so the throughput says nothing about
scaling; the share is the figure (issue target: each serves 35-65 %)."""

from __future__ import annotations

import logging
from dataclasses import asdict
from typing import Any

from agent.config.settings import Settings
from agent.core.app import build_embedder
from evals.bench_embedder.load import run_load, summarize
from evals.bench_embedder.params import REPORT_CONCURRENCY, BenchParams, Point
from evals.bench_embedder.triton_setup import configure
from infra import processes, triton
from infra.config import StackConfig

log = logging.getLogger(__name__)

REPLICAS = 2
SETUP = "triton_replicas"


def replica_settings(params: BenchParams, base: Settings) -> list[Settings]:
    """Settings of the `REPLICAS` servers: each its own data dir (`<bench data dir>/replica-<i>`) and ports
    (`port_base + 4 + 3i` onwards, or free ports)."""
    replicas = []
    for i in range(REPLICAS):
        first = params.port_base + 4 + 3 * i if params.port_base else 0
        ports = [first + k for k in range(3)] if first else [processes.free_port() for _ in range(3)]
        replicas.append(
            base.model_copy(
                update={
                    "data_dir": params.data_dir / f"replica-{i}",
                    "triton_grpc_url": f"127.0.0.1:{ports[0]}",
                    "triton_http_port": ports[1],
                    "triton_metrics_port": ports[2],
                    "triton_extra_models": (),
                }
            )
        )
    return replicas


async def replica_point(texts: list[str], params: BenchParams, base: Settings) -> tuple[Point, dict[str, Any]]:
    """Start the replicas, drive short queries at `REPORT_CONCURRENCY` through one client over all of them, and
    stop them (by PID, whatever happens).

    Returns:
        the client-side point, and `{"endpoints", "served", "share", "point"}`: per endpoint the requests it
        served during the point (delta of its `success_count`) and their share of the total.
    """
    replicas = replica_settings(params, base)
    try:
        for replica in replicas:
            triton.start(StackConfig.of(replica))
        url = ",".join(r.triton_grpc_url for r in replicas)
        client_settings = base.model_copy(update={"triton_grpc_url": url})
        async with build_embedder(client_settings, timeout_s=120.0, buckets=params.buckets) as client:
            await configure(client, params.threads, params.queue_delay_us)

            async def call(text: str) -> object:
                return await client.embed([text], "query")

            await run_load(call, texts, min(8, REPORT_CONCURRENCY), REPORT_CONCURRENCY, 10.0)  # warm-up
            before = await client.endpoint_statistics()
            latencies, wall = await run_load(
                call, texts, params.requests, REPORT_CONCURRENCY, params.max_seconds_per_point
            )
            after = await client.endpoint_statistics()
    finally:
        for replica in replicas:
            triton.stop(StackConfig.of(replica))
    served = {e: int(after[e]["success_count"] - before[e]["success_count"]) for e in after}
    total = sum(served.values())
    point = summarize(SETUP, "short", REPORT_CONCURRENCY, latencies, wall)
    executions = sum(after[e]["execution_count"] - before[e]["execution_count"] for e in after)
    inferences = sum(after[e]["inference_count"] - before[e]["inference_count"] for e in after)
    point.mean_batch = inferences / executions if executions else 0.0
    log.info("%s served %s", point, served)
    report = {
        "endpoints": list(served),
        "served": list(served.values()),
        "share": [round(n / total, 3) if total else None for n in served.values()],
        "point": asdict(point),
    }
    return point, report
